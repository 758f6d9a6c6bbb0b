"""The registered RuleRAG model against the grid row it packs, on the run's own queries.

`package_model` packs `serve.row` (RuleRAG-FT); the model answers live: it links, selects rules,
searches with the row's retriever and generates. This asks it every query of the row's
predictions.jsonl (the run's seeded `generation.test_queries`, 100 by default) by its id, once
all in one call in the grid's order (the grid's batches) and once one at a time (batches of
one, as the page asks), and counts the queries whose generation, documents (the first 10 with
rules) and rules equal the row's. Run by hand after `make run`, never as a test:

    .venv/bin/python benchmarks/serve_parity.py [--model models:/rulerag-icews14@champion]
        [--dataset icews14] [--row rulerag_ft]

The CI test of the same property runs on a slice of ICEWS14 (tests/pipeline/
test_full_pipeline.py); this is the full-size check of a real run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rulerag.io import read_jsonl  # noqa: E402 - after the path is set
from rulerag.layout import DataLayout  # noqa: E402
from rulerag.markdown import table  # noqa: E402
from rulerag.serving.loading import load_served  # noqa: E402


def same(answers: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many answers equal their row in generation, documents and rules."""
    pairs = list(zip(answers, rows, strict=True))
    return {
        "generation": sum(a["generation"] == r["generation"] for a, r in pairs),
        "documents": sum(
            [d["id"] for d in a["documents"]["with_rules"]] == r["doc_ids"][:10] for a, r in pairs
        ),
        "rules": sum([x["rule_id"] for x in a["rules"]] == r["rule_ids"] for a, r in pairs),
        "em": sum(bool(a["correct"]) for a, _ in pairs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="icews14")
    parser.add_argument("--model", default=None, help="default models:/rulerag-<dataset>@champion")
    parser.add_argument("--row", default="rulerag_ft")
    args = parser.parse_args(argv)
    uri = args.model or f"models:/rulerag-{args.dataset}@champion"
    layout = DataLayout.of(ROOT / "data", args.dataset)
    rows = read_jsonl(layout.row(args.row) / "predictions.jsonl")
    started = time.perf_counter()
    model = load_served(uri, ROOT)
    loaded = time.perf_counter() - started
    asks = [{"qid": r["qid"]} for r in rows]
    started = time.perf_counter()
    together = model.predict(asks)
    together_s = time.perf_counter() - started
    alone, seconds = [], []
    for ask in asks:
        started = time.perf_counter()
        alone.extend(model.predict([ask]))
        seconds.append(time.perf_counter() - started)
    grid_em = sum(r["em"] for r in rows)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    print(
        f"Command: `python benchmarks/serve_parity.py --model {uri}` · Measured: "
        f"{date.today()}, commit `{commit}` · {model.title}, loaded in {loaded:.1f} s\n"
    )
    n = len(rows)
    lines = []
    for name, answers, wall in (
        ("all in one call (the grid's batches)", together, together_s),
        ("one at a time", alone, sum(seconds)),
    ):
        counts = same(answers, rows)
        lines.append(
            [
                name,
                f"{counts['generation']} / {n}",
                f"{counts['documents']} / {n}",
                f"{counts['rules']} / {n}",
                f"{counts['em']} (grid {grid_em:g})",
                f"{wall:.1f}",
            ]
        )
    print(
        table(
            ["asked", "same generation", "same documents", "same rules", "EM", "seconds"],
            lines,
        )
    )
    ordered = sorted(seconds)
    print(
        f"\none at a time: p50 {statistics.median(seconds):.2f} s, "
        f"p95 {ordered[int(0.95 * (len(ordered) - 1))]:.2f} s per question"
    )
    print(json.dumps({"queries": n, "loaded_seconds": round(loaded, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
