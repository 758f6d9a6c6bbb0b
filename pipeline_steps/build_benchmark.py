"""Stage `build_benchmark`: KG + rule bank -> data/<dataset>/benchmark/.

Writes corpus.jsonl ({"id", "contents"}, Pyserini's JsonCollection format) with corpus.parquet
(the structured fields), test.jsonl, f_r.jsonl, f_g.jsonl, robust.jsonl (the test queries
turned into queries that need no rule, `rulerag.benchmark.robustness`) and stats.json, and
prints the sizes beside the paper's Table 1 row for the KG. A rule-retrieval selection
(vanilla, SIAR, R³) uses `rule_retrieval`'s LLM, whose answers are cached in
data/<dataset>/cache/.
"""

from __future__ import annotations

import sys

from pipeline_steps.common import (
    MODEL_CACHE,
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    numeric_metrics,
    rule_llm_cache,
    run_stage,
)
from rulerag.benchmark.build import benchmark_config, build_benchmark, table1
from rulerag.benchmark.robustness import degenerate_queries
from rulerag.benchmark.settings import RETRIEVAL_SELECTIONS, build_benchmark_settings
from rulerag.io import staged_outputs, write_json, write_jsonl, write_parquet
from rulerag.kg.registry import DATASETS
from rulerag.kg.store import read_kg
from rulerag.tracking import stage_run


def main(argv: list[str] | None = None) -> int:
    args = dataset_parser(__doc__ or "").parse_args(argv)
    name = args.dataset
    params = load_params()
    section = params.get("build_benchmark") or {}
    settings = build_benchmark_settings(section)
    paper = DATASETS[name].paper if name in DATASETS else {}
    config = benchmark_config(settings, name, paper)
    kg = read_kg(data_dir(name) / "kg")
    import pandas as pd

    bank = pd.read_parquet(data_dir(name) / "rules" / "bank.parquet")
    out_dir = data_dir(name) / "benchmark"
    logged = {"build_benchmark": section}
    if config.selection in RETRIEVAL_SELECTIONS:  # its LLM, shots and analyzer are these
        logged["rule_retrieval"] = params["rule_retrieval"]
    with stage_run("build_benchmark", name, project_dir=PROJECT_DIR, params=logged) as run:
        encoder = selector = None
        if config.selection == "similarity":
            from rulerag.rules.selection import minilm_encoder

            encoder = minilm_encoder(settings.rule_selection.encoder)
        if config.selection in RETRIEVAL_SELECTIONS:
            from rulerag.rule_retrieval.selector import benchmark_selector

            selector = benchmark_selector(
                params, bank, kg.relations, cache_path=rule_llm_cache(name), model_cache=MODEL_CACHE
            )
        bench = build_benchmark(kg, bank, config, encoder, selector)
        robust, robust_counts = degenerate_queries(
            bench.test,
            bank,
            bench.corpus,
            kg.entities.set_index("id")["name"].to_dict(),
            kg.relations.set_index("id")["name"].to_dict(),
        )
        stats = {"dataset": name, **bench.stats, "seed": config.seed, "robust": robust_counts}
        if selector is not None:
            stats["selection_cost"] = dict(selector.cost)
        if name in DATASETS:
            stats["paper"] = dict(DATASETS[name].paper)
        provenance = {"stage": "build_benchmark", "dataset": name, "params": section}
        with staged_outputs(out_dir, "bench") as staging:
            write_jsonl(
                staging / "corpus.jsonl", bench.corpus[["id", "contents"]].to_dict("records")
            )
            write_parquet(staging / "corpus.parquet", bench.corpus, provenance)
            write_jsonl(staging / "test.jsonl", bench.test)
            write_jsonl(staging / "f_r.jsonl", bench.f_r)
            write_jsonl(staging / "f_g.jsonl", bench.f_g)
            write_jsonl(staging / "robust.jsonl", robust)
            write_json(staging / "stats.json", stats)
        summary = table1(stats, paper)
        run.log_params({"corpus_filter": config.corpus_filter, "test_size": config.test_size})
        run.log_metrics(numeric_metrics({k: v for k, v in stats.items() if k != "paper"}))
        run.log_artifact(out_dir / "stats.json")
        run.log_dict({"table1": summary.splitlines()}, "table1.json")
        run.log_dict(bench.test[:20], "sample/test.json")
        run.log_dict(bench.f_r[:20], "sample/f_r.json")
    print(f"build_benchmark@{name} (corpus filter {config.corpus_filter}):\n{summary}")
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
