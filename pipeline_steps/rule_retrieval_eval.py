"""Stage `rule_retrieval_eval`: how well rules are found for a query, SIAR + R³ beside RuleRAG.

data/<dataset>/{rules/bank.parquet, kg/relations.parquet, benchmark/test.jsonl, f_r.jsonl} ->
data/<dataset>/rule_retrieval/: results.md (the paper's Table 1 layout), results.csv, recall.png,
selections.parquet (the rules each combination chose per query), claims.csv (the paper's
claims as paired tests on the same queries, also under the table in results.md) and
metrics.json (`rulerag.rule_retrieval.ruleqa.evaluate_rule_retrieval`). The LLM's answers are
cached in data/<dataset>/cache/ (not an output), so a rerun sends no prompt.
"""

from __future__ import annotations

import sys

from pipeline_steps.common import run_stage, stage_inputs
from rulerag.io import staged_outputs
from rulerag.rule_retrieval.experiment import flat_metrics
from rulerag.rule_retrieval.ruleqa import evaluate_rule_retrieval

ARTIFACTS = ("results.md", "results.csv", "claims.csv", "recall.png", "metrics.json")


def main(argv: list[str] | None = None) -> int:
    stage = stage_inputs("rule_retrieval_eval", argv, __doc__)
    layout, params = stage.layout, stage.params
    settings = params.rule_retrieval
    with stage.track({"rule_retrieval": params.section_values("rule_retrieval")}) as run:
        evaluation = evaluate_rule_retrieval(
            settings,
            params.build_benchmark.rule_selection,
            params.generation.api,
            layout,
            stage.model_cache,
        )
        with staged_outputs(layout.rule_retrieval, "rule_retrieval_eval") as staging:
            evaluation.write(staging)
        run.log_metrics(flat_metrics(evaluation.results, settings.ks))
        if evaluation.analysis is not None:  # what `auto` chose: the run says, the files don't
            run.log_params({"rule_retrieval": {"analyzer_used": evaluation.analysis.name}})
        for artifact in ARTIFACTS:
            run.log_artifact(layout.rule_retrieval / artifact)
    if evaluation.analysis is not None:
        print(
            f"rule_retrieval_eval@{stage.dataset}: BM25 analysis {evaluation.analysis.describe()}"
        )
    print(f"rule_retrieval_eval@{stage.dataset}:\n" + evaluation.markdown())
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
