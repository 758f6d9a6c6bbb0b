"""Stage `train_retriever`: RGFT / SSFT fine-tuning of a dense query encoder on F_R.

`--encoder minilm --mode rgft` trains on `q ∘ r` inputs, `--mode ssft` on `q` alone; the
positives are each item's oracle documents, the negatives the batch's other documents (never
the query's own oracle documents). The document encoder is frozen, so the corpus embeddings
of `index` (retrieval/index/<encoder>/) serve training and the trained query encoder searches
the same index. Writes:

    retrieval/models/<encoder>-<mode>/       the query encoder (sentence-transformers folder,
                                             model.safetensors)
    retrieval/training/<encoder>-<mode>/     train.json (metrics), loss.csv and heldout.csv
                                             (DVC plots), loss.png
    retrieval/checkpoints/<encoder>-<mode>/  resumable checkpoints (kept between runs)

Loss curves, held-out figures and the trained encoder are logged to MLflow.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pipeline_steps.common import (  # noqa: E402
    MODEL_CACHE,
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    numeric_metrics,
)
from rulerag.io import atomic_open, staged_dir, write_json  # noqa: E402
from rulerag.retrieval.configs import (  # noqa: E402
    DEFAULT_ENCODERS,
    TRAINED_MODES,
    RetrievalPaths,
)
from rulerag.retrieval.data import read_corpus, read_rule_items  # noqa: E402
from rulerag.tracking import TAG_STAGE_INSTANCE, stage_run  # noqa: E402


def plot_curves(losses, evaluations, metric: str, path: Path, title: str) -> None:
    """Train loss (and a 20-step running mean) with the held-out metric on a second axis."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    if len(losses):
        ax.plot(losses["step"], losses["train_loss"], color="#c6dbef", lw=0.8, label="loss")
        smooth = losses["train_loss"].rolling(20, min_periods=1).mean()
        ax.plot(losses["step"], smooth, color="#3182bd", label="loss (mean of 20)")
    ax.set_xlabel("step")
    ax.set_ylabel("contrastive loss")
    if len(evaluations):
        other = ax.twinx()
        other.plot(evaluations["step"], evaluations[metric], "o-", color="#e6550d", label=metric)
        other.set_ylabel(f"held-out {metric.replace('heldout_', '')}")
        other.legend(loc="upper right")
    ax.legend(loc="upper left")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def heldout_summary(evaluations, best_step: int) -> dict[str, float]:
    """Held-out figures of the base encoder (step 0) and of the kept (best) step."""
    if not len(evaluations):
        return {}
    base = evaluations.iloc[0]
    best = evaluations[evaluations["step"] == best_step].iloc[-1]
    out = {}
    for column in evaluations.columns:
        if column != "step":
            out[f"base_{column}"] = round(float(base[column]), 4)
            out[f"best_{column}"] = round(float(best[column]), 4)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = dataset_parser(__doc__ or "")
    parser.add_argument("--encoder", required=True, help="a dense encoder of index.dense")
    parser.add_argument("--mode", required=True, choices=TRAINED_MODES)
    parser.add_argument("--params", type=Path, default=None, help="params file (params.yaml)")
    args = parser.parse_args(argv)
    dataset, encoder, mode = args.dataset, args.encoder, args.mode
    name = f"{encoder}-{mode}"
    params = load_params(args.params)
    index_cfg = params.get("index") or {}
    raw: dict[str, Any] = dict(params.get("train_retriever") or {})
    overrides = (raw.pop("overrides", None) or {}).get(encoder) or {}
    cfg = {**raw, **overrides}
    paths = RetrievalPaths(data_dir(dataset))

    import torch

    if int(cfg.get("threads") or 0) > 0:  # 0: torch's default (all cores)
        torch.set_num_threads(int(cfg["threads"]))
    from rulerag.retrieval.dense import DenseIndex
    from rulerag.retrieval.encoders import EncoderSpec, load_encoder, model_fingerprint
    from rulerag.retrieval.training import (
        TrainConfig,
        answer_bearing,
        make_items,
        split_heldout,
        train_query_encoder,
    )

    spec = EncoderSpec.from_params({**DEFAULT_ENCODERS, **(index_cfg.get("dense") or {})}[encoder])
    index = DenseIndex.load(paths.index(encoder))
    config = TrainConfig.from_params(
        {"max_length": spec.max_length, "normalize": index.meta.get("normalize", True), **cfg}
    )
    rule_items = read_rule_items(paths.queries("f_r"))
    doc_row = {doc_id: i for i, doc_id in enumerate(index.doc_ids)}
    positives = cfg.get("positives", "oracle")
    if positives not in ("oracle", "answer"):
        raise SystemExit(f"train_retriever.positives must be oracle or answer, not {positives!r}")
    keep = None
    if positives == "answer":
        corpus = read_corpus(paths.corpus)
        keep = answer_bearing(dict(zip(corpus.ids, corpus.contents, strict=True)))
    items, dropped = make_items(rule_items, doc_row, use_rules=(mode == "rgft"), keep=keep)
    train, heldout = split_heldout(items, config.heldout_fraction, config.heldout_max, config.seed)
    if not train:
        print(f"train_retriever@{dataset}: no F_R item has oracle documents", file=sys.stderr)
        return 2
    out_dir = paths.training(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    logged = {"train_retriever": cfg, "encoder": spec.__dict__, "mode": mode}
    with stage_run("train_retriever", dataset, project_dir=PROJECT_DIR, params=logged) as run:
        run.set_tags(
            {TAG_STAGE_INSTANCE: f"train_retriever@{dataset}-{name}", "rulerag.config": name}
        )
        model = load_encoder(
            spec.query_name, index_cfg.get("device", "auto"), config.max_length, MODEL_CACHE
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

        metric = result.metric
        losses = result.losses()
        evaluations = result.evaluations()
        with atomic_open(out_dir / "loss.csv") as handle:
            losses.to_csv(handle, index=False)
        with atomic_open(out_dir / "heldout.csv") as handle:
            evaluations.to_csv(handle, index=False)
        plot_curves(losses, evaluations, metric, out_dir / "loss.png", f"{dataset}: {name}")
        summary = {
            "dataset": dataset,
            "model": name,
            "base_model": spec.query_name,
            "steps": result.steps,
            "total_steps": result.total_steps,
            "best_step": result.best_step,
            "early_stopping_metric": metric,
            **heldout_summary(evaluations, result.best_step),
            "stopped_early": result.stopped_early,
            "resumed_from_step": result.resumed_from,
            "seconds": round(result.seconds, 1),
            "first_loss": round(float(losses["train_loss"].iloc[0]), 4) if len(losses) else None,
            "last_loss_mean_20": round(float(losses["train_loss"].tail(20).mean()), 4)
            if len(losses)
            else None,
            **result.counts,
            **dropped,
        }
        write_json(out_dir / "train.json", summary)
        run.log_metrics(numeric_metrics(summary), step=result.steps)
        for artifact in ("train.json", "loss.csv", "heldout.csv", "loss.png"):
            run.log_artifact(out_dir / artifact)
        if cfg.get("log_model", True):
            run.log_artifact(target, artifact_path="model")
    print(
        f"train_retriever@{dataset}-{name}: {result.steps}/{result.total_steps} steps in "
        f"{result.seconds:.0f}s; held-out {metric} {result.base_metric:.3f} -> "
        f"{result.best_metric:.3f} (best step {result.best_step})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
