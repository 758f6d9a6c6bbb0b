"""Stage `train_retriever`: RGFT / SSFT fine-tuning of a dense query encoder on F_R.

`--encoder minilm --mode rgft` trains on `q ∘ r` inputs, `--mode ssft` on `q` alone; the
positives are each item's oracle documents, the negatives the batch's other documents (never
the query's own oracle documents). The document encoder is frozen, so the corpus embeddings
of `index` (retrieval/index/<encoder>/) serve training and the trained query encoder searches
the same index (`rulerag.retrieval.training`). Writes:

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
from pathlib import Path

from pipeline_steps.common import (
    MODEL_CACHE,
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    numeric_metrics,
    run_stage,
)
from rulerag.errors import InputError
from rulerag.io import atomic_open, staged_dir, write_json
from rulerag.layout import DataLayout
from rulerag.retrieval.configs import TRAINED_MODES, retrieve_settings
from rulerag.retrieval.dense import DenseIndex
from rulerag.retrieval.encoders import load_encoder, model_fingerprint, set_torch_threads
from rulerag.retrieval.settings import index_settings
from rulerag.retrieval.training import (
    plot_curves,
    split_heldout,
    train_query_encoder,
    train_retriever_settings,
    training_items,
    training_summary,
)
from rulerag.tracking import TAG_STAGE_INSTANCE, stage_run


def main(argv: list[str] | None = None) -> int:
    parser = dataset_parser(__doc__ or "")
    parser.add_argument("--encoder", required=True, help="a dense encoder of index.dense")
    parser.add_argument("--mode", required=True, choices=TRAINED_MODES)
    parser.add_argument("--params", type=Path, default=None, help="params file (params.yaml)")
    args = parser.parse_args(argv)
    dataset, encoder, mode = args.dataset, args.encoder, args.mode
    name = f"{encoder}-{mode}"
    params = load_params(args.params)
    section = params.get("train_retriever") or {}
    settings = train_retriever_settings(section, encoder)
    index_cfg = index_settings(params.get("index"))
    spec = index_cfg.encoder(encoder)
    paths = DataLayout(data_dir(dataset))

    set_torch_threads(settings.threads)
    index = DenseIndex.load(paths.index(encoder))
    config = settings.train_config(spec.max_length, index.meta.get("normalize", True))
    # RGFT trains on the search text retrieval will use: one knob, retrieve.rule_query
    rule_query = retrieve_settings(params.get("retrieve")).rule_query
    items, dropped = training_items(
        paths, index.doc_ids, mode == "rgft", settings.positives, rule_query
    )
    train, heldout = split_heldout(items, config.heldout_fraction, config.heldout_max, config.seed)
    if not train:
        raise InputError(f"train_retriever@{dataset}: no F_R item has oracle documents")
    out_dir = paths.training(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    logged = {
        "train_retriever": section,
        "encoder": asdict(spec),
        "mode": mode,
        "rule_query": rule_query,
    }
    with stage_run("train_retriever", dataset, project_dir=PROJECT_DIR, params=logged) as run:
        run.set_tags(
            {TAG_STAGE_INSTANCE: f"train_retriever@{dataset}-{name}", "rulerag.config": name}
        )
        model = load_encoder(
            spec.query_name, index_cfg.device, config.max_length, MODEL_CACHE, spec.pooling
        )
        resume_key = f"{model_fingerprint(str(spec.query_name))}:{index.meta.get('cache_key')}"
        result = train_query_encoder(
            model,
            index.embeddings,
            train,
            heldout,
            config,
            checkpoint_dir=paths.checkpoints(name),
            resume_key=resume_key,
            on_log=lambda metrics, step: run.log_metrics(metrics, step=step),
        )
        target = paths.model(name)
        with staged_dir(target) as staging:
            model.save(str(staging), create_model_card=False)

        losses, evaluations = result.losses(), result.evaluations()
        with atomic_open(out_dir / "loss.csv") as handle:
            losses.to_csv(handle, index=False)
        with atomic_open(out_dir / "heldout.csv") as handle:
            evaluations.to_csv(handle, index=False)
        plot_curves(losses, evaluations, result.metric, out_dir / "loss.png", f"{dataset}: {name}")
        summary = training_summary(result, dataset, name, spec.query_name, dropped)
        write_json(out_dir / "train.json", summary)
        run.log_metrics(numeric_metrics(summary), step=result.steps)
        for artifact in ("train.json", "loss.csv", "heldout.csv", "loss.png"):
            run.log_artifact(out_dir / artifact)
        if settings.log_model:
            from rulerag.model_registry import registered_name, save_encoder_model

            run.log_model(
                lambda folder: save_encoder_model(model, folder),
                "model",
                registered_name=registered_name(dataset, "retriever", name),
                description=f"{mode.upper()} query encoder ({spec.query_name}) for {dataset}; "
                f"documents are encoded by the untuned {spec.doc_name}",
            )
    print(
        f"train_retriever@{dataset}-{name}: {result.steps}/{result.total_steps} steps in "
        f"{result.seconds:.0f}s; held-out {result.metric} {result.base_metric:.3f} -> "
        f"{result.best_metric:.3f} (best step {result.best_step})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
