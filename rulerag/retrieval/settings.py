"""params.yaml's `index` section as typed settings (read strictly), shared by the stages that
build an index (`index`), train on one (`train_retriever`) and search one (`retrieve`).

The parts live next to the code they configure: `EncoderSpec` (encoders.py), `FaissConfig`
(dense.py); `SparseSettings` is here, and the BM25 indexes (`sparse`) take it as it is, so
this module does not import the BM25 code and a stage that only reads `index.dense` does not
depend on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from rulerag.retrieval.configs import DEFAULT_ENCODERS
from rulerag.retrieval.dense import FaissConfig
from rulerag.retrieval.encoders import EncoderSpec
from rulerag.settings import Count, Fraction, Name, NonNegative, SettingsError, load_settings

__all__ = ["SPARSE_BACKENDS", "IndexSettings", "SparseSettings", "index_settings"]

SparseBackend = Literal["bm25s", "pyserini"]
SPARSE_BACKENDS: tuple[str, ...] = get_args(SparseBackend)


@dataclass(frozen=True)
class SparseSettings:
    """`index.sparse`: the BM25 back end, its knobs (Pyserini's defaults) and the parity check
    between bm25s and Lucene."""

    backend: SparseBackend = field(
        default="bm25s",
        metadata={"help": "bm25s (fast default) | pyserini (Lucene, the paper's tool)"},
    )
    k1: NonNegative = field(
        default=0.9, metadata={"help": "Pyserini's BM25 defaults, used by both back ends"}
    )
    b: Fraction = 0.4
    stemmer: str | None = "porter"
    threads: Count = 2
    parity_check: bool = field(
        default=True, metadata={"help": "also build the Lucene index and compare top-10s"}
    )
    parity_queries: Count = field(
        default=200,
        metadata={"help": "test queries (half alone, half as q ∘ r) for the check"},
    )


@dataclass(frozen=True)
class IndexSettings:
    """params.yaml `index`."""

    threads: Count = field(
        default=0, metadata={"help": "torch threads; 0 = torch's default (all cores)"}
    )
    device: Literal["auto", "cpu", "cuda"] = field(
        default="auto", metadata={"help": "auto (cuda when there, else cpu) | cpu | cuda"}
    )
    sparse: SparseSettings = field(default_factory=SparseSettings)
    #: dense encoders by name, over `configs.DEFAULT_ENCODERS` (minilm, mpnet)
    dense: dict[Name, EncoderSpec] = field(default_factory=dict)
    faiss: FaissConfig = field(default_factory=FaissConfig)

    def encoder(self, name: str) -> EncoderSpec:
        """The dense encoder called `name`: from `dense`, else a default one."""
        if name in self.dense:
            return self.dense[name]
        if name in DEFAULT_ENCODERS:
            return load_settings(EncoderSpec, DEFAULT_ENCODERS[name], f"index.dense.{name}")
        known = list({**DEFAULT_ENCODERS, **self.dense})
        raise SettingsError(f"no encoder named {name!r} in index.dense ({known})")


def index_settings(section: Mapping[str, Any] | None) -> IndexSettings:
    """params.yaml's `index` section as typed settings, strictly."""
    return load_settings(IndexSettings, section, "index")
