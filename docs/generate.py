"""Render the generated blocks of the docs from what the pipeline itself prints or writes.

Two kinds of block, each between `<!-- generated:<key> -->` and `<!-- /generated -->`:

* `dvc-dag` (docs/data-flow.md): the stage graph as `dvc dag --mermaid` prints it for a copy of
  the project with every opt-in stage switched on (`OPT_IN`), each stage's instances
  (`generate@icews14-rulerag_ft`, ...) folded into one node per stage. `dvc dag` needs no
  outputs, so this runs anywhere DVC is installed.
* `<dataset>/<path>` (docs/results.md, README.md): one stage output under a `data/` folder,
  e.g. `icews14/report/results.md`. A Markdown output is embedded as the stage wrote it (its
  title dropped, its headings made bold so the page's outline stays the page's);
  `benchmark/stats.json` and `rules/stats.json` become small tables, `report/results.csv` the
  README's compact grid. Every table gets the
  provenance line the docs' convention asks for (docs/results.md, "How to read this page"):
  the command, the stage instance, the date the stage wrote the file and the commit of the
  checkout that holds the `data/` folder.

Why a script in docs/ and not a module of the library: it formats documentation, the stages
never call it, and it must not become a dependency of any stage (dvc.yaml's code deps).

    python docs/generate.py dag                      # rewrite docs/data-flow.md's diagram
    python docs/generate.py results --data data      # rewrite docs/results.md's and the
                                                     # README's blocks
    python docs/generate.py results --data ../other/data --command "make run"
    python docs/generate.py dag --check              # exit 1 when the doc is out of date

A block whose source file is missing is kept as it is (and reported), so a partial run renders
what it has.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rulerag import markdown

PROJECT = Path(__file__).resolve().parents[1]
RESULTS_DOC = PROJECT / "docs" / "results.md"
README = PROJECT / "README.md"
DATA_FLOW_DOC = PROJECT / "docs" / "data-flow.md"
DAG_KEY = "dvc-dag"

#: params that switch the opt-in stages on for the diagram (the values of the Makefile's
#: exp-r2ag, exp-robustness, exp-generalisation, export targets; `popqa` stands for any QA set)
OPT_IN: dict[str, list[str]] = {
    "r2ag.rows": ["r2ag", "rulerag_r2ag"],
    "generation.robustness_rows": ["standard_rag", "rulerag_icl", "rulerag_ft"],
    "generalisation.datasets": ["icews14"],
    "qa.datasets": ["popqa"],
    "export.datasets": ["icews14"],
}

_BLOCK = re.compile(
    r"(?P<open><!-- generated:(?P<key>[^ >]+) -->\n)(?P<body>.*?)(?P<close><!-- /generated -->)",
    re.DOTALL,
)
_NODE = re.compile(r'^\s*(\w+)\["([^"]+)"\]\s*$', re.MULTILINE)
_EDGE = re.compile(r"^\s*(\w+)\s*-->\s*(\w+)\s*$", re.MULTILINE)
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


# --- generated blocks -------------------------------------------------------------------------


def block_keys(text: str) -> list[str]:
    """The keys of a document's generated blocks, in order."""
    return [m.group("key") for m in _BLOCK.finditer(text)]


def block_body(text: str, key: str) -> str:
    """The current content of block `key` (KeyError when the document has none)."""
    for match in _BLOCK.finditer(text):
        if match.group("key") == key:
            return match.group("body")
    raise KeyError(key)


def fill_blocks(text: str, render: Callable[[str], str | None]) -> tuple[str, list[str]]:
    """`text` with each block's body replaced by `render(key)`; a `None` keeps the old body.

    Returns the new text and the keys that were kept."""
    kept: list[str] = []

    def replace(match: re.Match[str]) -> str:
        body = render(match.group("key"))
        if body is None:
            kept.append(match.group("key"))
            return match.group(0)
        return match.group("open") + body.rstrip("\n") + "\n" + match.group("close")

    return _BLOCK.sub(replace, text), kept


