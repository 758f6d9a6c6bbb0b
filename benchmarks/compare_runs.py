"""Compare two `make run` output folders file by file: what a refactor must leave unchanged.

    python benchmarks/compare_runs.py ../before/data ../after/data

Every file under both folders is compared byte for byte. A JSON file that differs is compared
again without its timing fields (seconds, rates, timestamps: they differ between any two runs),
and reported as `timing only` when nothing else differs. Files that are known to differ between
two runs of the same code are listed apart, with the reason (BM25 indexes: bm25s orders its
vocabulary by Python's string hash, which is seeded per process; Lucene segments carry their
creation time and ids; a dense index's meta.json names the encoder's installed path and a
cache key from its files' mtimes; peft's adapter_config.json names the base model's path and
lists target modules in set order; embedding caches and checkpoints are not stage outputs).
Exit status 1 when any other file differs or exists on one side only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

#: JSON keys whose values are timings or rates of the run, not results
TIMING_KEY = re.compile(r"(^|_)seconds($|_)|_per_(second|minute)$")
#: timings written into Markdown (rule application: "10.4 s (5,782 queries a minute)")
TIMING_TEXT = re.compile(r"\b\d[\d,.]* s\b|\b\d[\d,]* queries a minute\b")
#: path patterns that differ between two runs of the same code, and why
RUN_DEPENDENT = {
    r"/retrieval/index/bm25/": "bm25s orders its vocabulary by Python's per-process string hash; "
    "Lucene segments carry creation times and ids",
    r"/retrieval/index/[^/]+/meta\.json$": "the encoder's installed path and a cache key from its "
    "files' mtimes (`encoders.model_fingerprint`): another venv, another key",
    r"/adapters/[^/]+/(README\.md|adapter_config\.json)$": "peft writes the base model's "
    "absolute path and `target_modules` from a set (hash-seeded order)",
    r"/retrieval/cache/": "embedding chunks cached during a run (not a stage output)",
    r"/retrieval/checkpoints/": "resumable training checkpoints (not a stage output)",
    r"/cache/": "LLM answer caches (not a stage output)",
}


def without_timings(value: Any) -> Any:
    """`value` with every timing field removed, at any depth."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if not TIMING_KEY.search(k)}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def timing_keys(a: Any, b: Any, where: str = "") -> list[str]:
    """The timing fields whose values differ between `a` and `b`."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) & set(b)):
            path = f"{where}.{key}" if where else key
            if TIMING_KEY.search(key):
                if a[key] != b[key]:
                    out.append(path)
            else:
                out += timing_keys(a[key], b[key], path)
        return out
    if isinstance(a, list) and isinstance(b, list):
        found = {k for x, y in zip(a, b, strict=False) for k in timing_keys(x, y, f"{where}[]")}
        return sorted(found)
    return []


def compare(before: Path, after: Path) -> dict[str, list[str]]:
    """Relative paths by verdict: identical, timing only, run-dependent, different, missing."""
    names = {p.relative_to(before).as_posix() for p in before.rglob("*") if p.is_file()}
    names |= {p.relative_to(after).as_posix() for p in after.rglob("*") if p.is_file()}
    verdicts: dict[str, list[str]] = {
        k: [] for k in ("identical", "timing only", "run-dependent", "different", "one side")
    }
    manifests = []
    for name in sorted(names):
        if name.endswith("manifest.json"):
            manifests.append(name)  # after its folder's files: it lists their hashes
            continue
        a, b = before / name, after / name
        reason = next((why for p, why in RUN_DEPENDENT.items() if re.search(p, "/" + name)), None)
        if not (a.is_file() and b.is_file()):
            side = f"only {'before' if a.is_file() else 'after'}"
            verdict = "run-dependent" if reason else "one side"
            verdicts[verdict].append(f"{name} ({side}{'; ' + reason if reason else ''})")
            continue
        if a.read_bytes() == b.read_bytes():
            verdicts["identical"].append(name)
            continue
        if reason:
            verdicts["run-dependent"].append(f"{name} ({reason})")
        elif name.endswith(".json") and _same_but_timings(a, b):
            keys = timing_keys(json.loads(a.read_text()), json.loads(b.read_text()))
            verdicts["timing only"].append(f"{name} ({', '.join(keys)})")
        elif name.endswith(".csv") and _csv_without_timings(a) == _csv_without_timings(b):
            verdicts["timing only"].append(f"{name} (its timing columns)")
        elif name.endswith(".md") and _masked(a) == _masked(b):
            verdicts["timing only"].append(f"{name} (the timings in its text)")
        else:
            verdicts["different"].append(name)
    for name in manifests:
        verdicts[_manifest_verdict(before, after, name, verdicts)].append(name)
    return verdicts


def _manifest_verdict(before: Path, after: Path, name: str, verdicts: dict[str, list[str]]) -> str:
    """A manifest (`io.staged_outputs`: each file's size and sha256) differs where its files
    do: `timing only` when every file whose entry changed differs in its timings only."""
    a, b = before / name, after / name
    if not (a.is_file() and b.is_file()):
        return "one side"
    if a.read_bytes() == b.read_bytes():
        return "identical"
    left, right = json.loads(a.read_text())["files"], json.loads(b.read_text())["files"]
    folder = name.rpartition("/")[0]
    changed = {f"{folder}/{f}".lstrip("/") for f in set(left) | set(right)
               if left.get(f) != right.get(f)}  # fmt: skip
    timing = {entry.split(" (")[0] for entry in verdicts["timing only"]}
    return "timing only" if changed <= timing else "different"


def _csv_without_timings(path: Path) -> list[list[str]]:
    """The rows of a CSV file without its timing columns (`seconds` in rule retrieval's)."""
    import csv

    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    keep = [i for i, column in enumerate(rows[0] if rows else []) if not TIMING_KEY.search(column)]
    return [[row[i] for i in keep if i < len(row)] for row in rows]


def _masked(path: Path) -> str:
    return TIMING_TEXT.sub("<timing>", path.read_text(encoding="utf-8"))


def _same_but_timings(a: Path, b: Path) -> bool:
    try:
        left, right = json.loads(a.read_text()), json.loads(b.read_text())
    except (ValueError, UnicodeDecodeError):
        return False
    return without_timings(left) == without_timings(right)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--list", action="store_true", help="also list the identical files")
    args = parser.parse_args(argv)
    verdicts = compare(args.before, args.after)
    for verdict, names in verdicts.items():
        print(f"{verdict}: {len(names)}")
        if verdict != "identical" or args.list:
            for name in names:
                print(f"  {name}")
    return 1 if verdicts["different"] or verdicts["one side"] else 0


if __name__ == "__main__":
    sys.exit(main())
