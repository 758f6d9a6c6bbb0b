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

from dataclasses import dataclass

from rulerag.errors import InputError

MODES = ("standard", "rg", "ssft", "rgft")
#: Dense encoders known without any params (params.yaml `index.dense` adds or overrides them);
#: their other knobs are `settings.EncoderSpec`'s defaults.
DEFAULT_ENCODERS: dict[str, dict] = {"minilm": {"model": "minilm"}, "mpnet": {"model": "mpnet"}}
TRAINED_MODES = ("ssft", "rgft")
SPARSE_INDEXES = ("bm25",)


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
