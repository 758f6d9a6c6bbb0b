"""Building one corpus index (the `index` stage).

`bm25` builds the bm25s index (always) and the Lucene index through Pyserini (when
`index.sparse.backend` is pyserini or `parity_check` is on), then measures how often both
return the same top 10 on a sample of test queries with and without rules. Any other name is a
dense encoder: the corpus is encoded once with its document encoder (chunks cached, so a killed
run resumes) and indexed with FAISS. Each build returns the statistics the stage records;
`index_corpus` is the stage's one call (checks, the staged build, its timing).

The statistics file holds what the same corpus and settings always give; what differs between
two identical runs (wall-clock seconds, rates, documents taken from the encoding cache) is kept
apart (`BuiltIndex.run_figures`) for MLflow and the log, so a rerun rewrites the same bytes.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rulerag.errors import InputError
from rulerag.io import staged_dir, verify_output
from rulerag.layout import DataLayout
from rulerag.retrieval.configs import SPARSE_INDEXES
from rulerag.retrieval.data import read_corpus, read_queries, read_rule_texts
from rulerag.retrieval.settings import IndexSettings
from rulerag.settings import SettingsError

__all__ = [
    "BM25S_FLAT_UP_TO",
    "BuiltIndex",
    "build_dense",
    "build_index",
    "build_sparse",
    "index_corpus",
    "parity_texts",
]


logger = logging.getLogger(__name__)

#: bm25s scores every document for every query, so its search cost grows with the corpus;
#: Lucene's stays flat. benchmarks/bench_bm25_growth.py on the scale curve (docs/results.md):
#: 2.1 against 2.1 ms a query at 254,740 documents, 11.0 against 2.5 at 1,018,960.
BM25S_FLAT_UP_TO = 250_000


def parity_texts(paths: DataLayout, n: int, seed: int = 12) -> list[str]:
    """A sample of test queries, half alone and half as `q ∘ r` (what retrieval sends)."""
    from rulerag.retrieval.rule_guided import expand

    if not paths.queries("test").is_file() or n <= 0:
        return []
    queries = read_queries(paths.queries("test"))
    rules = read_rule_texts(paths.rule_bank) if paths.rule_bank.is_file() else {}
    rng = random.Random(seed)
    plain = [q.text for q in queries]
    guided = expand(queries, rules, True).texts
    return rng.sample(plain, min(len(plain), n // 2)) + rng.sample(
        guided, min(len(guided), n - n // 2)
    )


@dataclass(frozen=True)
class BuiltIndex:
    """What one index build reports."""

    #: the index's statistics file: sizes, settings, bm25s/Lucene parity; the same for the
    #: same corpus and settings
    stats: dict[str, Any]
    #: what differs between two identical runs (seconds, rates, cached documents): MLflow
    #: metrics and the log, never the statistics file
    run_figures: dict[str, Any] = field(default_factory=dict)

    def metrics(self) -> dict[str, Any]:
        """Everything MLflow records: the statistics and this run's figures."""
        return {**self.stats, **self.run_figures}


def build_sparse(paths: DataLayout, settings: IndexSettings, staging: Path) -> BuiltIndex:
    """The BM25 index(es) of the corpus into `staging`, and the parity check's figures."""
    from rulerag.retrieval.sparse import BM25sIndex, PyseriniIndex, parity

    sparse = settings.sparse
    corpus = read_corpus(paths.corpus)
    stats: dict[str, Any] = {"kind": "sparse", "docs": len(corpus), "backend": sparse.backend}
    if sparse.backend == "bm25s" and len(corpus) > BM25S_FLAT_UP_TO:
        logger.warning(
            "%s: %d documents: bm25s scores every one for every query (about 11 ms a query "
            "at a million); index.sparse.backend: pyserini keeps a search's cost flat in the "
            "corpus (about 2.5 ms)",
            paths.corpus,
            len(corpus),
        )
    timings: dict[str, Any] = {}
    started = time.perf_counter()
    bm25s_index = BM25sIndex.build(corpus, sparse, show_progress=True)
    bm25s_index.save(staging / "bm25s")
    timings["bm25s_build_seconds"] = round(time.perf_counter() - started, 2)
    if sparse.backend == "pyserini" or sparse.parity_check:
        started = time.perf_counter()
        lucene = PyseriniIndex.build(corpus, staging / "pyserini", sparse)
        timings["pyserini_build_seconds"] = round(time.perf_counter() - started, 2)
        texts = parity_texts(paths, sparse.parity_queries)
        if texts:
            stats["parity_top10"] = parity(bm25s_index, lucene, texts, k=10)
        lucene.close()
    return BuiltIndex(stats, timings)


