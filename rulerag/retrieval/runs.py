"""One retrieval configuration's runs (the `retrieve` stage): open what it searches with, search
a query set, measure Recall@k.

Rule-guided modes search each (query, rule) pair as `q ∘ r` and unite the lists
(`rule_guided.retrieve`); the fine-tuned modes load the query encoder `train_retriever` wrote
and search the same corpus index (the document encoder is frozen). `retrieve_runs` is the
stage's one call: every query set of `retrieve.splits` searched, its run written a block at a
time into the stage's folder (`parquet_stream.ParquetStream`) and scored as it comes
(`metrics.FirstHits`), so a run is never held whole; the figures go beside them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rulerag.benchmark.sampling import sample_queries
from rulerag.errors import InputError
from rulerag.io import atomic_open, staged_outputs, write_json
from rulerag.layout import RUN_FG_FILENAME, RUN_FILENAME, DataLayout
from rulerag.parquet_stream import ParquetStream
from rulerag.retrieval.configs import RetrievalConfig
from rulerag.retrieval.data import Query, read_corpus, read_queries, read_rule_texts
from rulerag.retrieval.metrics import FirstHits, recall_curve, recall_figures
from rulerag.retrieval.rule_guided import Searcher, expand, rule_query_texts, search_blocks
from rulerag.retrieval.settings import IndexSettings, RetrieveSettings

__all__ = [
    "RetrievalRuns",
    "SplitRun",
    "open_searcher",
    "retrieve_runs",
    "run_file",
    "run_split",
]


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
    """One query set searched: its Recall@k figures and timings (the run itself went to the
    `sink` of `run_split` a block at a time)."""

    split: str
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
    sink: Callable[[pd.DataFrame], None],
) -> SplitRun:
    """Search one query set (`test`, `f_g`, or the robustness queries) with `settings.top_k`
    documents per search; each block of the run goes to `sink` (a `ParquetStream`'s `write`,
    or a list's `append`) and is scored as it comes, so the run is never held whole.

    F_G is a seeded sample of `settings.f_g_queries` queries (the generator trains on a few
    hundred in the CPU profile and draws only from queries the run holds)."""
    if split == "f_g" and settings.f_g_queries is not None:
        queries = list(sample_queries(queries, settings.f_g_queries, settings.seed))
    plan = expand(queries, rules, use_rules)
    hits = FirstHits(contents, {q.qid: q.answers for q in queries})
    blocks = search_blocks(plan, searcher, settings.top_k, show_progress=True)
    seconds = 0.0  # searching only, as before the run was scored as it came
    while True:
        started = time.perf_counter()
        block = next(blocks, None)
        seconds += time.perf_counter() - started
        if block is None:
            break
        sink(block)
        hits.add(block)
    figures = recall_figures(hits.ranks(), settings.search_ks)
    timing = {
        "queries": len(queries),
        "searches": len(plan.texts),
        "unknown_rules": plan.unknown_rules,
        "fallbacks": plan.fallbacks,
        "seconds": round(seconds, 2),
        "queries_per_second": round(len(queries) / seconds, 1) if seconds else 0.0,
    }
    return SplitRun(split, figures, timing)


@dataclass
class RetrievalRuns:
    """What `retrieve` wrote for one configuration (a run per query set) and what it writes
    beside them: metrics.json and the test queries' Recall@k curve."""

    config: RetrievalConfig
    runs: dict[str, SplitRun]  # by query set, in `retrieve.splits` order
    metrics: dict[str, Any]  # metrics.json: the test figures at the top, other sets by name
    curve: pd.DataFrame | None  # recall.csv (Recall@k over k), when the test set was searched
    skipped: list[str]  # query files that were not there

    @property
    def files(self) -> list[str]:
        """The run files written, test first (run.parquet, run_fg.parquet)."""
        return [run_file(split) for split in self.runs]

    @property
    def artifacts(self) -> list[str]:
        """What the stage logs to MLflow: metrics.json, and recall.csv when there is one."""
        return ["metrics.json", *(["recall.csv"] if self.curve is not None else [])]

    def write(self, folder: Path) -> None:
        """recall.csv and metrics.json into `folder` (`retrieve_runs`' staging folder, beside
        the runs it wrote there)."""
        if self.curve is not None:
            with atomic_open(folder / "recall.csv") as handle:
                self.curve.to_csv(handle, index=False)
        write_json(folder / "metrics.json", self.metrics)


def run_file(split: str) -> str:
    """The file a query set's run goes to: run.parquet for the test queries, else
    run_fg.parquet."""
    return RUN_FILENAME if split == "test" else RUN_FG_FILENAME


def retrieve_runs(
    config: RetrievalConfig,
    layout: DataLayout,
    settings: RetrieveSettings,
    index_settings: IndexSettings,
    provenance: Mapping[str, Any],
    model_cache: Path | None = None,
) -> RetrievalRuns:
    """The `retrieve` stage: `config` run over each query set of `settings.splits` the
    benchmark has (test, F_G), `settings.top_k` documents per search, with Recall@k, written
    into the configuration's `DataLayout.output`: each run as it is searched (with `provenance`
    and its query set), then the figures, all published together when every one is written
    (`io.staged_outputs`, its staging folder named by `provenance`'s `stage`).

    Rule-guided configurations search with the bank's rules in the `retrieve.rule_query` form;
    a trained configuration's missing query encoder is an `InputError` naming its folder,
    raised before anything is written."""
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
    with staged_outputs(layout.output(config.name), str(provenance["stage"])) as staging:
        for split in settings.splits:
            source = layout.queries(split)
            if not source.is_file():
                skipped.append(source.name)
                continue
            queries = read_queries(source)
            meta = {**provenance, "split": split}
            with ParquetStream(staging / run_file(split), meta) as stream:
                result = run_split(
                    split, queries, searcher, settings, rules, config.use_rules, contents,
                    stream.write,
                )  # fmt: skip
            runs[split] = result
            if split == "test":
                metrics.update(result.rounded, **result.timing)
                curve = recall_curve(result.figures, config.name, settings.search_ks)
            else:
                metrics[split] = {**result.rounded, **result.timing}
        written = RetrievalRuns(config, runs, metrics, curve, skipped)
        written.write(staging)
    return written
