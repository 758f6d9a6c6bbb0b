"""R²AG end to end for the pipeline: train a variant on F_G samples, or open it for a grid row.

`R2AGPlan` is stage `train_r2ag`'s work: `r2ag_plan` resolves an `r2ag.variants` entry (its
retrieval run, what MLflow records) before anything loads; `R2AGPlan.fit` draws the variant's
F_G samples (seeded, as `train_generator` does), opens the feature encoder of its retrieval run
and trains it; `TrainedR2AG.write` saves the model folder, the statistics and the loss curves.

`fit_variant` loads `generation.model` (frozen; LoRA on it for a `lora` variant), adds the
placeholder token, builds the training examples from the variant's F_G samples (marked prompt,
answer target, features from the variant's retriever, answer-bearing document labels), trains
the R²-Former on LM + QDM loss and returns what `save_r2ag` writes. `open_generator` is the
grid's side: the trained folder behind the row's retrieval run.

Importing this module does not import torch (`passive_openmp` runs first in the stages).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rulerag.generation.grid_names import retrieval_name
from rulerag.generation.prompts import PromptFormat, Sample
from rulerag.generation.r2ag.encoding import FeatureEncoder, open_feature_encoder
from rulerag.generation.r2ag.settings import R2AGSettings, R2AGVariant
from rulerag.generation.samples import fg_samples
from rulerag.generation.settings import GenerationSettings
from rulerag.io import atomic_open, staged_outputs, write_json
from rulerag.layout import DataLayout
from rulerag.retrieval.data import read_rule_texts
from rulerag.retrieval.rule_guided import rule_query_texts
from rulerag.retrieval.settings import IndexSettings, RetrieveSettings

__all__ = [
    "FitResult",
    "R2AGPlan",
    "TrainedR2AG",
    "fit_variant",
    "generator_factory",
    "open_generator",
    "r2ag_plan",
]

#: the stage name in the statistics' and loss curves' file names (`DataLayout.train_stats`)
STAGE = "train_r2ag"
#: the loss parts each curve point has (total, LM, QDM)
LOSSES = ("loss", "lm", "qdm")
#: the curves in `fit_variant`'s statistics (kept in the model folder, not in the metrics file)
CURVES = ("loss_curve", "dev_curve")


@dataclass
class FitResult:
    model: Any  # R2AGModel
    meta: dict[str, Any]
    stats: dict[str, Any]


@dataclass(frozen=True)
class R2AGPlan:
    """One `r2ag.variants` entry as `train_r2ag` trains it."""

    variant: str
    spec: R2AGVariant
    retrieval: str  # the retrieval configuration whose F_G run gives the documents
    generation: GenerationSettings
    settings: R2AGSettings

    @property
    def tracked(self) -> dict[str, Any]:
        """The MLflow params of the run."""
        return {
            "r2ag": {**asdict(self.settings), "profiles": None},
            "variant": {"name": self.variant, **asdict(self.spec), "retrieval": self.retrieval},
            "generation.model": self.generation.model,
        }

    def fit(
        self,
        layout: DataLayout,
        index: IndexSettings,
        retrieve: RetrieveSettings,
        *,
        model_cache: Path | None = None,
    ) -> TrainedR2AG:
        """Train the variant on `r2ag.train.samples` + `dev_samples` F_G samples (the dev
        slice first), features from its retrieval run's encoder (`r2ag.encoder` or
        `generation.retriever`'s index for a sparse run)."""
        settings, generation = self.settings, self.generation
        n_train, n_dev = settings.train.samples, settings.train.dev_samples
        samples = fg_samples(
            layout.root, n_train + n_dev, self.retrieval, self.spec.rules, generation, shuffle=True
        )
        features = open_feature_encoder(
            layout.root,
            self.retrieval,
            index,
            rule_query_texts(read_rule_texts(layout.rule_bank), retrieve.rule_query),
            encoder=settings.encoder or generation.retriever,
            mask=settings.feature_mask(),
            model_cache=model_cache,
        )
        result = fit_variant(
            samples, n_dev, self.spec, features, generation, settings, retrieval=self.retrieval
        )
        return TrainedR2AG(self.variant, result)