def build_dense(
    name: str,
    paths: DataLayout,
    settings: IndexSettings,
    staging: Path,
    model_cache: Path | None = None,
) -> BuiltIndex:
    """Encode the corpus with encoder `name`'s document side (cached under
    `paths.cache(name)`) and write its FAISS index into `staging`."""
    from rulerag.retrieval.dense import build_dense_index, corpus_key
    from rulerag.retrieval.encoders import (
        DualEncoder,
        load_encoder,
        model_fingerprint,
        pick_device,
        resolve_model,
        set_torch_threads,
    )

    set_torch_threads(settings.threads)
    spec = settings.encoder(name)
    device = pick_device(settings.device)
    doc_model = resolve_model(spec.doc_name, model_cache)
    corpus = read_corpus(paths.corpus)
    # Only the document side is needed to index; the query side is loaded by `retrieve`.
    doc = load_encoder(spec.doc_name, device, spec.max_length, model_cache, spec.pooling)
    encoder = DualEncoder(doc, doc, spec.normalize)
    key = corpus_key(
        model_fingerprint(doc_model),
        corpus.contents,
        max_length=spec.max_length,
        normalize=spec.normalize,
        **({"pooling": spec.pooling} if spec.pooling else {}),  # keeps older keys valid
    )
    meta = {
        "encoder": name,
        "doc_model": spec.doc_name,
        "doc_model_path": doc_model,
        "query_model": spec.query_name,
        "normalize": spec.normalize,
        "max_length": spec.max_length,
        "cache_key": key,
    }
    index, timing = build_dense_index(
        encoder,
        corpus.ids,
        corpus.contents,
        settings.faiss,
        batch_size=spec.batch_size,
        cache_dir=paths.cache(name) / key,
        meta=meta,
    )
    index.save(staging)
    rate = timing.docs_per_second
    stats = {
        "kind": "dense",
        "docs": len(corpus),
        "dim": index.dim,
        "device": device,
        "faiss": settings.faiss.kind,
        "model": spec.doc_name,
    }
    run_figures = {
        "encoded_docs": timing.encoded_docs,
        "cached_docs": timing.cached_docs,
        "encode_seconds": round(timing.seconds, 2),
        "docs_per_second": None if rate is None else round(rate, 1),
    }
    return BuiltIndex(stats, run_figures)


def build_index(
    name: str,
    paths: DataLayout,
    settings: IndexSettings,
    staging: Path,
    model_cache: Path | None = None,
) -> BuiltIndex:
    """Index `name` (`bm25` or a dense encoder) into `staging`; its statistics."""
    if name in SPARSE_INDEXES:
        return build_sparse(paths, settings, staging)
    return build_dense(name, paths, settings, staging, model_cache)


def index_corpus(
    name: str,
    layout: DataLayout,
    settings: IndexSettings,
    model_cache: Path | None = None,
) -> BuiltIndex:
    """The `index` stage: index `name` of the dataset's corpus, published whole into
    `layout.index(name)` (a failed build leaves the old index), and its statistics for
    `layout.index_stats(name)` (sizes, bm25s/Lucene parity) beside this run's figures (build
    seconds, cached documents).

    The corpus is checked against its writer's manifest first: Lucene reads the file itself,
    so a cut-short corpus would otherwise be indexed without a word."""
    if name not in SPARSE_INDEXES:
        try:
            settings.encoder(name)
        except SettingsError as err:
            raise SettingsError(f"index@{name}: {err}") from None
    if not layout.corpus.is_file():
        raise InputError(
            f"index@{layout.dataset}: no corpus at {layout.corpus}; run build_benchmark"
        )
    verify_output(layout.corpus)
    target = layout.index(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    layout.cache(name).mkdir(parents=True, exist_ok=True)
    with staged_dir(target) as staging:
        started = time.perf_counter()
        built = build_index(name, layout, settings, staging, model_cache)
        built.stats.update(dataset=layout.dataset, index=name)
        built.run_figures["seconds"] = round(time.perf_counter() - started, 2)
    return built
