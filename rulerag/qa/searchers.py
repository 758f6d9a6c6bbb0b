"""A searcher over a QA set's corpus, built in memory (QA corpora are small next to a KG's, and
the index is not shared with another stage)."""

from __future__ import annotations

from pathlib import Path

from rulerag.retrieval.data import Corpus
from rulerag.retrieval.rule_guided import Searcher
from rulerag.retrieval.settings import IndexSettings


def in_memory_searcher(
    corpus: Corpus, retriever: str, settings: IndexSettings, model_cache: Path | None = None
) -> Searcher:
    """BM25 (`bm25`, bm25s with the `index.sparse` knobs) or the dense encoder `retriever` of
    `index.dense` (its document side encodes the corpus, its query side searches)."""
    if retriever == "bm25":
        from rulerag.retrieval.sparse import BM25sIndex

        return BM25sIndex.build(corpus, settings.sparse)
    from rulerag.retrieval.dense import DenseRetriever, build_dense_index
    from rulerag.retrieval.encoders import DualEncoder

    spec = settings.encoder(retriever)
    encoder = DualEncoder.load(spec, settings.device, model_cache)
    index, _ = build_dense_index(
        encoder, corpus.ids, corpus.contents, settings.faiss, spec.batch_size, show_progress=True
    )
    return DenseRetriever(encoder.query, index, spec.normalize, spec.batch_size)
