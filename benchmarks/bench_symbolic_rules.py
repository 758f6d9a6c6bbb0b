"""Does a better rule set answer RuleQA better? The grid's `symbolic` row, paired.

Run by hand, never as a test (after `build_benchmark` and `mine_rules` for the dataset):

    python benchmarks/bench_symbolic_rules.py --dataset nell995 [--data FOLDER]
        [--constant-kinds ac1 ac2 zero] [--closed-confidence anyburl] [--aggregation max]
        [--min-confidence 0.0001] [--out FILE]

Answers every RuleQA test query (data/<dataset>/benchmark/test.jsonl, not only the grid's
sample) twice, as the `symbolic` row answers (`rulerag.generation.symbolic`: the best
rule-derived candidate's name, scored by the grid's EM), from the history the retrievers see
(`build_benchmark.corpus.splits`):

- `base`: the dataset's mined rules (rules/rules.parquet) applied with params.yaml's
  `apply_rules` settings, what `make run` puts in the grid;
- `variant`: the rules mined in-process with the options given (AnyBURL's rules with constants,
  `mine_rules.static.constants`; AnyBURL's confidence for the closed rules) and applied with
  `--aggregation`.

Reports both EMs, the share of queries with a rule-derived candidate, the discordant counts and
the exact McNemar p-value (`rulerag.evaluation.claims.paired_em`, the report's paired test).
`--data` reads <FOLDER>/<dataset>/ instead of the project's data/ (read only).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_rule_application import with_static_constants  # noqa: E402

from rulerag.evaluation.claims import paired_em  # noqa: E402
from rulerag.evaluation.metrics import score_prediction  # noqa: E402
from rulerag.io import read_jsonl, read_parquet  # noqa: E402
from rulerag.kg.schema import KnowledgeGraph  # noqa: E402
from rulerag.kg.store import read_kg  # noqa: E402
from rulerag.layout import DataLayout  # noqa: E402
from rulerag.params import load_params  # noqa: E402
from rulerag.rules.answers import rule_answers  # noqa: E402
from rulerag.rules.bank import frame_rules  # noqa: E402
from rulerag.rules.mining import mine  # noqa: E402
from rulerag.rules.rule import Rule  # noqa: E402
from rulerag.rules.settings import AGGREGATIONS, ApplySettings  # noqa: E402


def answer_queries(
    kg: KnowledgeGraph,
    queries: list[dict[str, Any]],
    rules: list[Rule],
    applying: ApplySettings,
    corpus_splits: tuple[str, ...],
) -> dict[str, dict[str, Any]]:
    """qid -> the symbolic row's EM and whether rules answered the query."""
    facts = kg.facts
    answers = rule_answers(
        queries,
        rules,
        facts[facts["split"].isin(corpus_splits)],
        len(kg.relations),
        applying,
        entity_names=dict(zip(kg.entities["id"], kg.entities["name"], strict=True)),
        relation_names=dict(zip(kg.relations["id"], kg.relations["name"], strict=True)),
        time_unit=kg.time_unit,
        keep=1,
    )
    out = {}
    for query, answer in zip(queries, answers, strict=True):
        best = answer["candidates"][0]["name"] if answer["candidates"] else ""
        record = score_prediction(best, query["answers"])
        out[str(query["qid"])] = {"em": record["em"], "answered": bool(answer["candidates"])}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="nell995")
    parser.add_argument("--data", type=Path, default=ROOT / "data", help="read only")
    parser.add_argument("--constant-kinds", nargs="*", choices=("ac1", "ac2", "zero"))
    parser.add_argument("--closed-confidence", choices=("pca", "anyburl"))
    parser.add_argument("--aggregation", choices=AGGREGATIONS, default="max")
    parser.add_argument(
        "--min-confidence",
        type=float,
        help="the variant's apply_rules.min_confidence (default: params.yaml's, which drops "
        "zero-body rules and most ac2 rules after AnyBURL's weights; AnyBURL's own: 0.0001)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    layout = DataLayout.of(args.data, args.dataset)
    for path in (layout.facts, layout.rules, layout.queries("test")):
        if not path.is_file():
            parser.error(f"--data {args.data}: no {path} (run the pipeline for it first)")
    params = load_params(ROOT / "params.yaml")
    corpus_splits = tuple(params.build_benchmark.corpus.splits)
    kg = read_kg(layout.kg)
    temporal = bool(kg.facts["time"].notna().any())
    queries = read_jsonl(layout.queries("test"))
    applying = params.apply_rules.for_data(temporal)

    started = time.perf_counter()
    base_rules = frame_rules(read_parquet(layout.rules))
    base = answer_queries(kg, queries, base_rules, applying, corpus_splits)
    base_seconds = time.perf_counter() - started

    settings = with_static_constants(params.mine_rules, args.constant_kinds, args.closed_confidence)
    facts = kg.facts
    started = time.perf_counter()
    train = facts[facts["split"].isin(settings.splits)]
    rules = mine(train, len(kg.entities), len(kg.relations), temporal, settings)
    variant_applying = dataclasses.replace(applying, aggregation=args.aggregation)
    if args.min_confidence is not None:
        variant_applying = dataclasses.replace(variant_applying, min_confidence=args.min_confidence)
    variant = answer_queries(kg, queries, rules, variant_applying, corpus_splits)
    variant_seconds = time.perf_counter() - started

    paired = paired_em(
        {q: r["em"] for q, r in variant.items()}, {q: r["em"] for q, r in base.items()}
    )
    constants = settings.static.constants
    report = {
        "dataset": args.dataset,
        "queries": paired.queries,
        "base": {
            "aggregation": params.apply_rules.aggregation,
            "em": round(paired.em_b, 4),
            "answered": round(sum(r["answered"] for r in base.values()) / len(base), 4),
            "seconds": round(base_seconds, 1),
        },
        "variant": {
            "constant_kinds": list(constants.kinds),
            "closed_confidence": constants.closed_confidence,
            "aggregation": args.aggregation,
            "min_confidence": variant_applying.min_confidence,
            "rules": len(rules),
            "em": round(paired.em_a, 4),
            "answered": round(sum(r["answered"] for r in variant.values()) / len(variant), 4),
            "seconds": round(variant_seconds, 1),
        },
        "variant_only": paired.a_only,
        "base_only": paired.b_only,
        "p_value": round(paired.p_value, 4),
    }
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
