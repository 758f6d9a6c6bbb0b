"""Retrieval configuration names: `<index>-<mode>`, e.g. `bm25-rg`, `minilm-rgft`.

The name alone says what to run, so DVC can iterate over datasets x index names x modes and
each stage instance finds its inputs by path:

    index   `bm25` (sparse; params `index.sparse`) or a dense encoder named in `index.dense`
    mode    standard  the query alone, base encoder
            rg        rule-guided (`q ∘ r` per rule, lists united), base encoder
            ssft      the query alone, query encoder fine-tuned without rules
            rgft      rule-guided, query encoder fine-tuned on `q ∘ r` (RGFT)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from rulerag.errors import InputError
from rulerag.retrieval.metrics import DEFAULT_KS
from rulerag.retrieval.rule_guided import RuleQueryForm
from rulerag.settings import Positive, Seed, UniqueNames, load_settings

MODES = ("standard", "rg", "ssft", "rgft")
#: Dense encoders known without any params (params.yaml `index.dense` adds or overrides them);
#: their other knobs are `encoders.EncoderSpec`'s defaults.
DEFAULT_ENCODERS: dict[str, dict] = {"minilm": {"model": "minilm"}, "mpnet": {"model": "mpnet"}}
TRAINED_MODES = ("ssft", "rgft")
SPARSE_INDEXES = ("bm25",)
#: the query sets `retrieve` searches
RetrieveSplit = Literal["test", "f_g"]
RETRIEVE_SPLITS: tuple[str, ...] = get_args(RetrieveSplit)


@dataclass(frozen=True)
class RetrievalConfig:
    """One retrieval configuration, parsed from its name."""

    name: str
    index: str
    mode: str

    @property
    def use_rules(self) -> bool:
        return self.mode in ("rg", "rgft")

    @property
    def trained(self) -> bool:
        return self.mode in TRAINED_MODES

    @property
    def sparse(self) -> bool:
        return self.index in SPARSE_INDEXES

    @property
    def model_name(self) -> str | None:
        """The trained query encoder's name (`minilm-rgft`), None for training-free modes."""
        return f"{self.index}-{self.mode}" if self.trained else None


@dataclass(frozen=True)
class RetrieveSettings:
    """params.yaml `retrieve` (the `retrieve`, `retrieve_finetuned` and `retrieval_report`
    stages; dvc.yaml expands `indexes` and `finetune` into stage instances)."""

    # each searched standard and rule-guided
    indexes: UniqueNames = field(
        default=("bm25", "minilm"),
        metadata={"help": "add mpnet for the second encoder (~40 min to encode on CPU)"},
    )
    finetune: UniqueNames = field(
        default=("minilm",), metadata={"help": "dense encoders that get RGFT / SSFT query encoders"}
    )
    top_k: Positive = field(default=50, metadata={"help": "per (query, rule) search"})
    ks: tuple[Positive, ...] = DEFAULT_KS  # Recall@k reported
    splits: tuple[RetrieveSplit, ...] = ("test", "f_g")
    #: F_G queries retrieved (a seeded sample, for the generator's training data); None = all
    f_g_queries: Positive | None = None
    seed: Seed = 12
    #: a rule's part of a rule-guided search text: rule = its whole text (the paper), body =
    #: its body relation names only (also what RGFT trains on)
    rule_query: RuleQueryForm = "rule"

    @property
    def search_ks(self) -> list[int]:
        """The ks a run of `top_k` documents per search can answer."""
        return [k for k in self.ks if k <= self.top_k]

    def config_names(self) -> list[str]:
        """The configurations the retrieve stages produce, in dvc.yaml's order."""
        names = [f"{i}-{m}" for i in self.indexes for m in ("standard", "rg")]
        return names + [f"{e}-{m}" for e in self.finetune for m in TRAINED_MODES]


def retrieve_settings(section: Mapping[str, Any] | None) -> RetrieveSettings:
    """params.yaml's `retrieve` section as typed settings, strictly."""
    return load_settings(RetrieveSettings, section, "retrieve")


def parse_config(name: str) -> RetrievalConfig:
    """`minilm-rgft` -> RetrievalConfig(index="minilm", mode="rgft"); a name that is no
    configuration is an `InputError` (a ValueError) saying the form."""
    index, sep, mode = name.rpartition("-")
    if not sep or not index or mode not in MODES:
        raise InputError(
            f"retrieval config {name!r}: expected <index>-<mode> with mode one of {MODES}"
        )
    config = RetrievalConfig(name, index, mode)
    if config.sparse and config.trained:
        raise InputError(f"retrieval config {name!r}: BM25 has no encoder to fine-tune")
    return config
