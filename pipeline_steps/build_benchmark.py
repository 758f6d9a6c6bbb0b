"""Stage `build_benchmark`: KG + rule bank -> data/<dataset>/benchmark/.

Writes corpus.jsonl ({"id", "contents"}, Pyserini's JsonCollection format) with corpus.parquet
(the structured fields), test.jsonl, f_r.jsonl, f_g.jsonl, robust.jsonl (the test queries
turned into queries that need no rule, `rulerag.benchmark.robustness`) and stats.json, and
prints the sizes beside the paper's Table 1 row for the KG (`rulerag.benchmark.files`). A
rule-retrieval selection (vanilla, SIAR, R³) uses `rule_retrieval`'s LLM, whose answers are
cached in data/<dataset>/cache/.
"""

from __future__ import annotations

import sys

from pipeline_steps.common import numeric_metrics, run_stage, stage_inputs
from rulerag.benchmark.files import read_benchmark_files
from rulerag.benchmark.settings import RETRIEVAL_SELECTIONS
from rulerag.io import staged_outputs
from rulerag.rule_retrieval.selector import RuleRetrievalSelection


def main(argv: list[str] | None = None) -> int:
    stage = stage_inputs("build_benchmark", argv, __doc__)
    name, layout, params = stage.dataset, stage.layout, stage.params
    section = params.section_values("build_benchmark")
    logged = {"build_benchmark": section}
    if params.build_benchmark.rule_selection.method in RETRIEVAL_SELECTIONS:
        logged["rule_retrieval"] = params.section_values("rule_retrieval")  # its LLM and shots
    selectors = RuleRetrievalSelection(
        params.rule_retrieval, params.generation.api, layout.rule_llm_cache, stage.model_cache
    )
    with stage.track(logged) as run:
        built = read_benchmark_files(params.build_benchmark, layout, selectors=selectors)
        provenance = {"stage": "build_benchmark", "dataset": name, "params": section}
        with staged_outputs(layout.benchmark, "build_benchmark") as staging:
            built.write(staging, provenance)
        settings, stats, summary = built.settings, built.stats, built.table1()
        run.log_params({"corpus_filter": settings.corpus.filter, "test_size": settings.test_size})
        run.log_metrics(numeric_metrics({k: v for k, v in stats.items() if k != "paper"}))
        run.log_artifact(layout.benchmark / "stats.json")
        run.log_dict({"table1": summary.splitlines()}, "table1.json")
        run.log_dict(built.benchmark.test[:20], "sample/test.json")
        run.log_dict(built.benchmark.f_r[:20], "sample/f_r.json")
    print(f"build_benchmark@{name} (corpus filter {settings.corpus.filter}):\n{summary}")
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
