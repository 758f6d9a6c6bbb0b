"""Stages `generate` and `generate_r2ag`: one row of the result grid on one dataset.

Answers a seeded sample of the test queries (the same for every configuration) with the
configuration's retrieval run, prompt and generator (`rulerag.generation.rows.row_plan`: a
grid row, a VE / CoK chain row, or an R²AG variant with its R²-Former from `train_r2ag`) and
writes data/<dataset>/generation/<config>/predictions.jsonl (one line per query: prompt, raw
generation, extracted answer, golds, scores, document ids) and metrics.json. `--config` names
a row of `generation.grid` or a variant of `r2ag.variants`.
"""

from __future__ import annotations

import sys

from pipeline_steps.common import numeric_metrics, run_stage, stage_inputs
from rulerag.generation.generators import passive_openmp
from rulerag.generation.rows import row_plan
from rulerag.io import staged_outputs


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    stage = stage_inputs(
        "generate", argv, __doc__, config="a name in generation.grid or r2ag.variants"
    )
    params, layout = stage.params, stage.layout
    row = row_plan(
        stage.args.config,
        params.generation,
        params.r2ag,
        params.index,
        params.retrieve,
        model_cache=stage.model_cache,
    )
    name, out = row.grid.name, layout.row(row.grid.name)
    with stage.track(
        row.tracked, stage=row.stage, instance=f"-{name}", tags={"rulerag.config": name}
    ) as run:
        result = row.answer(layout)
        run.log_input(layout.queries("test"), "test")
        with staged_outputs(out, "generate") as staging:
            result.write(staging)
        run.log_metrics(numeric_metrics(result.metrics))
        run.log_artifact(out / "metrics.json")
        run.log_artifact(out / "predictions.jsonl")
    k = params.generation.recall_k[-1]
    print(f"{row.stage}@{stage.dataset}-{name}: {result.summary(k)}")
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
