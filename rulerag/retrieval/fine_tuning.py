"""The `train_retriever` step: an RGFT or SSFT query encoder fine-tuned on F_R, and its figures.

RGFT trains on `q ∘ r` (each rule in the form retrieval searches with, `retrieve.rule_query`),
SSFT on `q` alone; the positives are each item's oracle documents, the negatives the batch's
other documents. The document encoder is frozen, so the corpus embeddings of the `index` step
serve training and the trained query encoder searches the same index (`training`). What is
written: the query encoder (a sentence-transformers folder), train.json, loss.csv,
heldout.csv and loss.png; resumable checkpoints stay in retrieval/checkpoints/<name>/.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rulerag.errors import InputError
from rulerag.io import atomic_open, staged_dir, write_json
from rulerag.layout import DataLayout
from rulerag.retrieval.configs import TRAINED_MODES
from rulerag.retrieval.settings import IndexSettings, RetrieveSettings, TrainRetrieverSettings
from rulerag.retrieval.training import FittedEncoder, TrainResult, fit_query_encoder, training_items

__all__ = [
    "TrainedRetriever",
    "heldout_summary",
    "plot_curves",
    "train_retriever",
    "training_summary",
]


@dataclass
class TrainedRetriever:
    """What `train_retriever` writes: the fine-tuned query encoder and its training figures."""

    dataset: str
    name: str  # <encoder>-<mode>, e.g. minilm-rgft
    mode: str  # rgft | ssft
    settings: TrainRetrieverSettings  # the encoder's (its `overrides` applied)
    fitted: FittedEncoder
    summary: dict[str, Any]  # train.json

    #: what `write` puts in the training folder (all logged to MLflow)
    FILES = ("train.json", "loss.csv", "heldout.csv", "loss.png")

    @property
    def result(self) -> TrainResult:
        return self.fitted.result

    @property
    def outcome(self) -> str:
        """One line on how training went: steps, time, held-out figure before and after."""
        r = self.result
        return (
            f"{r.steps}/{r.total_steps} steps in {r.seconds:.0f}s; held-out {r.metric} "
            f"{r.base_metric:.3f} -> {r.best_metric:.3f} (best step {r.best_step})"
        )

    @property
    def model_description(self) -> str:
        """The registered model's description: what it is and which documents it searches."""
        spec = self.fitted.spec
        return (
            f"{self.mode.upper()} query encoder ({spec.query_name}) for {self.dataset}; "
            f"documents are encoded by the untuned {spec.doc_name}"
        )

    def write(self, layout: DataLayout) -> None:
        """The model folder (replaced whole) into `layout.model(name)`; loss.csv, heldout.csv,
        loss.png and train.json into `layout.training(name)`."""
        with staged_dir(layout.model(self.name)) as staging:
            self.fitted.model.save(str(staging), create_model_card=False)
        folder = layout.training(self.name)
        folder.mkdir(parents=True, exist_ok=True)
        losses, evaluations = self.result.losses(), self.result.evaluations()
        with atomic_open(folder / "loss.csv") as handle:
            losses.to_csv(handle, index=False)
        with atomic_open(folder / "heldout.csv") as handle:
            evaluations.to_csv(handle, index=False)
        title = f"{self.dataset}: {self.name}"
        plot_curves(losses, evaluations, self.result.metric, folder / "loss.png", title)
        write_json(folder / "train.json", self.summary)


def train_retriever(
    layout: DataLayout,
    encoder: str,
    mode: str,
    settings: TrainRetrieverSettings,
    index_settings: IndexSettings,
    retrieve: RetrieveSettings,
    model_cache: Path | None = None,
    on_log: Callable[[dict[str, float], int], None] | None = None,
) -> TrainedRetriever:
    """The `train_retriever` stage: `encoder`'s query side fine-tuned in `mode` (rgft, ssft)
    on the dataset's F_R items against its corpus index (`fit_query_encoder`), with the
    section's `overrides.<encoder>` applied (`TrainRetrieverSettings.for_encoder`).

    Rules take `retrieve.rule_query`'s form in the RGFT inputs (the text retrieval will search
    with); `on_log(metrics, step)` receives the training loss and
    held-out figures as they come (MLflow).
    """
    from rulerag.retrieval.dense import DenseIndex
    from rulerag.retrieval.encoders import set_torch_threads

    if mode not in TRAINED_MODES:
        raise ValueError(f"mode must be one of {TRAINED_MODES}, not {mode!r}")
    name = f"{encoder}-{mode}"
    settings = settings.for_encoder(encoder)
    spec = index_settings.encoder(encoder)
    if not (layout.index(encoder) / "meta.json").is_file():
        raise InputError(
            f"train_retriever@{layout.dataset}: no {encoder} index at {layout.index(encoder)}; "
            "run the index stage"
        )
    set_torch_threads(settings.threads)
    index = DenseIndex.load(layout.index(encoder))
    items, dropped = training_items(
        layout, index.doc_ids, mode == "rgft", settings.positives, retrieve
    )
    fitted = fit_query_encoder(
        items,
        index,
        spec,
        settings,
        device=index_settings.device,
        model_cache=model_cache,
        checkpoint_dir=layout.checkpoints(name),
        on_log=on_log,
        where=f"train_retriever@{layout.dataset}",
    )
    summary = training_summary(fitted.result, layout.dataset, name, spec.query_name, dropped)
    return TrainedRetriever(layout.dataset, name, mode, settings, fitted, summary)


def heldout_summary(evaluations: pd.DataFrame, best_step: int) -> dict[str, float]:
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


def training_summary(
    result: TrainResult, dataset: str, model: str, base_model: str, dropped: Mapping[str, int]
) -> dict[str, Any]:
    """train.json: steps, early stopping, held-out figures before and after, losses, counts."""
    losses = result.losses()
    return {
        "dataset": dataset,
        "model": model,
        "base_model": base_model,
        "steps": result.steps,
        "total_steps": result.total_steps,
        "best_step": result.best_step,
        "early_stopping_metric": result.metric,
        **heldout_summary(result.evaluations(), result.best_step),
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


def plot_curves(
    losses: pd.DataFrame, evaluations: pd.DataFrame, metric: str, path: Path, title: str
) -> None:
    """Train loss (and a 20-step running mean) with the held-out metric on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
