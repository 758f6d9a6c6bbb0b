"""Stage `qa_rag`: an ordinary QA set (ASQA, PopQA, HotpotQA, NQ...) answered with RuleQA's rules.

Reads the set from `<qa.dir or $RULERAG_DATA_DIR/qa>/<name>/` (`rulerag.qa.reader`), gives each
question the RuleQA bank rules whose Sentence-BERT similarity passes θ (at most N: the knobs of
build_benchmark.rule_selection, the paper's N = 3, θ = 0.7), searches the corpus with the
question alone and with question ∘ rule (`qa.retriever`), and answers with the `qa.rows` of
the grid (the same prompts and scoring as RuleQA): `rulerag.qa.pipeline.answer_qa_set`. Writes
data/<name>/benchmark/, rules/bank.parquet, retrieval/<retriever>-{standard,rg}/run.parquet,
generation/<row>/{predictions.jsonl,metrics.json} and qa/{metrics.json,results.md}.
"""

from __future__ import annotations

import sys

from pipeline_steps.common import numeric_metrics, run_stage, stage_inputs
from rulerag.generation.generators import passive_openmp
from rulerag.qa.pipeline import answer_qa_set


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    stage = stage_inputs("qa_rag", argv, __doc__)
    params, name = stage.params, stage.dataset
    logged = {
        "qa": params.section_values("qa"),
        "build_benchmark": {
            "rule_selection": params.section_values("build_benchmark").get("rule_selection")
        },
        "generation": {
            "retriever": params.qa.retriever or params.generation.retriever,
            "model": params.generation.model,
        },
    }
    with stage.track(logged) as run:
        result = answer_qa_set(
            stage.layout,
            stage.layout_of(params.qa.rule_bank),
            params.qa,
            params.generation,
            params.build_benchmark.rule_selection,
            params.retrieve,
            params.index,
            model_cache=stage.model_cache,
            on_row=lambda row, metrics: run.log_metrics(numeric_metrics(metrics, f"{row}.")),
        )
        run.log_metrics(numeric_metrics(result.stats))
        run.log_artifact(stage.layout.qa / "results.md")
        run.log_artifact(stage.layout.qa / "metrics.json")
    stats = result.stats
    print(
        f"qa_rag@{name}: {stats['questions']} questions, {stats['questions_with_rules']} with "
        "rules; EM " + ", ".join(f"{r} {100 * m['em']:.1f}" for r, m in result.rows.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
