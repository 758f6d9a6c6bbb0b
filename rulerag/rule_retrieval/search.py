"""Top-k rules for a text: BM25 or a dense encoder over one form of a rule library.

The same back ends as document retrieval: BM25 is bm25s with Lucene's scoring and Pyserini's
English analysis (or CJK bigrams for Chinese, `rulerag.retrieval.sparse.make_analyzer`; `auto`,
the default, picks one by the library's script: `choose_analysis`), ties cut by library order
as Lucene cuts them by id; dense is a sentence-transformers encoder by
alias, path or Hugging Face id (the paper: bge-base-en; offline: MiniLM), cosine similarity.
A rule library is small (hundreds to a few thousand rules), so both are exact and in memory.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from rulerag.retrieval.sparse import (
    CJK_SHARE,
    cjk_share,
    exact_topk,
    make_analyzer,
    script_analyzer,
)

__all__ = [
    "Analysis",
    "BM25RuleIndex",
    "DenseRuleIndex",
    "RuleIndex",
    "build_rule_index",
    "choose_analysis",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Analysis:
    """The BM25 analysis that runs over a library: `name` (english | cjk), what was asked
    (`requested`: auto | english | cjk) and the share of CJK letters it was chosen by."""

    name: str
    requested: str
    cjk_share: float

    def describe(self) -> str:
        """One line for the log and the results, e.g. `cjk (auto: 97.2% CJK letters)`."""
        how = "auto" if self.requested == "auto" else "set"
        return f"{self.name} ({how}: {100 * self.cjk_share:.1f}% CJK letters in the rules)"


def choose_analysis(requested: str, texts: Sequence[str]) -> Analysis:
    """The analysis for a library of `texts`: `auto` picks it by the script
    (`rulerag.retrieval.sparse.script_analyzer`); an explicit `english` over a library in
    Chinese or Japanese is kept but warned about, since it searches whole sentences as single
    terms and finds next to nothing."""
    share = cjk_share(texts)
    name = script_analyzer(texts) if requested == "auto" else requested
    if name == "english" and share >= CJK_SHARE:
        logger.warning(
            "rule_retrieval.analyzer is english but %.1f%% of the rule texts' letters are CJK: "
            "BM25 sees whole sentences as single terms (use auto or cjk)",
            100 * share,
        )
    return Analysis(name, requested, share)


class RuleIndex(Protocol):
    """Ranked library rows for search texts."""

    name: str

    def search(self, texts: Sequence[str], k: int) -> list[list[int]]: ...


class BM25RuleIndex:
    """BM25 over rule texts (k1, b as `index.sparse`: Pyserini's 0.9, 0.4); `analyzer` is
    `english`, `cjk` or `auto` (chosen by the texts' script; `analysis` says which ran)."""

    def __init__(
        self, texts: Sequence[str], analyzer: str = "english", k1: float = 0.9, b: float = 0.4
    ) -> None:
        import bm25s

        self.name = "bm25"
        self.analysis = script_analyzer(texts) if analyzer == "auto" else analyzer
        self._analyze = make_analyzer(self.analysis)
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
    """`bm25` (`analyzer`: english, cjk or auto), or any encoder alias / path / Hugging Face
    id for a dense index."""
    if retriever == "bm25":
        return BM25RuleIndex(texts, analyzer=analyzer)
    return DenseRuleIndex(texts, model=retriever, cache_dir=cache_dir, device=device)
