"""Stage `robustness`: one grid row on queries that need no rule (RuleRAG's Appendix E).

Searches the row's retrieval configuration with the seeded sample of
benchmark/robust.jsonl (each test query asked through its rule's body relation, with the
original rules and answers: `rulerag.benchmark.robustness`) and answers them as the row answers
the test queries (`run_row`), writing data/<dataset>/generation/robust/<config>/run.parquet,
predictions.jsonl and metrics.json. The report sets the rows side by side with paired tests.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline_steps.common import (
    MODEL_CACHE,
    PROJECT_DIR,
    InputError,
    data_dir,
    dataset_parser,
    load_params,
    numeric_metrics,
    run_stage,
)
from rulerag.generation.config import (
    checked_generation_settings,
    grid_config,
    retrieval_name,
)
from rulerag.generation.generators import passive_openmp
from rulerag.generation.grid import run_row
from rulerag.generation.samples import sample_queries
from rulerag.io import read_jsonl, staged_outputs, write_json, write_jsonl, write_parquet
from rulerag.layout import DataLayout
from rulerag.retrieval.configs import parse_config, retrieve_settings
from rulerag.retrieval.data import read_corpus, read_rule_texts, to_queries
from rulerag.retrieval.rule_guided import rule_query_texts
from rulerag.retrieval.runs import open_searcher, run_split
from rulerag.retrieval.settings import index_settings
from rulerag.tracking import TAG_STAGE_INSTANCE, stage_run

QUERY_SET = "robust"


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    parser = dataset_parser(__doc__ or "")
    parser.add_argument("--config", required=True, help="a name in generation.robustness_rows")
    args = parser.parse_args(argv)
    name = args.dataset
    params = load_params()
    settings = checked_generation_settings(params)
    if args.config not in settings.robustness_rows:
        raise InputError(f"robustness: {args.config!r} is not in generation.robustness_rows")
    grid = grid_config(args.config, settings)
    base = data_dir(name)
    out_dir = base / "generation" / QUERY_SET / grid.name
    source = base / "benchmark" / f"{QUERY_SET}.jsonl"
    if not source.is_file():
        raise InputError(f"robustness@{name}: {source} not found: run build_benchmark")
    chosen = sample_queries(read_jsonl(source), settings.test_queries, settings.seed)
    tracked = {"generation": {**asdict(settings), "grid": None}, "config": asdict(grid)}
    with stage_run("robustness", name, project_dir=PROJECT_DIR, params=tracked) as run:
        run.set_tags(
            {"rulerag.config": grid.name, TAG_STAGE_INSTANCE: f"robustness@{name}-{grid.name}"}
        )
        with staged_outputs(out_dir, "robust") as staging:
            run_path = staging / "run.parquet"
            if grid.retrieval:
                retrieval = retrieval_name(grid.retrieval, settings.retriever)
                frame = search(base, retrieval, chosen, params)
                write_parquet(run_path, frame, {"stage": "robustness", "config": retrieval})
            result = run_row(base, name, grid, settings, query_set=QUERY_SET, run_file=run_path)
            result.metrics["query_set"] = QUERY_SET
            write_jsonl(staging / "predictions.jsonl", result.records)
            write_json(staging / "metrics.json", result.metrics)
        run.log_metrics(numeric_metrics(result.metrics))
        run.log_artifact(out_dir / "metrics.json")
    metrics = result.metrics
    print(
        f"robustness@{name}-{grid.name}: {metrics['queries']} queries, "
        f"EM {100 * metrics['em']:.1f}, T-F1 {100 * metrics['token_f1']:.1f}"
    )
    return 0


def search(
    base: Path, config_name: str, queries: list[dict[str, Any]], params: Mapping[str, Any]
) -> pd.DataFrame:
    """The run frame of the retrieval configuration `config_name` searched with `queries`."""
    config = parse_config(config_name)
    settings = retrieve_settings(params.get("retrieve"))
    paths = DataLayout(base)
    corpus = read_corpus(paths.corpus)
    contents = dict(zip(corpus.ids, corpus.contents, strict=True))
    rules = {}
    if config.use_rules:
        rules = rule_query_texts(read_rule_texts(paths.rule_bank), settings.rule_query)
    try:
        searcher = open_searcher(config, paths, index_settings(params.get("index")), MODEL_CACHE)
    except FileNotFoundError as err:
        raise InputError(f"robustness: {err}") from None
    result = run_split(
        QUERY_SET, to_queries(queries), searcher, settings, rules, config.use_rules, contents
    )
    return result.frame


if __name__ == "__main__":
    sys.exit(run_stage(main))
