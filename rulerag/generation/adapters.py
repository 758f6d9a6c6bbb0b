"""The generator's LoRA adapters (RGFT, SSFT): one training sequence, and stage
`train_generator`'s use of it.

`fit_adapter` is the sequence every adapter goes through: samples -> (prompt, target) pairs ->
dev / train split -> tokenizer and base model -> `training.train_lora`. Its callers choose the
samples, so one function serves both:

* `train_generator` (`adapter_plan(...).fit(layout)`): a seeded sample of the F_G queries that
  the variant's retriever searched (`samples.fg_samples`, shuffled with seed + 1 so the dev
  slice is any F_G query), its prompt, the adapter folder `DataLayout.adapter(variant)`;
* the generalisation experiment: the F_G queries of one rule bank, drawn with its own seed and
  searched by that bank's retriever, then

      fit_adapter(samples, n_dev=settings.dev_samples, prompt=spec.prompt,
                  generation=generation, output_dir=folder / "adapter")

  (`trainer` may replace `generation.trainer_settings()`, e.g. with another seed).

Importing this module does not import torch (`passive_openmp` runs first in the stages).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rulerag.errors import InputError
from rulerag.generation.grid_names import retrieval_name
from rulerag.generation.prompts import PromptFormat, Sample
from rulerag.generation.samples import fg_samples, prompt_format
from rulerag.generation.settings import GenerationSettings, TrainSettings, VariantSpec
from rulerag.generation.training import TrainResult
from rulerag.io import atomic_open, write_json
from rulerag.layout import DataLayout

__all__ = ["AdapterPlan", "TrainedAdapter", "adapter_plan", "fit_adapter"]

#: `train_lora`'s statistics that stay out of train_<variant>.json (the curves go to the CSV)
UNREPORTED = frozenset({"loss_curve", "dev_curve", "settings"})


def fit_adapter(
    samples: Sequence[Sample],
    *,
    n_dev: int,
    prompt: str,
    generation: GenerationSettings,
    output_dir: Path,
    trainer: TrainSettings | None = None,
) -> TrainResult:
    """Train a LoRA adapter on `samples` (the first `n_dev` are the dev slice) into
    `output_dir`.

    Each sample becomes its `prompt` kind rendered as the grid renders it (`generation`'s
    prompt style) and its first gold answer as the style's target, so the adapter is trained
    on exactly the prompts it will answer. The base is `generation.model` (quantised, typed as
    configured); `trainer` defaults to `generation.trainer_settings()`. train_stats.json records
    the base model and prompt style, which `generators.make_generator` checks before use.
    """
    target = PromptFormat(generation.prompt_style).target
    pairs = [
        (prompt_format(generation, s).render_sample(prompt, s), target(s.answers[0]))
        for s in samples
    ]
    dev, train = pairs[:n_dev], pairs[n_dev:]
    from rulerag.generation.models import load_causal_lm, load_tokenizer
    from rulerag.generation.training import train_lora

    tokenizer = load_tokenizer(generation.model, padding_side="right")
    model = load_causal_lm(
        generation.model, quantization=generation.quantization, dtype=generation.dtype
    )
    return train_lora(
        model,
        tokenizer,
        train,
        dev,
        trainer or generation.trainer_settings(),
        output_dir,
        base_model=generation.model,
        metadata={"prompt_style": generation.prompt_style},
    )


@dataclass(frozen=True)
class AdapterPlan:
    """One `generation.train.variants` entry as `train_generator` trains it."""

    variant: str
    spec: VariantSpec
    retrieval: str  # the retrieval configuration whose F_G run gives the documents
    generation: GenerationSettings

    @property
    def tracked(self) -> dict[str, Any]:
        """The MLflow params of the run (the grid and the API are no business of training)."""
        settings = asdict(self.generation)
        return {
            "generation": {k: v for k, v in settings.items() if k not in {"grid", "api"}},
            "variant": {
                "name": self.variant,
                "retrieval": self.retrieval,
                "prompt": self.spec.prompt,
            },
        }

    def fit(self, layout: DataLayout) -> TrainedAdapter:
        """Train the adapter into `DataLayout.adapter(variant)` (replaced atomically) on
        `generation.train.samples` + `dev_samples` F_G samples, seeded and the same in every
        process of a multi-GPU launch."""
        train = self.generation.train
        samples = fg_samples(
            layout.root,
            train.samples + train.dev_samples,
            self.retrieval,
            self.spec.rules,
            self.generation,
            shuffle=True,
        )
        result = fit_adapter(
            samples,
            n_dev=train.dev_samples,
            prompt=self.spec.prompt,
            generation=self.generation,
            output_dir=layout.adapter(self.variant),
        )
        return TrainedAdapter(self, result)


def adapter_plan(variant: str, generation: GenerationSettings) -> AdapterPlan:
    """The plan of `variant` (InputError naming the variants when it is none of them)."""
    variants = generation.train.variants
    if variant not in variants:
        raise InputError(f"train_generator: unknown variant {variant!r} ({sorted(variants)})")
    spec = variants[variant]
    return AdapterPlan(
        variant, spec, retrieval_name(spec.retrieval, generation.retriever), generation
    )


@dataclass(frozen=True)
class TrainedAdapter:
    """A trained adapter (saved by `train_lora`) and what `train_generator` writes beside it."""

    plan: AdapterPlan
    result: TrainResult

    @property
    def adapter(self) -> Path:
        return self.result.adapter_dir

    @property
    def stats(self) -> dict[str, Any]:
        """train_<variant>.json: the training figures, the variant, its retrieval and prompt."""
        plan = self.plan
        stats = {k: v for k, v in self.result.stats.items() if k not in UNREPORTED}
        stats.update(
            {"variant": plan.variant, "retrieval": plan.retrieval, "prompt": plan.spec.prompt}
        )
        return stats

    def metrics(self) -> dict[str, float]:
        """The numeric figures of `stats`, for MLflow."""
        return {
            k: v
            for k, v in self.stats.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }

    def curve_metrics(self) -> Iterator[tuple[int, dict[str, float]]]:
        """(step, {"train_loss" | "dev_loss": value}) per logged point, for MLflow."""
        for name, curve in (("train_loss", "loss_curve"), ("dev_loss", "dev_curve")):
            for point in self.result.stats[curve]:
                yield point["step"], {name: point["loss"]}

    def write(self, layout: DataLayout) -> None:
        """train_<variant>.json (DVC metrics) and train_<variant>_loss.csv (DVC plots)."""
        variant = self.plan.variant
        write_json(layout.train_stats(variant), self.stats)
        with atomic_open(layout.loss_curve(variant)) as handle:
            handle.write("step,loss,split\n")
            for split, curve in (("train", "loss_curve"), ("dev", "dev_curve")):
                for point in self.result.stats[curve]:
                    handle.write(f"{point['step']},{point['loss']:.5f},{split}\n")

    def description(self, dataset: str) -> str:
        """The registered model's description."""
        plan, generation = self.plan, self.plan.generation
        return (
            f"{plan.variant.upper()} LoRA adapter on {generation.model} for {dataset} "
            f"({generation.prompt_style} prompts, {plan.spec.prompt} prompt)"
        )

    def summary(self) -> str:
        """Samples, steps, time and the losses in one line."""
        stats = self.stats
        return (
            f"{stats['train_samples']} samples, {stats['steps']} steps in "
            f"{stats['train_seconds']:.0f}s ({stats['seconds_per_100_samples']:.0f}s/100 "
            f"samples); loss {stats['first_loss']:.3f} -> {stats['last_loss']:.3f}, dev "
            f"{stats['dev_loss_before']} -> {stats['dev_loss_best']}"
        )
