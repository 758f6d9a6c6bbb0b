"""Did a change move the grid's rows? The same rows of two pipeline runs, paired query by query.

Run by hand, never as a test, on two data folders that each hold <dataset>/generation/<row>/
(a run's data/, or a copy kept before a `dvc exp run` changed the workspace):

    python benchmarks/compare_rows.py BEFORE AFTER --dataset nell995 [--rows symbolic ...]
        [--out FILE]

For every row both runs answered (or those named), the EM of each side on their common queries,
the queries only one side answers exactly, and the exact McNemar p-value
(`rulerag.evaluation.claims.paired_em`, the report's own paired test), beside the rows' T-F1
and, for rank rows, the gold answer's MRR among the candidates and how often it is among them.
A row whose queries differ between the two runs is compared on the queries both answered, and
says how many that is.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rulerag import markdown  # noqa: E402
from rulerag.evaluation.claims import p_text, paired_em  # noqa: E402
from rulerag.evaluation.grid_report import read_row  # noqa: E402
from rulerag.layout import DataLayout  # noqa: E402


def compare(before: Path, after: Path, dataset: str, rows: list[str] | None) -> list[dict]:
    """One record per row present in both runs (all such rows when `rows` is None)."""
    first, second = DataLayout.of(before, dataset), DataLayout.of(after, dataset)
    if rows is None:
        names = {p.name for p in first.generation.iterdir() if (p / "predictions.jsonl").is_file()}
        rows = sorted(n for n in names if (second.row(n) / "predictions.jsonl").is_file())
    records = []
    for row in rows:
        old, new = read_row(first.row(row)), read_row(second.row(row))
        for side, outcome, layout in (("before", old, first), ("after", new, second)):
            if outcome is None:
                raise SystemExit(f"{layout.row(row)}: no predictions.jsonl / metrics.json ({side})")
        assert old is not None and new is not None
        paired = paired_em(new.em_by_query, old.em_by_query)
        records.append(
            {
                "row": row,
                "queries": paired.queries,
                "em_before": round(100 * paired.em_b, 1),
                "em_after": round(100 * paired.em_a, 1),
                "only_after": paired.a_only,
                "only_before": paired.b_only,
                "p": paired.p_value,
                "tf1_before": _figure(old.metrics, "token_f1"),
                "tf1_after": _figure(new.metrics, "token_f1"),
                "mrr_before": _figure(old.metrics, "rank_mrr"),
                "mrr_after": _figure(new.metrics, "rank_mrr"),
                "gold_before": _figure(old.metrics, "gold_among_candidates"),
                "gold_after": _figure(new.metrics, "gold_among_candidates"),
            }
        )
    return records


def _figure(metrics: dict, key: str) -> float | None:
    """A row's metric in percent, as the grid prints it (None where the row has none)."""
    value = metrics.get(key)
    return None if value is None else round(100 * float(value), 1)


def to_markdown(records: list[dict]) -> str:
    """The comparison as the docs print it."""
    header = ["row", "queries", "EM before → after", "only after / only before right, p"]
    header += ["T-F1 before → after", "rank MRR before → after", "gold among candidates (%)"]
    rows = []
    for r in records:
        mrr = "–" if r["mrr_before"] is None else f"{r['mrr_before']} → {r['mrr_after']}"
        gold = "–" if r["gold_before"] is None else f"{r['gold_before']} → {r['gold_after']}"
        rows.append(
            [
                f"`{r['row']}`",
                r["queries"],
                f"{r['em_before']} → {r['em_after']}",
                f"{r['only_after']} / {r['only_before']}, p {p_text(r['p'])}",
                f"{r['tf1_before']} → {r['tf1_after']}",
                mrr,
                gold,
            ]
        )
    return markdown.table(header, rows, align="lrrrrrr")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="data folder of the first run")
    parser.add_argument("after", type=Path, help="data folder of the second run")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--rows", nargs="+", help="grid rows (default: every row both have)")
    parser.add_argument("--out", type=Path, help="also write the records as JSON here")
    args = parser.parse_args()
    records = compare(args.before, args.after, args.dataset, args.rows)
    print(to_markdown(records))
    if args.out:
        args.out.write_text(json.dumps(records, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
