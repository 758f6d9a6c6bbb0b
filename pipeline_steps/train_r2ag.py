"""Stage `train_r2ag`: the R²-Former of one R²AG variant (paper §3.5) on F_G.

Draws `r2ag.train.samples` + `dev_samples` F_G queries (seeded, as `train_generator` does),
takes their documents from the variant's retrieval run over F_G, marks each document of the
variant's prompt with a placeholder, computes the retrieval features with the run's dense
encoder, and trains the R²-Former on LM + QDM loss with `generation.model` frozen (LoRA on it
for a `lora: true` variant) (`rulerag.generation.r2ag.fit`). Writes
data/<dataset>/generation/r2ag_models/<variant>/ (the R²-Former, its metadata, LoRA if any),
train_r2ag_<variant>.json (DVC metrics) and train_r2ag_<variant>_loss.csv (DVC plots), and logs
them and the module to MLflow.
"""

from __future__ import annotations

import sys

from pipeline_steps.common import numeric_metrics, run_stage, stage_inputs
from rulerag.generation.generators import passive_openmp
from rulerag.generation.r2ag.fit import STAGE, r2ag_plan


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    stage = stage_inputs("train_r2ag", argv, __doc__, variant="a name in r2ag.variants")
    params, layout = stage.params, stage.layout
    plan = r2ag_plan(stage.args.variant, params.generation, params.r2ag)
    variant = plan.variant
    with stage.track(
        plan.tracked, instance=f"-{variant}", tags={"rulerag.variant": variant}
    ) as run:
        trained = plan.fit(layout, params.index, params.retrieve, model_cache=stage.model_cache)
        trained.write(layout)
        for step, metrics in trained.curve_metrics():
            run.log_metrics(metrics, step)
        run.log_metrics(numeric_metrics(trained.stats))
        run.log_artifact(layout.r2ag_model(variant), "r2ag")
        run.log_artifact(layout.train_stats(variant, STAGE))
        run.log_artifact(layout.loss_curve(variant, STAGE))
    print(f"train_r2ag@{stage.dataset}-{variant}: {trained.summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
