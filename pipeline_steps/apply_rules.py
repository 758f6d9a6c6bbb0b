"""Stage `apply_rules`: the mined rules applied as their miners' communities apply them.

Link forecasting (temporal KG, TLogic's application and evaluation) or link prediction (static
KG, AMIE rules by PCA confidence) on the KG's test split (`rulerag.rules.forecasting`): MRR and
Hits@1/3/10, time-aware filtered, both directions, beside the published figures where there are
some. Then RuleQA's test queries answered by the rules with explained candidates
(`rulerag.rules.answers`), for the grid. Writes data/<dataset>/rule_application/:
metrics.json, results.md, answers.jsonl (per query: candidates with score, rule, evidence).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict

import pandas as pd

from pipeline_steps.common import (
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    numeric_metrics,
    run_stage,
)
from rulerag.benchmark.settings import build_benchmark_settings
from rulerag.io import atomic_open, read_jsonl, staged_outputs, write_json, write_jsonl
from rulerag.rules.answers import (
    PUBLISHED,
    apply_rules_settings,
    results_markdown,
    rule_answers,
)
from rulerag.rules.bank import frame_rules
from rulerag.rules.forecasting import forecast
from rulerag.tracking import TAG_STAGE_INSTANCE, stage_run


def main(argv: list[str] | None = None) -> int:
    args = dataset_parser(__doc__ or "").parse_args(argv)
    name = args.dataset
    params = load_params()
    settings = apply_rules_settings(params.get("apply_rules"))
    corpus_splits = build_benchmark_settings(params.get("build_benchmark")).corpus.splits
    base = data_dir(name)
    facts = pd.read_parquet(base / "kg" / "facts.parquet")
    entities = pd.read_parquet(base / "kg" / "entities.parquet")
    relations = pd.read_parquet(base / "kg" / "relations.parquet")
    rules = frame_rules(pd.read_parquet(base / "rules" / "rules.parquet"))
    temporal = bool(facts["time"].notna().any())
    applying = settings.apply_settings(temporal)
    out_dir = base / "rule_application"
    with stage_run("apply_rules", name, project_dir=PROJECT_DIR, params=asdict(settings)) as run:
        run.set_tags({TAG_STAGE_INSTANCE: f"apply_rules@{name}"})
        started = time.perf_counter()
        result = forecast(
            facts,
            rules,
            len(relations),
            len(entities),
            applying,
            max_facts=settings.evaluate_facts,
            seed=settings.seed,
        )
        seconds = time.perf_counter() - started
        metrics = {
            "dataset": name,
            "temporal": temporal,
            "rules": len(rules),
            "test_facts": len(result.ranks) // 2,  # each fact is two queries
            "seconds": round(seconds, 1),
            "queries_per_minute": round(60 * len(result.ranks) / max(seconds, 1e-9)),
            **{k: round(v, 4) for k, v in result.metrics.items()},
            "published": PUBLISHED.get(name),
        }
        history = facts[facts["split"].isin(corpus_splits)]
        answers = rule_answers(
            read_jsonl(base / "benchmark" / "test.jsonl"),
            rules,
            history,
            len(relations),
            applying,
            entity_names=dict(zip(entities["id"], entities["name"], strict=True)),
            relation_names=dict(zip(relations["id"], relations["name"], strict=True)),
            time_unit=json.loads((base / "kg" / "stats.json").read_text())["time_unit"],
            keep=settings.candidates,
        )
        answered = sum(bool(a["candidates"]) for a in answers)
        metrics["ruleqa_answered"] = round(answered / max(1, len(answers)), 4)
        with staged_outputs(out_dir, "apply_rules") as staging:
            write_jsonl(staging / "answers.jsonl", answers)
            write_json(staging / "metrics.json", metrics)
            with atomic_open(staging / "results.md") as handle:
                handle.write(results_markdown(metrics, settings))
        run.log_metrics(numeric_metrics({k: v for k, v in metrics.items() if k != "published"}))
        for artifact in ("metrics.json", "results.md"):
            run.log_artifact(out_dir / artifact)
    print((out_dir / "results.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
