"""Top-k rules for a text: BM25 or a dense encoder over one form of a rule library.

The same back ends as document retrieval: BM25 is bm25s with Lucene's scoring and Pyserini's
English analysis (or CJK bigrams for Chinese, `rulerag.retrieval.sparse.make_analyzer`), ties
cut by library order as Lucene cuts them by id; dense is a sentence-transformers encoder by
alias, path or Hugging Face id (the paper: bge-base-en; offline: MiniLM), cosine similarity.
A rule library is small (hundreds to a few thousand rules), so both are exact and in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from rulerag.retrieval.sparse import exact_topk, make_analyzer

__all__ = ["BM25RuleIndex", "DenseRuleIndex", "RuleIndex", "build_rule_index"]


class RuleIndex(Protocol):
    """Ranked library rows for search texts."""

    name: str

    def search(self, texts: Sequence[str], k: int) -> list[list[int]]: ...


class BM25RuleIndex:
    """BM25 over rule texts (k1, b as `index.sparse`: Pyserini's 0.9, 0.4)."""

    def __init__(
        self, texts: Sequence[str], analyzer: str = "english", k1: float = 0.9, b: float = 0.4
    ) -> None:
        import bm25s

        self.name = "bm25"
        self._analyze = make_analyzer(analyzer)
        self._retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        self._retriever.index([self.analyzer(t) for t in texts], show_progress=False)
        self._size = len(texts)

    def analyzer(self, text: str) -> list[str]:
        """The analyzer's terms without empty ones: Snowball's Porter stems a lone `s` (as in
        CLUTRR's `[Clarence]'s`) to "", which bm25s keeps as its reserved empty-document term
        and then refuses in a query whose library never had it."""
        return [term for term in self._analyze(text) if term]

    def search(self, texts: Sequence[str], k: int) -> list[list[int]]:
        out = []
        for text in texts:
            tokens = self.analyzer(text)
            if not tokens:
                out.append([])
                continue
            rows, _ = exact_topk(self._retriever.get_scores(tokens), min(k, self._size))
            out.append([int(r) for r in rows])
        return out


class DenseRuleIndex:
    """Cosine similarity of a sentence-transformers encoder's embeddings."""

    def __init__(
        self,
        texts: Sequence[str],
        model: str = "minilm",
        cache_dir: Path | None = None,
        device: str | None = "auto",
        batch_size: int = 64,
    ) -> None:
        from rulerag.retrieval.encoders import encode, load_encoder

        self.name = model
        self._encoder = load_encoder(model, device=device, cache_dir=cache_dir)
        self._encode = encode
        self._batch_size = batch_size
        self._rules = encode(self._encoder, list(texts), batch_size=batch_size)

    def search(self, texts: Sequence[str], k: int) -> list[list[int]]:
        if not len(texts):
            return []
        queries = self._encode(self._encoder, list(texts), batch_size=self._batch_size)
        sims = queries @ self._rules.T
        k = min(k, sims.shape[1])
        out = []
        for row in sims:
            top = np.argpartition(-row, k - 1)[:k] if k < len(row) else np.arange(len(row))
            order = top[np.lexsort((top, -row[top]))]  # by score, then library order
            out.append([int(i) for i in order])
        return out


def build_rule_index(
    retriever: str,
    texts: Sequence[str],
    *,
    analyzer: str = "english",
    cache_dir: Path | None = None,
    device: str | None = "auto",
) -> RuleIndex:
    """`bm25`, or any encoder alias / path / Hugging Face id for a dense index."""
    if retriever == "bm25":
        return BM25RuleIndex(texts, analyzer=analyzer)
    return DenseRuleIndex(texts, model=retriever, cache_dir=cache_dir, device=device)
