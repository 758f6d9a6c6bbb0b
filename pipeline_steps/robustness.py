"""Stage `robustness`: one grid row on queries that need no rule (RuleRAG's Appendix E).

Searches the row's retrieval configuration with the seeded sample of
benchmark/robust.jsonl (each test query asked through its rule's body relation, with the
original rules and answers: `rulerag.benchmark.robustness`) and answers them as the row answers
the test queries (`rulerag.generation.rows.robust_plan`), writing
data/<dataset>/generation/robust/<config>/run.parquet, predictions.jsonl and metrics.json. The
report sets the rows side by side with paired tests.
"""

from __future__ import annotations

import sys

from pipeline_steps.common import numeric_metrics, run_stage, stage_inputs
from rulerag.generation.generators import passive_openmp
from rulerag.generation.rows import robust_plan
from rulerag.io import staged_outputs
from rulerag.layout import ROBUST


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    stage = stage_inputs("robustness", argv, __doc__, config="a name in generation.robustness_rows")
    params, layout = stage.params, stage.layout
    row = robust_plan(
        stage.args.config,
        params.generation,
        params.index,
        params.retrieve,
        model_cache=stage.model_cache,
    )
    name, out = row.grid.name, layout.row(row.grid.name, ROBUST)
    with stage.track(row.tracked, instance=f"-{name}", tags={"rulerag.config": name}) as run:
        result = row.answer(layout)
        with staged_outputs(out, "robustness") as staging:
            result.write(staging)
        run.log_metrics(numeric_metrics(result.metrics))
        run.log_artifact(out / "metrics.json")
    k = params.generation.recall_k[-1]
    print(f"robustness@{stage.dataset}-{name}: {result.summary(k)}")
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