# --- the stage diagram ------------------------------------------------------------------------


def stage_edges(mermaid: str) -> set[tuple[str, str]]:
    """The stage-to-stage edges of `dvc dag --mermaid` output, instances folded into stages
    (`generate@icews14-rulerag_ft` -> `generate`); edges inside one stage are dropped."""
    names = {node: label.split("@", 1)[0] for node, label in _NODE.findall(mermaid)}
    edges = set()
    for source, target in _EDGE.findall(mermaid):
        if source not in names or target not in names:
            raise ValueError(f"dvc dag printed an edge to an unknown node: {source} --> {target}")
        if names[source] != names[target]:
            edges.add((names[source], names[target]))
    return edges


def mermaid_diagram(edges: Iterable[tuple[str, str]], order: Sequence[str]) -> str:
    """A Mermaid flowchart of `edges`, sorted by the stages' order in dvc.yaml."""
    rank = {name: i for i, name in enumerate(order)}

    def key(edge: tuple[str, str]) -> tuple[int, int, str, str]:
        return (rank.get(edge[0], len(rank)), rank.get(edge[1], len(rank)), *edge)

    lines = ["```mermaid", "flowchart TD"]
    lines += [f"  {a} --> {b}" for a, b in sorted(edges, key=key)]
    lines.append("```")
    return "\n".join(lines) + "\n"


def dvc_command() -> list[str]:
    """How to start DVC here: this interpreter's `-m dvc` if it has DVC, else `dvc` on PATH."""
    if importlib.util.find_spec("dvc") is not None:
        return [sys.executable, "-m", "dvc"]
    if shutil.which("dvc"):
        return ["dvc"]
    raise FileNotFoundError("DVC is not installed (neither `python -m dvc` nor `dvc` on PATH)")


def _set_dotted(params: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = params
    for part in parents:
        node = node[part]
    if leaf not in node:
        raise KeyError(f"params.yaml has no {dotted}")
    node[leaf] = value


def dvc_dag(project: Path = PROJECT, overrides: Mapping[str, Any] = OPT_IN) -> str:
    """`dvc dag --mermaid` for a scratch copy of the project's dvc.yaml and params.yaml with
    `overrides` applied (the project itself is never touched)."""
    params = yaml.safe_load((project / "params.yaml").read_text(encoding="utf-8"))
    for dotted, value in overrides.items():
        _set_dotted(params, dotted, value)
    dvc = dvc_command()
    with tempfile.TemporaryDirectory(prefix="rulerag-dag-") as scratch:
        root = Path(scratch)
        shutil.copy(project / "dvc.yaml", root / "dvc.yaml")
        (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), "utf-8")
        for command in (["init", "--no-scm", "-q"], ["dag", "--mermaid"]):
            done = subprocess.run(
                [*dvc, *command], cwd=root, check=True, capture_output=True, text=True
            )
    return done.stdout


def stage_order(project: Path = PROJECT) -> list[str]:
    """The stage names of dvc.yaml, in the file's order."""
    return list(yaml.safe_load((project / "dvc.yaml").read_text(encoding="utf-8"))["stages"])


def stage_diagram(project: Path = PROJECT) -> str:
    """The data-flow diagram's block body: every stage, opt-in ones switched on."""
    return mermaid_diagram(stage_edges(dvc_dag(project)), stage_order(project))


# --- results from stage outputs ---------------------------------------------------------------


@dataclass(frozen=True)
class Provenance:
    """Where a data folder's outputs come from: the command and the checkout's commit."""

    command: str
    commit: str
    local_changes: bool = False

    def line(self, stage: str, written: dt.date) -> str:
        """The docs' provenance line (docs/results.md, "How to read this page")."""
        changes = " + local changes" if self.local_changes else ""
        return (
            f"Command: `{self.command}` (stage `{stage}`) · Measured: {written.isoformat()}, "
            f"commit `{self.commit}`{changes} · rendered by `python docs/generate.py results`"
        )