def r2ag_plan(variant: str, generation: GenerationSettings, settings: R2AGSettings) -> R2AGPlan:
    """The plan of `variant` (ValueError naming the variants when it is none of them)."""
    spec = settings.variant(variant)
    return R2AGPlan(
        variant, spec, retrieval_name(spec.retrieval, generation.retriever), generation, settings
    )


@dataclass(frozen=True)
class TrainedR2AG:
    """A trained variant and what `train_r2ag` writes of it."""

    variant: str
    result: FitResult

    @property
    def stats(self) -> dict[str, Any]:
        """train_r2ag_<variant>.json: the variant, its metadata, the training figures (no
        curves: those go to the loss CSV)."""
        figures = {k: v for k, v in self.result.stats.items() if k not in CURVES}
        return {"variant": self.variant, **self.result.meta, **figures}

    def curve_points(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(split, point) of the train then the dev curve, each point with step and `LOSSES`."""
        for split, curve in (("train", "loss_curve"), ("dev", "dev_curve")):
            for point in self.result.stats[curve]:
                yield split, point

    def curve_metrics(self) -> Iterator[tuple[int, dict[str, float]]]:
        """(step, {"<split>_<loss>": value}) per curve point, for MLflow."""
        for split, p in self.curve_points():
            yield p["step"], {f"{split}_{k}": p[k] for k in LOSSES}

    def write(self, layout: DataLayout) -> None:
        """The model folder (`DataLayout.r2ag_model`, replaced whole; its statistics keep the
        curves), train_r2ag_<variant>.json (DVC metrics) and its loss CSV (DVC plots)."""
        from rulerag.generation.r2ag.training import save_r2ag

        result = self.result
        with staged_outputs(layout.r2ag_model(self.variant), STAGE) as staging:
            save_r2ag(result.model, staging, result.meta, result.stats)
        write_json(layout.train_stats(self.variant, STAGE), self.stats)
        with atomic_open(layout.loss_curve(self.variant, STAGE)) as handle:
            handle.write("step,loss,lm,qdm,split\n")
            for split, p in self.curve_points():
                values = ",".join(f"{p[k]:.5f}" for k in LOSSES)
                handle.write(f"{p['step']},{values},{split}\n")

    def summary(self) -> str:
        """Samples, steps, time, the loss and the dev LM loss / QDM accuracy, in one line."""
        stats = self.stats
        before, best = stats.get("dev_before") or {}, stats.get("dev_best") or {}
        nan = float("nan")
        return (
            f"{stats['train_samples']} samples, {stats['steps']} steps in "
            f"{stats['train_seconds']:.0f}s; loss {stats['first_loss']:.3f} -> "
            f"{stats['last_loss']:.3f}; dev LM {before.get('lm', nan):.3f} -> "
            f"{best.get('lm', nan):.3f}, QDM accuracy {before.get('qdm_accuracy', nan):.2f} -> "
            f"{best.get('qdm_accuracy', nan):.2f}"
        )


def fit_variant(
    samples: Sequence[Sample],
    n_dev: int,
    variant: R2AGVariant,
    features: FeatureEncoder,
    generation: GenerationSettings,
    settings: R2AGSettings,
    *,
    retrieval: str,
) -> FitResult:
    """Train one R²AG variant on `samples` (the first `n_dev` are the dev set)."""
    import torch

    from rulerag.generation.models import load_causal_lm, load_tokenizer
    from rulerag.generation.prompts import use_chat_template
    from rulerag.generation.r2ag.data import marked_prompt, training_examples
    from rulerag.generation.r2ag.former import R2Former
    from rulerag.generation.r2ag.model import R2AGModel
    from rulerag.generation.r2ag.prompting import add_placeholder
    from rulerag.generation.r2ag.training import train_r2ag
    from rulerag.generation.training import lora_model

    torch.manual_seed(settings.seed)
    tokenizer = load_tokenizer(generation.model, padding_side="right")
    llm = load_causal_lm(
        generation.model, quantization=generation.quantization, dtype=generation.dtype
    )
    placeholder = add_placeholder(tokenizer, llm)
    chat_template = use_chat_template(tokenizer, generation.chat_template)
    if variant.lora:
        llm = lora_model(llm, settings.lora, quantization=generation.quantization)
    else:
        llm.eval()  # frozen: no dropout in the LLM either
    hidden = llm.get_input_embeddings().embedding_dim
    former = R2Former(settings.former, hidden)
    device = next(llm.parameters()).device
    model = R2AGModel(
        llm, former.to(device), placeholder, qdm_weight=settings.qdm_weight, freeze_llm=False
    )
    if not variant.lora:
        for parameter in llm.parameters():
            parameter.requires_grad_(False)

    formats = [PromptFormat(generation.prompt_style, s.temporal) for s in samples]
    prompts = [marked_prompt(f, variant.prompt, s) for f, s in zip(formats, samples, strict=True)]
    targets = [f.target(s.answers[0]) for f, s in zip(formats, samples, strict=True)]
    examples = training_examples(
        samples,
        prompts,
        targets,
        tokenizer,
        placeholder,
        features.features,
        chat_template=chat_template,
        max_prompt_tokens=generation.max_prompt_tokens,
        max_answer_tokens=settings.train.max_answer_tokens,
        label_mode=settings.labels,
    )
    dev, train = examples[:n_dev], examples[n_dev:]
    stats = train_r2ag(
        model, train, dev, settings.train, pad_token_id=tokenizer.pad_token_id, seed=settings.seed
    )
    labelled = [e.doc_labels for e in train]
    stats.update(
        {
            "documents_per_prompt": round(sum(len(x) for x in labelled) / len(labelled), 2),
            "answer_bearing_share": round(
                float(sum(x.sum() for x in labelled) / max(1, sum(len(x) for x in labelled))), 4
            ),
            "prompts_cut": sum(1 for e in examples if e.first_doc > 0),
        }
    )
    meta = {
        "base_model": generation.model,
        "prompt_style": generation.prompt_style,
        "chat_template": chat_template,
        "placeholder_id": placeholder,
        "retrieval": retrieval,
        "feature_encoder": features.name,
        "prompt": variant.prompt,
        "rules": variant.rules,
        "lora": variant.lora,
        "feature_mask": [float(x) for x in features.mask],
        "qdm_weight": settings.qdm_weight,
    }
    return FitResult(model, meta, stats)


def open_generator(
    folder: Path,
    root: Path,
    retrieval: str,
    generation: GenerationSettings,
    index_settings: IndexSettings,
    search_rules: Mapping[str, str],
    *,
    encoder: str,
    model_cache: Path | None = None,
) -> Any:
    """The trained variant in `folder` as an `R2AGGenerator` for retrieval run `retrieval`
    under data/<dataset>/ (`root`), reading features as it was trained to (its feature mask)."""
    import json

    from rulerag.generation.r2ag.generator import R2AGGenerator
    from rulerag.generation.r2ag.training import META_FILE

    meta_path = folder / META_FILE
    if not meta_path.is_file():
        raise FileNotFoundError(f"{folder}: run train_r2ag first")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    features = open_feature_encoder(
        root,
        retrieval,
        index_settings,
        search_rules,
        encoder=encoder,
        mask=meta.get("feature_mask", (1.0, 1.0, 1.0)),
        model_cache=model_cache,
    )
    return R2AGGenerator.load(
        folder,
        features,
        model_name=generation.model,
        prompt_style=generation.prompt_style,
        quantization=generation.quantization,
        dtype=generation.dtype,
        max_new_tokens=generation.max_new_tokens,
        batch_size=generation.batch_size,
        chat_template=generation.chat_template,
        max_prompt_tokens=generation.max_prompt_tokens,
    )


def generator_factory(
    variant: str,
    index_settings: IndexSettings,
    retrieve: RetrieveSettings,
    *,
    encoder: str,
    model_cache: Path | None = None,
) -> Callable[..., Any]:
    """`run_row`'s generator factory for the R²AG row `variant` (its trained folder,
    `DataLayout.r2ag_model`; features from `encoder`'s index for a sparse run)."""
    from rulerag.generation.settings import GridConfig

    def factory(
        base: Path, grid: GridConfig, settings: GenerationSettings, retrieval: str | None
    ) -> Any:
        if retrieval is None:
            raise ValueError(f"r2ag.variants.{variant}: R²AG needs a retrieval run")
        layout = DataLayout(Path(base))
        return open_generator(
            layout.r2ag_model(variant),
            base,
            retrieval_name(retrieval, settings.retriever),
            settings,
            index_settings,
            rule_query_texts(read_rule_texts(layout.rule_bank), retrieve.rule_query),
            encoder=encoder,
            model_cache=model_cache,
        )

    return factory
