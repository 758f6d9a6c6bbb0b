"""Stage `rule_retrieval_eval`: how well rules are found for a query, SIAR + R³ beside RuleRAG.

data/<dataset>/{rules/bank.parquet, kg/relations.parquet, benchmark/test.jsonl, f_r.jsonl} ->
data/<dataset>/rule_retrieval/: results.md (the paper's Table 1 layout), results.csv, recall.png,
selections.parquet (the rules each combination chose per query), claims.csv (the paper's
claims as paired tests on the same queries, also under the table in results.md) and
metrics.json. The LLM's answers are cached in data/<dataset>/cache/ (not an output), so a rerun
sends no prompt.
"""

from __future__ import annotations

import sys

from pipeline_steps.common import (
    MODEL_CACHE,
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    rule_llm_cache,
    run_stage,
)
from rulerag.benchmark.settings import build_benchmark_settings
from rulerag.generation.config import generation_settings
from rulerag.io import atomic_open, staged_outputs, write_json, write_parquet
from rulerag.rule_retrieval.claims import claims_markdown, rule_claims
from rulerag.rule_retrieval.experiment import flat_metrics, results_markdown, run_evaluation
from rulerag.rule_retrieval.llm import LLMPool
from rulerag.rule_retrieval.plots import plot_recall
from rulerag.rule_retrieval.ruleqa import reference_rows, ruleqa_task
from rulerag.rule_retrieval.settings import rule_retrieval_settings
from rulerag.tracking import stage_run


def main(argv: list[str] | None = None) -> int:
    args = dataset_parser(__doc__ or "").parse_args(argv)
    name = args.dataset
    params = load_params()
    section = params["rule_retrieval"]
    settings = rule_retrieval_settings(section)
    selection = build_benchmark_settings(params["build_benchmark"]).rule_selection
    out_dir = data_dir(name) / "rule_retrieval"
    task, bank, test = ruleqa_task(data_dir(name), settings.queries, settings.shots, settings.seed)
    similarity = (selection.top_n, selection.threshold) if settings.similarity else None
    api = generation_settings(params["generation"]).api
    llms = LLMPool(settings.llm, rule_llm_cache(name), model_cache=MODEL_CACHE, api=api)
    with stage_run(
        "rule_retrieval_eval", name, project_dir=PROJECT_DIR, params={"rule_retrieval": section}
    ) as run:
        extra = reference_rows(task, bank, test, settings.top_k, similarity)
        results, picked = run_evaluation(
            task, settings, llms, model_cache=MODEL_CACHE, extra_rows=extra
        )
        k = max(settings.ks)
        claims = rule_claims(picked, task.qids, task.gold, k)
        title = f"{name}: rule retrieval, Recall@k (%) of the gold rules, {len(test)} test queries"
        metrics = {
            "queries": len(test),
            "library": len(task.library),
            "llm": f"{settings.llm.kind}:{settings.llm.model}",
            "llm_calls": llms.calls,
            "rows": results.to_dict("records"),
        }
        with staged_outputs(out_dir, "rulret") as staging:
            results.to_csv(staging / "results.csv", index=False)
            with atomic_open(staging / "results.md") as handle:
                handle.write(results_markdown(results, title, settings.ks))
                handle.write(claims_markdown(claims, k))
            claims.to_csv(staging / "claims.csv", index=False)
            write_parquet(staging / "selections.parquet", picked, {"stage": "rule_retrieval_eval"})
            plot_recall(results, k, staging / "recall.png", title)
            write_json(staging / "metrics.json", metrics)
        run.log_metrics(flat_metrics(results, settings.ks))
        for artifact in ("results.md", "results.csv", "claims.csv", "recall.png", "metrics.json"):
            run.log_artifact(out_dir / artifact)
    print(f"rule_retrieval_eval@{name}:\n" + (out_dir / "results.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