def checkout_commit(folder: Path) -> tuple[str, bool]:
    """The short commit of the git checkout holding `folder`, and whether the code or the
    pipeline's files differ from it (ValueError outside a checkout)."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--short=7", "HEAD"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        changed = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no", "--",
             ":/rulerag", ":/pipeline_steps", ":/dvc.yaml", ":/params.yaml"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as error:
        raise ValueError(f"{folder} is not in a git checkout; pass --commit") from error
    return commit, bool(changed)


def stage_writing(relative: str, dvc_yaml: Mapping[str, Any]) -> str:
    """The stage instance of dvc.yaml whose outs, metrics or plots hold `<dataset>/<path>`."""
    dataset, _, rest = relative.partition("/")
    for name, stage in dvc_yaml["stages"].items():
        body = stage.get("do", stage)
        for section in ("outs", "metrics", "plots"):
            for entry in body.get(section) or ():
                path = next(iter(entry)) if isinstance(entry, Mapping) else str(entry)
                for item in ("${item}", "${item.dataset}"):
                    if path == f"data/{item}/{rest}":
                        return f"{name}@{dataset}" if "foreach" in stage else name
    raise KeyError(f"no stage of dvc.yaml writes data/<dataset>/{rest}")


def _number(value: Any) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


def benchmark_sizes(stats: Mapping[str, Any], dataset: str) -> str:
    """benchmark/stats.json as the paper's Table 1 row: ours (the paper's)."""
    paper = stats.get("paper") or {}
    columns = ("rules", "corpus", "f_r", "f_g", "test")
    cells = [f"{_number(stats[c])} ({_number(paper[c]) if c in paper else '–'})" for c in columns]
    header = [None, "rules", "corpus", "F_R", "F_G", "test"]
    return markdown.table(header, [[f"{dataset} (paper)", *cells]], align="lrrrrr") + "\n"


def mining_summary(stats: Mapping[str, Any], dataset: str) -> str:
    """rules/stats.json: what was mined, what the bank kept. (How long it took is no longer in
    the file, so that a rerun rewrites the same bytes: it is the MLflow metric
    `mining_seconds`, and "Rule mining speed" measures it.)"""
    by_length = "; ".join(
        f"{length} atom{'s' if length != '1' else ''}: {_number(n)}"
        for length, n in sorted(stats.get("rules_by_length", {}).items())
    )
    covered = f"{stats.get('relations_covered', '–')} of {stats.get('relations_with_facts', '–')}"
    paper = stats.get("paper_bank_size")
    header = [None, "miner", "rules mined", "bank (paper)", "head relations with a bank rule"]
    cells = [
        dataset,
        stats.get("miner", "–"),
        f"{_number(stats['rules'])} ({by_length})",
        f"{_number(stats['bank'])} ({_number(paper) if paper else '–'})",
        covered,
    ]
    return markdown.table(header, [cells], align="lllrr") + "\n"


def compact_grid(csv_text: str) -> str:
    """report/results.csv as the README's grid: each row's R@10 / EM / T-F1 beside the paper's."""
    rows = list(csv.DictReader(io.StringIO(csv_text)))

    def cell(value: str) -> str:
        return f"{float(value):.1f}" if value.strip() else "–"

    cells = [
        [
            f"{row['group']}: {row['configuration']}",
            *(cell(row[c]) for c in ("R@10", "EM", "T-F1")),
            " / ".join(cell(row[f"paper {c}"]) for c in ("R@10", "EM", "T-F1")),
        ]
        for row in rows
    ]
    header = ["row", "R@10", "EM", "T-F1", "paper R@10 / EM / T-F1"]
    return markdown.table(header, cells, align="lrrrr") + "\n"


