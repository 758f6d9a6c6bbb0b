"""Stage `train_retriever`: RGFT / SSFT fine-tuning of a dense query encoder on F_R.

`--encoder minilm --mode rgft` trains on `q ∘ r` inputs, `--mode ssft` on `q` alone; the
positives are each item's oracle documents, the negatives the batch's other documents (never
the query's own oracle documents). The document encoder is frozen, so the corpus embeddings
of `index` (retrieval/index/<encoder>/) serve training and the trained query encoder searches
the same index (`rulerag.retrieval.fine_tuning.train_retriever`). Writes:

    retrieval/models/<encoder>-<mode>/       the query encoder (sentence-transformers folder,
                                             model.safetensors)
    retrieval/training/<encoder>-<mode>/     train.json (metrics), loss.csv and heldout.csv
                                             (DVC plots), loss.png
    retrieval/checkpoints/<encoder>-<mode>/  resumable checkpoints (kept between runs)

Loss curves and held-out figures are logged to MLflow, and the trained encoder as an MLflow
sentence-transformers model registered as `rulerag-<dataset>-retriever-<encoder>-<mode>`.
"""

from __future__ import annotations

import sys
from dataclasses import asdict

from pipeline_steps.common import numeric_metrics, run_stage, stage_inputs
from rulerag.retrieval.configs import TRAINED_MODES
from rulerag.retrieval.fine_tuning import train_retriever
from rulerag.tracking.registry import registered_name, save_encoder_model

OPTIONS = {"encoder": "a dense encoder of index.dense", "mode": "what to train on: q ∘ r or q"}


def main(argv: list[str] | None = None) -> int:
    stage = stage_inputs("train_retriever", argv, __doc__, {"mode": TRAINED_MODES}, **OPTIONS)
    encoder, mode, params, layout = stage.args.encoder, stage.args.mode, stage.params, stage.layout
    name = f"{encoder}-{mode}"
    logged = {
        "train_retriever": params.section_values("train_retriever"),
        "encoder": asdict(params.index.encoder(encoder)),
        "mode": mode,
        # RGFT trains on the search text retrieval will use
        "rule_query": params.retrieve.rule_query,
    }
    with stage.track(logged, instance=f"-{name}", tags={"rulerag.config": name}) as run:
        trained = train_retriever(
            layout,
            encoder,
            mode,
            params.train_retriever,
            params.index,
            params.retrieve,
            stage.model_cache,
            on_log=run.log_metrics,
        )
        run.log_input(layout.queries("f_r"), "train")
        trained.write(layout)
        run.log_metrics(numeric_metrics(trained.summary), step=trained.result.steps)
        for artifact in trained.FILES:
            run.log_artifact(layout.training(name) / artifact)
        if trained.settings.log_model:
            run.log_model(
                lambda folder: save_encoder_model(trained.fitted.model, folder),
                "model",
                registered_name=registered_name(stage.dataset, "retriever", name),
                description=trained.model_description,
                # `champion`: the best held-out figure early stopping followed
                champion_metric=f"best_{trained.result.metric}",
            )
    print(f"train_retriever@{stage.dataset}-{name}: {trained.outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
