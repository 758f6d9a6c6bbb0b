"""What a DVC experiment is about, readable in a terminal (`make exp-*` prints it).

`dvc exp show --only-changed --md` prints every column that differs between the rows, and in
this project that is every metric file of every stage, hashes and counts included: the
`make exp-r2ag` table came out as lines of 61,054 characters. This reads the same data from
`dvc exp show --json` (DVC's machine-readable output) and prints, per experiment, what the
experiment changed (its params that differ from the commit it ran on) and what that moved:
the headline metrics (answer EM / token F1, R@10, MRR, Hits@k, rule-retrieval recall) that
differ from the commit's or exist only in the experiment, one metric a line, beside the
commit's value. Files are named by what they hold (`icews14 generation/r2ag`), not by path.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rulerag import markdown

#: Metric keys worth a line (a metric file's other numbers are counts, sizes and timings).
HEADLINE = re.compile(r"(^|\.)(em|token_f1|recall_at_\d+|mrr|hits_at_\d+|accuracy|f1)$")


@dataclass(frozen=True)
class Row:
    """One row of `dvc exp show --json`: a commit or an experiment, flattened."""

    name: str
    params: dict[str, Any]
    metrics: dict[tuple[str, str], float]


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _flatten(inner, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), value


def _row(entry: Mapping[str, Any], name: str) -> Row:
    data = entry.get("data") or {}
    params: dict[str, Any] = {}
    for file, content in (data.get("params") or {}).items():
        for key, value in _flatten((content or {}).get("data") or {}):
            params[key if file == "params.yaml" else f"{file}:{key}"] = value
    metrics: dict[tuple[str, str], float] = {}
    for file, content in (data.get("metrics") or {}).items():
        for key, value in _flatten((content or {}).get("data") or {}):
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if HEADLINE.search(key) and math.isfinite(value):
                metrics[(file, key)] = float(value)
    return Row(name=name, params=params, metrics=metrics)


def rows_from_json(text: str) -> list[tuple[Row, list[Row]]]:
    """(commit, its experiments) for each committed row of `dvc exp show --json` output."""
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"dvc exp show --json gave no JSON: {err}") from err
    out = []
    for entry in entries:
        if entry.get("rev") == "workspace":
            continue
        commit = _row(entry, entry.get("name") or str(entry.get("rev", ""))[:7])
        experiments = [
            _row(rev, group.get("name") or rev.get("name") or str(rev.get("rev", ""))[:7])
            for group in entry.get("experiments") or []
            for rev in group.get("revs") or []
            if not rev.get("error")
        ]
        out.append((commit, experiments))
    return out


def short_file(path: str) -> str:
    """`data/icews14/generation/r2ag/metrics.json` -> `icews14 generation/r2ag`."""
    parts = path.split("/")
    if parts and parts[0] == "data":
        parts = parts[1:]
    if parts and parts[-1] == "metrics.json":
        parts = parts[:-1]
    elif parts:
        parts[-1] = parts[-1].removesuffix(".json")
    if not parts:
        return path
    return f"{parts[0]} {'/'.join(parts[1:])}" if len(parts) > 1 else parts[0]


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}".rstrip("0").rstrip(".")


def describe(base: Row, experiment: Row) -> str:
    """Markdown for one experiment: changed params, then the headline metrics that moved."""
    lines = [f"## {experiment.name} (against {base.name})", ""]
    changed = [
        f"- `{key}`: {base.params.get(key, '–')} → {value}"
        for key, value in sorted(experiment.params.items())
        if base.params.get(key) != value
    ]
    lines += changed or ["- no params changed"]
    moved = [
        (file, key, base.metrics.get((file, key)), value)
        for (file, key), value in sorted(experiment.metrics.items())
        if base.metrics.get((file, key)) != value
    ]
    lines.append("")
    if not moved:
        lines.append("No headline metric moved.")
        return "\n".join(lines) + "\n"
    lines += markdown.table_lines(
        ["metrics of", "metric", "commit", "experiment"],
        [
            [short_file(file), key, _number(before), _number(after)]
            for file, key, before, after in moved
        ],
        align="llrr",
    )
    return "\n".join(lines) + "\n"


def summary(text: str, names: Sequence[str] = ()) -> str:
    """Every experiment of `dvc exp show --json` output (or those named), each described."""
    blocks = []
    found = set()
    for base, experiments in rows_from_json(text):
        for experiment in experiments:
            if names and experiment.name not in names:
                continue
            found.add(experiment.name)
            blocks.append(describe(base, experiment))
    missing = [name for name in names if name not in found]
    if missing:
        raise ValueError(f"no experiment named {', '.join(missing)} in dvc exp show")
    return "\n".join(blocks) if blocks else "No experiments.\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="experiments to describe (default: all)")
    args = parser.parse_args(argv)
    shown = subprocess.run(
        ["dvc", "exp", "show", "--json"], capture_output=True, text=True, check=False
    )
    if shown.returncode != 0:
        print(f"dvc exp show failed: {shown.stderr.strip()}", file=sys.stderr)
        return 1
    try:
        print(summary(shown.stdout, args.names), end="")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
