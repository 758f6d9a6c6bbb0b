"""One retrieval configuration's runs (the `retrieve` stage): open what it searches with, search
a query set, measure Recall@k.

Rule-guided modes search each (query, rule) pair as `q ∘ r` and unite the lists
(`rule_guided.retrieve`); the fine-tuned modes load the query encoder `train_retriever` wrote
and search the same corpus index (the document encoder is frozen). `retrieve_runs` is the
stage's one call: every query set of `retrieve.splits` searched, with the figures and files
`RetrievalRuns.write` puts in data/<dataset>/retrieval/<config>/.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rulerag.benchmark.sampling import sample_queries
from rulerag.errors import InputError
from rulerag.io import atomic_open, write_json, write_parquet
from rulerag.layout import RUN_FG_FILENAME, RUN_FILENAME, DataLayout
from rulerag.retrieval.configs import RetrievalConfig
from rulerag.retrieval.data import Query, read_corpus, read_queries, read_rule_texts
from rulerag.retrieval.metrics import recall_at_k, recall_curve
from rulerag.retrieval.rule_guided import Searcher, retrieve, rule_query_texts
from rulerag.retrieval.settings import IndexSettings, RetrieveSettings

__all__ = ["RetrievalRuns", "SplitRun", "open_searcher", "retrieve_runs", "run_split"]


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


@dataclass
class RetrievalRuns:
    """What `retrieve` writes for one configuration: a run per query set, metrics.json and the
    test queries' Recall@k curve."""

    config: RetrievalConfig
    runs: dict[str, SplitRun]  # by query set, in `retrieve.splits` order
    metrics: dict[str, Any]  # metrics.json: the test figures at the top, other sets by name
    curve: pd.DataFrame | None  # recall.csv (Recall@k over k), when the test set was searched
    skipped: list[str]  # query files that were not there

    @property
    def files(self) -> list[str]:
        """The run files written, test first (run.parquet, run_fg.parquet)."""
        return [RUN_FILENAME if split == "test" else RUN_FG_FILENAME for split in self.runs]

    @property
    def artifacts(self) -> list[str]:
        """What the stage logs to MLflow: metrics.json, and recall.csv when there is one."""
        return ["metrics.json", *(["recall.csv"] if self.curve is not None else [])]

    def write(self, folder: Path, provenance: Mapping[str, Any]) -> None:
        """Each run as Parquet (with `provenance` and its query set), recall.csv and
        metrics.json into `folder` (a staging folder for the configuration's
        `DataLayout.output`: `io.staged_outputs`)."""
        for (split, run), name in zip(self.runs.items(), self.files, strict=True):
            write_parquet(folder / name, run.frame, {**provenance, "split": split})
        if self.curve is not None:
            with atomic_open(folder / "recall.csv") as handle:
                self.curve.to_csv(handle, index=False)
        write_json(folder / "metrics.json", self.metrics)


def retrieve_runs(
    config: RetrievalConfig,
    layout: DataLayout,
    settings: RetrieveSettings,
    index_settings: IndexSettings,
    model_cache: Path | None = None,
) -> RetrievalRuns:
    """The `retrieve` stage: `config` run over each query set of `settings.splits` the
    benchmark has (test, F_G), `settings.top_k` documents per search, with Recall@k.

    Rule-guided configurations search with the bank's rules in the `retrieve.rule_query` form;
    a trained configuration's missing query encoder is an `InputError` naming its folder."""
    corpus = read_corpus(layout.corpus)
    contents = dict(zip(corpus.ids, corpus.contents, strict=True))
    rules: dict[str, str] = {}
    if config.use_rules:
        rules = rule_query_texts(read_rule_texts(layout.rule_bank), settings.rule_query)
    try:
        searcher = open_searcher(config, layout, index_settings, model_cache)
    except FileNotFoundError as err:
        raise InputError(f"retrieve@{layout.dataset}: {err}") from None
    metrics: dict[str, Any] = {
        "dataset": layout.dataset,
        "config": config.name,
        "index": config.index,
        "mode": config.mode,
        "top_k": settings.top_k,
    }
    runs: dict[str, SplitRun] = {}
    skipped: list[str] = []
    curve = None
    for split in settings.splits:
        source = layout.queries(split)
        if not source.is_file():
            skipped.append(source.name)
            continue
        result = run_split(
            split, read_queries(source), searcher, settings, rules, config.use_rules, contents
        )
        runs[split] = result
        if split == "test":
            metrics.update(result.rounded, **result.timing)
            curve = recall_curve(result.figures, config.name, settings.search_ks)
        else:
            metrics[split] = {**result.rounded, **result.timing}
    return RetrievalRuns(config, runs, metrics, curve, skipped)
