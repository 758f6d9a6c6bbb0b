"""R²AG end to end for the pipeline: train a variant on F_G samples, or open it for a grid row.

`fit_variant` loads `generation.model` (frozen; LoRA on it for a `lora` variant), adds the
placeholder token, builds the training examples from the variant's F_G samples (marked prompt,
answer target, features from the variant's retriever, answer-bearing document labels), trains
the R²-Former on LM + QDM loss and returns what `save_r2ag` writes. `open_generator` is the
grid's side: the trained folder behind the row's retrieval run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rulerag.generation.config import GenerationSettings
from rulerag.generation.prompts import PromptFormat, Sample
from rulerag.generation.r2ag.data import marked_prompt, training_examples
from rulerag.generation.r2ag.encoding import FeatureEncoder, open_feature_encoder
from rulerag.generation.r2ag.settings import R2AGSettings, R2AGVariant
from rulerag.retrieval.settings import IndexSettings

__all__ = ["FitResult", "fit_variant", "generator_factory", "open_generator", "variant_dir"]

#: where `train_r2ag` puts the trained variants, under data/<dataset>/generation/
MODELS_DIR = "r2ag_models"


def variant_dir(base: Path, variant: str) -> Path:
    """data/<dataset>/generation/r2ag_models/<variant>/ (`base` = data/<dataset>)."""
    return Path(base) / "generation" / MODELS_DIR / variant


@dataclass
class FitResult:
    model: Any  # R2AGModel
    meta: dict[str, Any]
    stats: dict[str, Any]


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
    from rulerag.generation.r2ag.former import FormerConfig, R2Former
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
    shape = settings.former
    former = R2Former(FormerConfig(hidden, shape.d_model, shape.layers, shape.heads, shape.dropout))
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
    rule_texts: Mapping[str, str],
    *,
    encoder: str,
    rule_query: str,
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
        rule_texts,
        encoder=encoder,
        rule_query=rule_query,
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
    rule_query: str,
    *,
    encoder: str,
    model_cache: Path | None = None,
) -> Callable[..., Any]:
    """`run_row`'s generator factory for the R²AG row `variant` (its trained folder under the
    dataset's generation/r2ag_models/, features from `encoder`'s index for a sparse run)."""
    from rulerag.generation.config import GridConfig, retrieval_name
    from rulerag.retrieval.data import read_rule_texts

    def factory(
        base: Path, grid: GridConfig, settings: GenerationSettings, retrieval: str | None
    ) -> Any:
        if retrieval is None:
            raise ValueError(f"r2ag.variants.{variant}: R²AG needs a retrieval run")
        return open_generator(
            variant_dir(base, variant),
            base,
            retrieval_name(retrieval, settings.retriever),
            settings,
            index_settings,
            read_rule_texts(base / "rules" / "bank.parquet"),
            encoder=encoder,
            rule_query=rule_query,
            model_cache=model_cache,
        )

    return factory