def stamped_markdown(markdown: str, stamp: str) -> str:
    """A stage's Markdown made part of a page: its `# title` dropped, other headings bold,
    the provenance `stamp` before each table."""
    lines = markdown.rstrip("\n").split("\n")
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    while lines and not lines[0].strip():
        lines = lines[1:]
    out: list[str] = []
    in_table = False
    for line in lines:
        heading = _HEADING.match(line)
        if heading:
            line = f"**{heading.group(1)}**"
        starts_table = line.startswith("|") and not in_table
        in_table = line.startswith("|")
        if starts_table:
            while out and not out[-1].strip():
                out.pop()
            out += ([""] if out else []) + [stamp, ""]
        out.append(line)
    return "\n".join(out) + "\n"


def render_output(path: Path, relative: str, stamp: str) -> str:
    """The block body for one stage output."""
    dataset = relative.split("/", 1)[0]
    if relative.endswith("/benchmark/stats.json"):
        table = benchmark_sizes(json.loads(path.read_text(encoding="utf-8")), dataset)
        return f"{stamp}\n\n{table}"
    if relative.endswith("/rules/stats.json"):
        table = mining_summary(json.loads(path.read_text(encoding="utf-8")), dataset)
        return f"{stamp}\n\n{table}"
    if relative.endswith("/report/results.csv"):
        return f"{stamp}\n\n{compact_grid(path.read_text(encoding='utf-8'))}"
    if path.suffix == ".md":
        return stamped_markdown(path.read_text(encoding="utf-8"), stamp)
    raise ValueError(
        f"no renderer for {relative} (a .md output, a benchmark / rules stats.json or "
        "report/results.csv)"
    )


def render_results(
    text: str, data: Path, provenance: Provenance, dvc_yaml: Mapping[str, Any]
) -> tuple[str, list[str]]:
    """`text` with every `<dataset>/<path>` block rendered from `data`; returns the new text
    and the keys kept because their file is missing."""

    def render(key: str) -> str | None:
        if key == DAG_KEY:
            return None
        path = data / key
        if not path.is_file():
            return None
        written = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC).date()
        return render_output(path, key, provenance.line(stage_writing(key, dvc_yaml), written))

    return fill_blocks(text, render)


# --- command line -----------------------------------------------------------------------------


def _update(doc: Path, new: str, check: bool) -> int:
    old = doc.read_text(encoding="utf-8")
    if new == old:
        print(f"{doc.relative_to(PROJECT)}: up to date")
        return 0
    if check:
        print(f"{doc.relative_to(PROJECT)}: out of date (run python docs/generate.py)")
        return 1
    doc.write_text(new, encoding="utf-8")
    print(f"{doc.relative_to(PROJECT)}: rewritten")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("dag", "results"))
    parser.add_argument("--data", type=Path, default=PROJECT / "data", help="a data/ folder")
    parser.add_argument("--command", default="make run", help="what produced --data")
    parser.add_argument("--commit", help="the commit that produced --data (default: its checkout)")
    parser.add_argument("--check", action="store_true", help="exit 1 instead of rewriting")
    args = parser.parse_args(argv)
    if args.what == "dag":
        text = DATA_FLOW_DOC.read_text(encoding="utf-8")
        new, _ = fill_blocks(text, lambda key: stage_diagram() if key == DAG_KEY else None)
        return _update(DATA_FLOW_DOC, new, args.check)
    data = args.data.resolve()
    if not data.is_dir():
        parser.error(f"--data {args.data}: no such folder")
    commit, changed = (args.commit, False) if args.commit else checkout_commit(data)
    provenance = Provenance(args.command, commit, changed)
    dvc_yaml = yaml.safe_load((PROJECT / "dvc.yaml").read_text(encoding="utf-8"))
    status = 0
    for doc in (RESULTS_DOC, README):
        new, kept = render_results(doc.read_text(encoding="utf-8"), data, provenance, dvc_yaml)
        for key in kept:
            print(f"{doc.relative_to(PROJECT)}: kept as it was: {key} (no {data / key})")
        status = max(status, _update(doc, new, args.check))
    return status


if __name__ == "__main__":
    sys.exit(main())
