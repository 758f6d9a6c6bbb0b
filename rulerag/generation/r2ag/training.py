"""Training R²AG (paper §3.5): the R²-Former (and LoRA on the LLM when asked) on LM + QDM loss.

A plain PyTorch loop rather than the HF Trainer: the model reads features and placeholders
beside the token ids, and only the R²-Former's weights (plus LoRA's) are saved. The official
code's knobs: Adam(W) at a constant learning rate after a short warm-up, gradient
accumulation, gradient-norm clipping; the dev loss is measured every `eval_steps` optimiser
steps and the best state is kept, as the LoRA trainer does.

Saved folder: `former.safetensors` (the R²-Former), `r2ag.json` (its shape, the feature mask,
the LLM, prompt style, chat template and retrieval it was trained with, so generation can
refuse a mismatch), `adapter/` (LoRA, when trained) and `train_stats.json`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rulerag.generation.r2ag.data import R2AGCollator, R2AGExample
from rulerag.generation.r2ag.former import R2Former
from rulerag.generation.r2ag.model import R2AGModel
from rulerag.generation.r2ag.settings import R2AGTrain

__all__ = [
    "ADAPTER_DIR",
    "FORMER_FILE",
    "META_FILE",
    "STATS_FILE",
    "load_former",
    "save_r2ag",
    "train_r2ag",
]

FORMER_FILE = "former.safetensors"
META_FILE = "r2ag.json"
STATS_FILE = "train_stats.json"
ADAPTER_DIR = "adapter"
#: params' schedule names -> transformers.get_scheduler's (all with the warm-up)
_SCHEDULERS = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}


@dataclass
class _Window:
    loss: float = 0.0
    lm: float = 0.0
    qdm: float = 0.0
    batches: int = 0

    def add(self, loss: float, lm: float, qdm: float) -> None:
        self.loss, self.lm, self.qdm = self.loss + loss, self.lm + lm, self.qdm + qdm
        self.batches += 1

    def point(self, step: int) -> dict[str, float]:
        n = max(1, self.batches)
        return {"step": step, "loss": self.loss / n, "lm": self.lm / n, "qdm": self.qdm / n}


def _batches(
    examples: Sequence[R2AGExample], size: int, epochs: float, seed: int
) -> Iterator[list[R2AGExample]]:
    """Shuffled micro-batches, epoch after epoch, the last epoch cut to the fraction asked."""
    generator = torch.Generator().manual_seed(seed)
    total = math.ceil(len(examples) / size * epochs)
    done = 0
    while done < total:
        order = torch.randperm(len(examples), generator=generator).tolist()
        for start in range(0, len(order), size):
            if done == total:
                return
            yield [examples[i] for i in order[start : start + size]]
            done += 1


def _to(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device) for k, v in batch.items()}


@torch.no_grad()
def evaluate(
    model: R2AGModel, examples: Sequence[R2AGExample], collate: R2AGCollator, batch_size: int
) -> dict[str, float]:
    """Mean LM, QDM and total loss over `examples`, and the QDM head's accuracy at 0.5."""
    if not examples:
        return {}
    was_training = model.training
    model.eval()
    device = next(model.former.parameters()).device
    sums = {"loss": 0.0, "lm": 0.0, "qdm": 0.0}
    correct = total = 0.0
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        batch = _to(collate(chunk), device)
        out = model(**batch)
        for key, value in (("loss", out.loss), ("lm", out.lm_loss), ("qdm", out.qdm_loss)):
            sums[key] += float(value) * len(chunk)
        mask = batch["doc_mask"]
        hits = ((out.relevance_logits > 0).float() == batch["doc_labels"]) & mask
        correct += float(hits.sum())
        total += float(mask.sum())
    model.train(was_training)
    means = {key: value / len(examples) for key, value in sums.items()}
    means["qdm_accuracy"] = correct / total if total else float("nan")
    return means


