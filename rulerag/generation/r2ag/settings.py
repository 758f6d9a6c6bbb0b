"""params.yaml `r2ag`: the R²AG generators (stages `train_r2ag`, `generate_r2ag`), typed.

A variant says which retrieval run feeds it and which prompt it reads, like a grid row; its
generator is `generation.model` with an R²-Former in front, the LLM frozen (or with LoRA on
it: `lora: true`, the paper's "R²AG + fine-tuning"). The documents per prompt, the prompt
style, the test queries and the decoding are `generation`'s, so an R²AG row differs from its
grid twin (`r2ag` vs `standard_rag`, `rulerag_r2ag` vs `rulerag_icl`) only by R²AG.

Defaults here are the paper's where it states them (App. A: lr 2e-4, dropout 0.1, 4 heads,
hidden size 256, Adam; LoRA of its RAFT combination r 16 / alpha 32 / dropout 0.1) and the
official code's otherwise (1 encoder layer, 2 epochs, batch 2 x 2 accumulation, constant
schedule after a 3 % warm-up, max grad norm 0.3). params.yaml's `cpu` profile shrinks them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, get_args

from rulerag.generation.r2ag.features import FEATURES
from rulerag.generation.settings import LoraSettings, RuleFilter
from rulerag.settings import (
    Count,
    Fraction,
    Name,
    NonNegative,
    Positive,
    PositiveReal,
    Seed,
    UniqueNames,
    apply_profile,
    load_settings,
)

__all__ = ["R2AGSettings", "R2AGTrain", "R2AGVariant", "r2ag_settings"]

Schedule = Literal["constant", "linear", "cosine"]
SCHEDULES: tuple[str, ...] = get_args(Schedule)
#: the features the R²-Former can see (`features.FEATURES`, in its order)
Feature = Literal["relevance", "precedent", "neighbour"]


@dataclass
class R2AGVariant:
    """One R²AG generator: its retrieval (a mode of `generation.retriever` or a full
    `<index>-<mode>` name), prompt kind and rule filter (as a grid row), LoRA or not."""

    retrieval: str = "standard"
    prompt: Literal["rule", "plain"] = "plain"  # a prompt kind with documents
    rules: RuleFilter = "all"
    lora: bool = False


def _default_variants() -> dict[str, R2AGVariant]:
    return {
        "r2ag": R2AGVariant("standard", "plain"),
        "rulerag_r2ag": R2AGVariant("rg", "rule"),
    }


@dataclass
class FormerSettings:
    """`r2ag.former`: the R²-Former's shape (`former.R2Former` takes it with the LLM's
    width)."""

    d_model: Positive = 256
    layers: Positive = 1
    heads: Positive = 4
    dropout: Fraction = 0.1


@dataclass
class R2AGTrain:
    """Training of the R²-Former (and LoRA when the variant has it) on F_G."""

    samples: Positive = 2048
    dev_samples: Count = 128
    epochs: PositiveReal = 2.0
    learning_rate: PositiveReal = 2e-4
    batch_size: Positive = 2
    gradient_accumulation: Positive = 2
    schedule: Schedule = "constant"
    warmup: NonNegative = 0.03  # a ratio of all steps when < 1, else steps
    max_grad_norm: NonNegative = 0.3  # 0 = no clipping
    weight_decay: NonNegative = 0.0
    max_answer_tokens: Positive = 32
    eval_steps: Positive = 50  # dev loss every N optimiser steps; the best state is kept
    logging_steps: Positive = 5


def _paper_lora() -> LoraSettings:
    return LoraSettings(r=16, alpha=32, dropout=0.1, target_modules=["q_proj", "v_proj"])


@dataclass
class R2AGSettings:
    """params.yaml's `r2ag` section, with its chosen profile applied."""

    HELP: ClassVar[str] = (
        "Stages `train_r2ag` and `generate_r2ag`: R²AG (Ye et al. 2024, ../shared/papers/002_*) in "
        "the result grid. Each variant puts an R²-Former between its retrieval run and "
        "generation.model: per document, relevance / precedent / neighbour similarity from the "
        "dense retriever (App. A) -> Linear(3 -> d) + rank embedding -> Transformer encoder -> a "
        "QDM relevance head and a projection into the LLM's input embeddings at a `<R>` "
        "placeholder before the document. The LLM stays frozen (lora: true also trains LoRA on it, "
        "the paper's R²AG + fine-tuning). Documents per prompt, prompt style, test queries and "
        "decoding are generation's, so `r2ag` differs from standard_rag and `rulerag_r2ag` from "
        "rulerag_icl by R²AG alone (report: paired McNemar). -> "
        "data/<dataset>/generation/r2ag_models/<variant>/, train_r2ag_<variant>.json / _loss.csv,\n"
        "   data/<dataset>/generation/<variant>/{predictions.jsonl, metrics.json}"
    )

    profile: str = "cpu"
    rows: UniqueNames = field(
        default=(),
        metadata={
            "help": (
                "Variants dvc.yaml trains and answers with. None by default: two R²AG rows add ~10 "
                "min to make run on 2 cores (each R²-Former step backpropagates through the whole "
                "frozen LLM), which would pass its 45-minute budget. `make exp-r2ag` runs [r2ag, "
                "rulerag_r2ag] as a DVC experiment, `make exp-r2ag-ft` adds the LoRA variants, "
                "`make exp-r2ag-ablation` Table 3."
            )
        },
    )
    variants: dict[Name, R2AGVariant] = field(default_factory=_default_variants)
    #: features the R²-Former sees; a feature left out is zero everywhere (Table 3's "w/o")
    features: tuple[Feature, ...] = field(
        default=FEATURES,
        metadata={
            "help": (
                "Table 3's ablations: leave a feature out (it is zero everywhere) or set "
                "qdm_weight: 0 (make exp-r2ag-ablation runs all four as DVC experiments)"
            )
        },
    )
    # 0 = without the QDM loss (Table 3)
    qdm_weight: NonNegative = field(
        default=1.0, metadata={"help": "loss = LM + qdm_weight * QDM (BCE of the relevance head)"}
    )
    #: QDM document labels. Only `answer` (names a gold answer, as Recall@k): R²AG trains on
    #: F_G, whose queries have no oracle documents (F_R and F_G are disjoint query sets)
    labels: Literal["answer", "oracle"] = field(
        default="answer",
        metadata={"help": "QDM labels: the document names a gold answer (as Recall@k)"},
    )
    #: dense index whose encoder and corpus embeddings give the features; None =
    #: generation.retriever (a BM25 run still needs one: R²AG reads dense representations)
    encoder: str | None = field(
        default=None,
        metadata={
            "help": "dense index giving BM25 runs their features; null = generation.retriever"
        },
    )
    former: FormerSettings = field(
        default_factory=FormerSettings, metadata={"help": "the official code's"}
    )
    train: R2AGTrain = field(
        default_factory=R2AGTrain,
        metadata={
            "help": (
                "CPU profile: the paper's optimiser (Adam, constant lr after a 3 % warm-up, grad "
                "norm 0.3, batch 2 x 2 accumulation) on as many F_G samples as train_generator's, "
                "one epoch, and a larger learning rate for so few steps (the paper: 2e-4 over its "
                "whole training set)."
            )
        },
    )
    lora: LoraSettings = field(default_factory=_paper_lora, metadata={"help": "App. A (RAFT)"})
    seed: Seed = 12
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.labels != "answer":
            raise ValueError(
                "labels: only 'answer' on F_G (its queries have no oracle documents; F_R's "
                "oracle documents belong to other queries)"
            )
        missing = [row for row in self.rows if row not in self.variants]
        if missing:
            raise ValueError(f"rows: {missing} are not in variants ({sorted(self.variants)})")

    def variant(self, name: str) -> R2AGVariant:
        if name not in self.variants:
            raise ValueError(f"r2ag: unknown variant {name!r} ({sorted(self.variants)})")
        return self.variants[name]

    def feature_mask(self) -> list[float]:
        """1 for each feature the R²-Former sees, 0 for one ablated (`FEATURES` order)."""
        return [1.0 if f in self.features else 0.0 for f in FEATURES]


def r2ag_settings(section: Mapping[str, Any] | None) -> R2AGSettings:
    """params.yaml's `r2ag` section as typed settings, profile applied, strictly."""
    return load_settings(R2AGSettings, apply_profile(section or {}, "r2ag"), "r2ag")
