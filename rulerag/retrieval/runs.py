"""One retrieval configuration's runs (the `retrieve` stage): open what it searches with, search
a query set, measure Recall@k.

Rule-guided modes search each (query, rule) pair as `q ∘ r` and unite the lists
(`rule_guided.retrieve`); the fine-tuned modes load the query encoder `train_retriever` wrote
and search the same corpus index (the document encoder is frozen).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rulerag.benchmark.sampling import sample_queries
from rulerag.layout import DataLayout
from rulerag.retrieval.configs import RetrievalConfig, RetrieveSettings
from rulerag.retrieval.data import Query
from rulerag.retrieval.metrics import recall_at_k
from rulerag.retrieval.rule_guided import Searcher, retrieve
from rulerag.retrieval.settings import IndexSettings

__all__ = ["SplitRun", "open_searcher", "run_split"]


def open_searcher(
    config: RetrievalConfig,
    paths: DataLayout,
    settings: IndexSettings,
    model_cache: Path | None = None,
) -> Searcher:
    """What `config` searches with: the BM25 back end of `index.sparse.backend`, or its query
    encoder (the base one, or the one `train_retriever` fine-tuned) over the FAISS index."""
    if config.sparse:
        from rulerag.retrieval.sparse import load_sparse

        sparse = settings.sparse
        return load_sparse(sparse.backend, paths.index(config.index), sparse.threads)
    from rulerag.retrieval.dense import DenseIndex, DenseRetriever
    from rulerag.retrieval.encoders import load_encoder

    spec = settings.encoder(config.index)
    index = DenseIndex.load(paths.index(config.index), settings.faiss)
    if config.trained:
        query_name = str(paths.model(config.model_name or ""))
        if not Path(query_name).is_dir():
            raise FileNotFoundError(f"retrieve: no trained query encoder at {query_name}")
    else:
        query_name = spec.query_name
    pooling = None if config.trained else spec.pooling  # a trained folder has its own
    model = load_encoder(query_name, settings.device, spec.max_length, model_cache, pooling)
    normalize = bool(index.meta.get("normalize", spec.normalize))
    return DenseRetriever(model, index, normalize, spec.batch_size)


@dataclass
class SplitRun:
    """One query set searched: the run frame, its Recall@k figures and timings."""

    split: str
    frame: pd.DataFrame
    figures: dict[str, float]  # recall_at_k / loose_recall_at_k (fractions) and `queries`
    timing: dict[str, Any]

    @property
    def rounded(self) -> dict[str, float]:
        """The figures for metrics.json (4 decimals, without the query count)."""
        return {key: round(v, 4) for key, v in self.figures.items() if key != "queries"}


def run_split(
    split: str,
    queries: Sequence[Query],
    searcher: Searcher,
    settings: RetrieveSettings,
    rules: Mapping[str, str],
    use_rules: bool,
    contents: Mapping[str, str],
) -> SplitRun:
    """Search one query set (`test`, `f_g`, or the robustness queries) with `settings.top_k`
    documents per search.

    F_G is a seeded sample of `settings.f_g_queries` queries (the generator trains on a few
    hundred in the CPU profile and draws only from queries the run holds)."""
    if split == "f_g" and settings.f_g_queries is not None:
        queries = list(sample_queries(queries, settings.f_g_queries, settings.seed))
    started = time.perf_counter()
    frame, plan = retrieve(queries, searcher, settings.top_k, rules, use_rules, show_progress=True)
    seconds = time.perf_counter() - started
    answers = {q.qid: q.answers for q in queries}
    figures = recall_at_k(frame, contents, answers, settings.search_ks)
    timing = {
        "queries": len(queries),
        "searches": len(plan.texts),
        "unknown_rules": plan.unknown_rules,
        "fallbacks": plan.fallbacks,
        "seconds": round(seconds, 2),
        "queries_per_second": round(len(queries) / seconds, 1) if seconds else 0.0,
    }
    return SplitRun(split, frame, figures, timing)