def _trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def train_r2ag(
    model: R2AGModel,
    train: Sequence[R2AGExample],
    dev: Sequence[R2AGExample],
    settings: R2AGTrain,
    *,
    pad_token_id: int,
    seed: int = 12,
    progress: bool = True,
) -> dict[str, Any]:
    """Train the trainable parameters of `model` in place (the best dev state restored at the
    end); returns statistics with the loss curves."""
    from tqdm.auto import tqdm
    from transformers import get_scheduler

    if not train:
        raise ValueError("R²AG training needs at least one example")
    torch.manual_seed(seed)
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        parameters, lr=settings.learning_rate, weight_decay=settings.weight_decay
    )
    micro = math.ceil(len(train) / settings.batch_size * settings.epochs)
    steps = max(1, math.ceil(micro / settings.gradient_accumulation))
    warmup = int(settings.warmup) if settings.warmup >= 1 else math.ceil(settings.warmup * steps)
    scheduler = get_scheduler(
        _SCHEDULERS[settings.schedule], optimizer, num_warmup_steps=warmup, num_training_steps=steps
    )
    collate = R2AGCollator(pad_token_id, side="right")
    device = next(model.former.parameters()).device
    before = evaluate(model, dev, collate, settings.batch_size)
    best_loss = before.get("loss", math.inf)
    best_state, best_step = _trainable_state(model), 0
    curve: list[dict[str, float]] = []
    dev_curve: list[dict[str, float]] = [{"step": 0, **before}] if before else []
    window, step = _Window(), 0
    started = time.perf_counter()
    model.train()
    bar = tqdm(total=steps, desc="R²AG training", unit="step", disable=not progress)
    batches = list(_batches(train, settings.batch_size, settings.epochs, seed))
    for index, chunk in enumerate(batches, 1):
        out = model(**_to(collate(chunk), device))
        (out.loss / settings.gradient_accumulation).backward()
        window.add(out.loss.item(), out.lm_loss.item(), out.qdm_loss.item())
        if index % settings.gradient_accumulation and index != len(batches):
            continue
        if settings.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(parameters, settings.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        bar.update(1)
        if step % settings.logging_steps == 0 or step == steps:
            curve.append(window.point(step))
            bar.set_postfix(loss=f"{curve[-1]['loss']:.3f}")
            window = _Window()
        if dev and (step % settings.eval_steps == 0 or step == steps):
            measured = evaluate(model, dev, collate, settings.batch_size)
            dev_curve.append({"step": step, **measured})
            if measured["loss"] < best_loss:
                best_loss, best_state, best_step = measured["loss"], _trainable_state(model), step
    bar.close()
    seconds = time.perf_counter() - started
    if dev:
        model.load_state_dict(best_state, strict=False)
    model.eval()
    return {
        "train_samples": len(train),
        "dev_samples": len(dev),
        "steps": step,
        "warmup_steps": warmup,
        "train_seconds": round(seconds, 1),
        "seconds_per_100_samples": round(100 * seconds / (len(train) * settings.epochs), 1),
        "first_loss": curve[0]["loss"] if curve else None,
        "last_loss": curve[-1]["loss"] if curve else None,
        "dev_before": before or None,
        "dev_best": dev_curve[[p["step"] for p in dev_curve].index(best_step)] if dev else None,
        "best_step": best_step,
        "trainable_parameters": sum(p.numel() for p in parameters),
        "loss_curve": curve,
        "dev_curve": dev_curve,
    }


def save_r2ag(model: R2AGModel, folder: Path, meta: dict[str, Any], stats: dict[str, Any]) -> None:
    """The R²-Former, its metadata, LoRA (when the LLM has it) and the statistics."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.former.state_dict().items()}
    save_file(state, str(folder / FORMER_FILE))
    meta = {**meta, "former": model.former.meta()}
    (folder / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    if hasattr(model.llm, "peft_config"):
        model.llm.save_pretrained(str(folder / ADAPTER_DIR))
    (folder / STATS_FILE).write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")


def load_former(folder: Path) -> tuple[R2Former, dict[str, Any]]:
    """The trained R²-Former of `folder` (eval mode) and its metadata."""
    from safetensors.torch import load_file

    meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    former = R2Former.from_meta(meta["former"])
    former.load_state_dict(load_file(str(folder / FORMER_FILE)))
    return former.eval(), meta
