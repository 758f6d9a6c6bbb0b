"""Stages `generate` and `generate_r2ag`: one row of the result grid on one dataset.

Answers a seeded sample of the test queries (the same for every configuration) with the
configuration's retrieval run, prompt and generator (`rulerag.generation.grid.run_row`) and
writes data/<dataset>/generation/<config>/predictions.jsonl (one line per query: prompt, raw
generation, extracted answer, golds, scores, document ids) and metrics.json. `--config` names
a row of `generation.grid` or a variant of `r2ag.variants` (its R²-Former from `train_r2ag`).
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any

from pipeline_steps.common import (
    MODEL_CACHE,
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    numeric_metrics,
    run_stage,
)
from rulerag.generation.config import (
    GridConfig,
    checked_generation_settings,
    grid_config,
)
from rulerag.generation.generators import passive_openmp
from rulerag.generation.grid import run_row
from rulerag.generation.r2ag.settings import r2ag_settings
from rulerag.io import staged_outputs, write_json, write_jsonl
from rulerag.retrieval.configs import retrieve_settings
from rulerag.retrieval.settings import index_settings
from rulerag.tracking import TAG_STAGE_INSTANCE, stage_run


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    parser = dataset_parser(__doc__ or "")
    parser.add_argument(
        "--config", required=True, help="a name in generation.grid or r2ag.variants"
    )
    args = parser.parse_args(argv)
    name = args.dataset
    params = load_params()
    settings = checked_generation_settings(params)
    r2ag = r2ag_settings(params.get("r2ag"))
    factory = None
    stage = "generate"
    if args.config in r2ag.variants and args.config not in settings.grid:
        from rulerag.generation.r2ag.fit import generator_factory  # torch: after passive_openmp

        stage, spec = "generate_r2ag", r2ag.variant(args.config)
        grid = GridConfig(args.config, spec.retrieval, "r2ag", spec.prompt, spec.rules)
        factory = generator_factory(
            args.config,
            index_settings(params.get("index")),
            retrieve_settings(params.get("retrieve")).rule_query,
            encoder=r2ag.encoder or settings.retriever,
            model_cache=MODEL_CACHE,
        )
    else:
        grid = grid_config(args.config, settings)
        if grid.method is not None:  # VE / CoK / RuleRAG-CoK: the chain searches the corpus
            from rulerag.generation.chains import chain_factory

            factory = chain_factory(
                index_settings(params.get("index")),
                retrieve_settings(params.get("retrieve")).rule_query,
                MODEL_CACHE,
            )
    out_dir = data_dir(name) / "generation" / grid.name
    tracked = {"generation": {**asdict(settings), "grid": None}, "config": asdict(grid)}
    if stage == "generate_r2ag":
        tracked["r2ag"] = {**asdict(r2ag), "profiles": None}
    with stage_run(stage, name, project_dir=PROJECT_DIR, params=tracked) as run:
        run.set_tags(
            {"rulerag.config": grid.name, TAG_STAGE_INSTANCE: f"{stage}@{name}-{grid.name}"}
        )
        result = run_row(data_dir(name), name, grid, settings, factory)
        with staged_outputs(out_dir, "generate") as staging:
            write_jsonl(staging / "predictions.jsonl", result.records)
            write_json(staging / "metrics.json", result.metrics)
        run.log_metrics(numeric_metrics(result.metrics))
        run.log_artifact(out_dir / "metrics.json")
        run.log_artifact(out_dir / "predictions.jsonl")

    def pct(value: Any) -> str:
        return "–" if value is None else f"{100 * value:.1f}"

    metrics, k = result.metrics, settings.recall_k[-1]
    print(
        f"{stage}@{name}-{grid.name}: {metrics['queries']} queries, EM {pct(metrics['em'])}, "
        f"T-F1 {pct(metrics['token_f1'])}, R@{k} {pct(metrics.get(f'recall_at_{k}'))} "
        f"({metrics['generator']}, {metrics['generate_seconds']:.0f}s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
