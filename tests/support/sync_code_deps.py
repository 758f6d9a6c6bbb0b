"""Bring dvc.yaml's code deps in line with what each stage imports (`code_deps`).

    python -m tests.support.sync_code_deps           # rewrite dvc.yaml, print what changed
    python -m tests.support.sync_code_deps --check   # exit 1 if anything would change

For every stage: a file dep the stage no longer imports is dropped, a folder dep that holds
nothing it imports is dropped, and each imported file no dep covers is added after the stage's
last code dep. Folder deps that still cover something stay (a cheap stage may list a whole
package), as do the comments and the order of everything else (ruamel round trip).
tests/unit/test_dvc_deps.py checks the result; this only saves writing it by hand after a
module moves.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from rulerag.orchestration.dvc_graph import build_graph, load_yaml
from tests.support.code_deps import CodeClosure, project_packages, stage_closure

PROJECT = Path(__file__).resolve().parents[2]


def example_params(root: Path) -> dict[str, Any]:
    """params.yaml with the opt-in matrix axes that are empty by default filled, so that every
    stage of dvc.yaml has an instance to read its command from."""
    params = load_yaml(root / "params.yaml")
    params["r2ag"]["rows"] = params["r2ag"]["rows"] or list(params["r2ag"]["variants"])
    generation = params["generation"]
    generation["robustness_rows"] = generation["robustness_rows"] or ["standard_rag"]
    params["qa"]["datasets"] = params["qa"]["datasets"] or ["toyqa"]
    params["generalisation"]["datasets"] = params["generalisation"]["datasets"] or ["icews14"]
    params["export"]["datasets"] = params["export"]["datasets"] or ["icews14"]
    return params


def stage_closures(root: Path) -> dict[str, CodeClosure]:
    """One import closure per stage of dvc.yaml (code deps do not vary by item)."""
    packages = project_packages(root)
    commands: dict[str, Any] = {}
    for instance in build_graph(root / "dvc.yaml", example_params(root)):
        commands.setdefault(instance.stage, instance.cmd)
    return {stage: stage_closure(cmd, root, packages) for stage, cmd in commands.items()}


def _covers(dep: str, path: str) -> bool:
    return path == dep or path.startswith(dep.rstrip("/") + "/")


def synced(deps: list[str], closure: CodeClosure, root: Path, packages: set[str]) -> list[str]:
    """`deps` with its code entries matching `closure` (the module docstring's rules)."""
    needed = sorted(closure.paths())

    def is_code(dep: str) -> bool:
        top = dep.split("/", 1)[0]
        return top in packages or top.removesuffix(".py") in packages

    kept = []
    for dep in deps:
        if not is_code(dep):
            kept.append(dep)
        elif (root / dep).is_dir():
            if any(_covers(dep, p) for p in needed):
                kept.append(dep)
        elif dep in needed:
            kept.append(dep)
    missing = [p for p in needed if not any(_covers(d, p) for d in kept if is_code(d))]
    last_code = max((i for i, d in enumerate(kept) if is_code(d)), default=-1)
    return kept[: last_code + 1] + missing + kept[last_code + 1 :]


def sync(root: Path = PROJECT, write: bool = True) -> list[str]:
    """Rewrite dvc.yaml's code deps; returns one line per changed stage."""
    yaml = YAML(typ="rt", pure=True)
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    path = root / "dvc.yaml"
    doc = yaml.load(path.read_text(encoding="utf-8"))
    packages = project_packages(root)
    changes = []
    for stage, closure in stage_closures(root).items():
        body = doc["stages"][stage]
        body = body["do"] if "foreach" in body else body
        before = [str(d) for d in body["deps"]]
        after = synced(before, closure, root, packages)
        if after != before:
            removed = [d for d in before if d not in after]
            added = [d for d in after if d not in before]
            changes.append(f"{stage}: -{removed} +{added}")
            deps = body["deps"]
            for dep in removed:
                del deps[[str(d) for d in deps].index(dep)]
            for dep in added:
                deps.insert(after.index(dep), dep)
    if write and changes:
        with open(path, "w", encoding="utf-8") as handle:
            yaml.dump(doc, handle)
    return changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    changes = sync(write=not args.check)
    print("\n".join(changes) or "dvc.yaml's code deps are in line with the imports")
    return 1 if args.check and changes else 0


if __name__ == "__main__":
    sys.exit(main())
