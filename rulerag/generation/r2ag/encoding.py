"""The retriever's representations R²AG reads: a query encoder and the corpus embeddings.

R²AG's features come from the dense retriever that produced the list (paper §3.2): the query
side is the retrieval configuration's own encoder (the fine-tuned one for SSFT / RGFT runs),
the document side the corpus embeddings the `index` stage computed once. A BM25 run has no
representations of its own, so its features come from the dense index named by `r2ag.encoder`
(the paper leaves sparse retrievers to future work; this is the nearest reading).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rulerag.generation.prompts import Sample
from rulerag.generation.r2ag.lists import list_features
from rulerag.layout import DataLayout
from rulerag.retrieval.configs import parse_config
from rulerag.retrieval.rule_guided import NO_RULE
from rulerag.retrieval.settings import IndexSettings

__all__ = ["DocVectors", "FeatureEncoder", "open_feature_encoder"]


class DocVectors(Mapping[str, np.ndarray]):
    """Document id -> its row of the (memory-mapped) corpus embeddings."""

    def __init__(self, doc_ids: Sequence[str], embeddings: np.ndarray) -> None:
        self.rows = {str(d): i for i, d in enumerate(doc_ids)}
        self.embeddings = embeddings

    def __getitem__(self, doc_id: str) -> np.ndarray:
        if doc_id not in self.rows:
            raise KeyError(f"document {doc_id!r} is not in the dense index")
        return np.asarray(self.embeddings[self.rows[doc_id]])

    def __iter__(self) -> Iterator[str]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


class FeatureEncoder:
    """Features of a sample's prompt documents (`lists.list_features`), masked by ablation."""

    def __init__(
        self,
        encode: Any,
        docs: Mapping[str, np.ndarray],
        search_rules: Mapping[str, str],
        *,
        mask: Sequence[float] = (1.0, 1.0, 1.0),
        name: str = "",
    ) -> None:
        self.encode, self.docs, self.search_rules = encode, docs, search_rules
        self.name = name
        self.mask = np.asarray(mask, dtype=np.float32)

    def features(self, sample: Sample) -> np.ndarray:
        """(documents in the prompt, 3) float32, in the prompt's order."""
        k = len(sample.documents)
        doc_ids = list(sample.extra.get("doc_ids", []))[:k]
        rules = list(sample.extra.get("doc_rules") or [NO_RULE] * len(doc_ids))[:k]
        if len(doc_ids) != k:
            raise ValueError(f"query {sample.qid}: {k} documents but {len(doc_ids)} ids")
        features = list_features(
            sample.query,
            doc_ids,
            rules,
            search_rules=self.search_rules,
            encode=self.encode,
            doc_vectors=self.docs,
        )
        return features * self.mask


def open_feature_encoder(
    root: Path,
    retrieval: str,
    index_settings: IndexSettings,
    search_rules: Mapping[str, str],
    *,
    encoder: str,
    mask: Sequence[float] = (1.0, 1.0, 1.0),
    model_cache: Path | None = None,
) -> FeatureEncoder:
    """The encoder behind retrieval configuration `retrieval` under data/<dataset>/ (`root`);
    `encoder` names the dense index a sparse configuration borrows; `search_rules` are the
    bank's rules in the form the retrieval searched with (`rule_query_texts`)."""
    from rulerag.retrieval.encoders import encode
    from rulerag.retrieval.runs import open_searcher

    config = parse_config(retrieval)
    if config.sparse:
        config = parse_config(f"{encoder}-standard")
        if config.sparse:
            raise ValueError(f"r2ag.encoder must name a dense index, not {encoder!r}")
    searcher = open_searcher(config, DataLayout(root), index_settings, model_cache)
    model, normalize = searcher.query_model, searcher.normalize
    batch = searcher.batch_size

    def encode_texts(texts: list[str]) -> np.ndarray:
        return encode(model, texts, batch, normalize, False)

    docs = DocVectors(searcher.index.doc_ids, searcher.index.embeddings)
    return FeatureEncoder(encode_texts, docs, search_rules, mask=mask, name=config.name)
