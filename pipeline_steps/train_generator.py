"""Stage `train_generator`: a LoRA adapter for one generator variant (RGFT or SSFT).

Draws `generation.train.samples` + `dev_samples` F_G queries (seeded), takes their documents
from the variant's retriever run over F_G (`retrieval/<config>/run_fg.parquet`: the fine-tuned
retriever, as the paper does), renders the variant's prompt (RGFT: with the query's rules;
SSFT: without) and trains LoRA on the answers (`rulerag.generation.adapters`). Writes the
adapter to data/<dataset>/generation/adapters/<variant>/, its statistics to
generation/train_<variant>.json (DVC metrics) and the loss curves to train_<variant>_loss.csv
(DVC plots), and logs the adapter to MLflow as a pyfunc model (base + adapter) registered as
`rulerag-<dataset>-generator-<variant>` (`rulerag.tracking.registry`). On a worker with several
GPUs it relaunches itself under torchrun (`rulerag.generation.launch`); only rank 0 writes.
"""

from __future__ import annotations

import sys

from pipeline_steps.common import run_stage, stage_inputs
from rulerag.generation.adapters import adapter_plan
from rulerag.generation.generators import passive_openmp
from rulerag.generation.launch import is_main_process, relaunch_on_gpus
from rulerag.tracking.registry import registered_name, save_generator_model


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    stage = stage_inputs(
        "train_generator", argv, __doc__, variant="a name in generation.train.variants"
    )
    name, layout, generation = stage.dataset, stage.layout, stage.params.generation
    plan = adapter_plan(stage.args.variant, generation)
    own_argv = sys.argv[1:] if argv is None else argv
    launched = relaunch_on_gpus("pipeline_steps.train_generator", own_argv, generation.train.gpus)
    if launched is not None:  # torchrun ran this stage once per GPU
        return launched
    if not is_main_process():  # another GPU's process of a torchrun launch: train, write nothing
        plan.fit(layout)
        return 0
    with stage.track(
        plan.tracked, instance=f"-{plan.variant}", tags={"rulerag.variant": plan.variant}
    ) as run:
        trained = plan.fit(layout)
        trained.write(layout)
        run.log_input(layout.queries("f_g"), "train")
        for step, metrics in trained.curve_metrics():
            run.log_metrics(metrics, step=step)
        run.log_metrics(trained.metrics())
        run.log_model(
            lambda folder: save_generator_model(trained.adapter, folder),
            "model",
            registered_name=registered_name(name, "generator", plan.variant),
            description=trained.description(name),
            champion_metric="dev_loss_best",  # `champion`: the lowest dev loss
            higher_is_better=False,
        )
        run.log_artifact(layout.train_stats(plan.variant))
    print(f"train_generator@{name}-{plan.variant}: {trained.summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
