"""BM25 back ends on a tiny corpus with known answers: bm25s, Pyserini, and their parity."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from rulerag.layout import DataLayout
from rulerag.retrieval.data import Corpus, read_corpus
from rulerag.retrieval.settings import SparseSettings
from rulerag.retrieval.sparse import (
    BM25sIndex,
    LuceneLikeAnalyzer,
    exact_topk,
    load_sparse,
    parity,
)
from tests.support.synthetic_retrieval import tiny_benchmark

DOCS = Corpus(
    ids=("D1", "D2", "D3", "D4", "D5"),
    contents=(
        "Time 2014-06-23 Abdullah Abdullah Make a visit Afghanistan.",
        "Time 2014-06-24 Barack Obama Host a visit Angela Merkel.",
        "Time 2014-06-25 Angela Merkel Criticize or denounce Vladimir Putin.",
        "Time 2014-06-26 Vladimir Putin Express intent to meet Xi Jinping.",
        "The U.S. President's visits to Afghanistan.",
    ),
)
QUERIES = [
    "what does Abdullah Abdullah Make a visit ?",
    "Angela Merkel criticises Putin",
    "Putin intends to meet",
    "visits of the president",
]
EXPECTED_TOP1 = ["D1", "D3", "D4", "D5"]


def test_analyzer_follows_lucene_english() -> None:
    analyze = LuceneLikeAnalyzer()
    # StandardTokenizer splits hyphens, keeps inner dots; possessive 's goes; stop words go;
    # Porter stems (leads -> lead, visits -> visit, x-ray -> x, rai).
    assert analyze("Time 2014-06-23 Abdullah's visits to the U.S. x-ray, leads") == [
        "time", "2014", "06", "23", "abdullah", "visit", "u.", "x", "rai", "lead",
    ]  # fmt: skip
    assert analyze("[Entity1, Host_a visit, Entity2]") == ["entity1", "host_a", "visit", "entity2"]
    assert LuceneLikeAnalyzer(stemmer=None)("visits") == ["visits"]


def test_exact_topk_breaks_ties_by_tiebreak_then_cuts_at_k() -> None:
    scores = np.array([1.0, 3.0, 2.0, 2.0, 0.0, 2.0], dtype=np.float32)
    rows, values = exact_topk(scores, 3)
    assert rows.tolist() == [1, 2, 3] and values.tolist() == [3.0, 2.0, 2.0]
    tiebreak = np.array([0, 1, 5, 4, 3, 2])  # row 5 sorts before row 3, before row 2
    rows, _ = exact_topk(scores, 3, tiebreak)
    assert rows.tolist() == [1, 5, 3]
    rows, _ = exact_topk(scores, 10)  # zero scores are not hits
    assert rows.tolist() == [1, 2, 3, 5, 0]


def test_bm25s_finds_known_answers_and_round_trips(tmp_path: Path) -> None:
    index = BM25sIndex.build(DOCS)
    rows, scores = index.search(QUERIES, k=3)
    assert [DOCS.ids[r] for r in rows[:, 0]] == EXPECTED_TOP1
    assert np.all(np.diff(scores, axis=1) <= 0)
    # A query matching nothing returns no hits (not arbitrary zero-score documents).
    rows, scores = index.search(["zzz qqq"], k=3)
    assert rows.tolist() == [[-1, -1, -1]] and np.isinf(scores).all()
    index.save(tmp_path / "bm25s")
    again = load_sparse("bm25s", tmp_path)
    rows2, scores2 = again.search(QUERIES, k=3)
    np.testing.assert_array_equal(rows2, index.search(QUERIES, k=3)[0])
    np.testing.assert_allclose(scores2, index.search(QUERIES, k=3)[1])


def test_bm25s_k_larger_than_corpus_pads() -> None:
    rows, scores = BM25sIndex.build(DOCS).search(["Angela Merkel"], k=8)
    assert rows.shape == (1, 8)
    assert set(rows[0][rows[0] >= 0].tolist()) == {1, 2}


def test_bm25s_threads_give_the_same_results(tmp_path: Path) -> None:
    tiny_benchmark(tmp_path)
    corpus = read_corpus(DataLayout(tmp_path).corpus)
    texts = [f"what does {c.split()[2]} {c.split()[3]} Make a visit" for c in corpus.contents][:80]
    one = BM25sIndex.build(corpus, SparseSettings(threads=1)).search(texts, 10)
    two = BM25sIndex.build(corpus, SparseSettings(threads=2)).search(texts, 10)
    np.testing.assert_array_equal(one[0], two[0])


def test_an_index_takes_the_sections_settings_and_saves_its_bm25_knobs(tmp_path: Path) -> None:
    """No BM25 mirror of `index.sparse`: the index takes `SparseSettings` and records the
    four knobs it is built and searched with, as it always has (the metadata file is an
    output of the index stage)."""
    import json

    settings = SparseSettings(backend="pyserini", k1=1.2, parity_queries=7)
    BM25sIndex.build(DOCS, settings).save(tmp_path / "bm25s")
    meta = json.loads((tmp_path / "bm25s" / BM25sIndex.META).read_text(encoding="utf-8"))
    assert meta["config"] == {"k1": 1.2, "b": 0.4, "stemmer": "porter", "threads": 2}
    assert list(meta["config"]) == ["k1", "b", "stemmer", "threads"]
    loaded = BM25sIndex.load(tmp_path / "bm25s", threads=1)
    assert loaded.config == SparseSettings(k1=1.2, threads=1)


@pytest.mark.slow
def test_pyserini_matches_bm25s_top10(tmp_path: Path) -> None:
    """Lucene through Pyserini (JVM: ~15 s) returns the known answers and bm25s's top 10."""
    os.environ.setdefault("OPENAI_API_KEY", "unused")
    from rulerag.retrieval.sparse import PyseriniIndex

    tiny_benchmark(tmp_path)
    corpus = read_corpus(DataLayout(tmp_path).corpus)
    merged = Corpus(DOCS.ids + tuple(f"T{i}" for i in corpus.ids), DOCS.contents + corpus.contents)
    lucene = PyseriniIndex.build(merged, tmp_path / "pyserini")
    rows, _ = lucene.search(QUERIES, k=3)
    assert [merged.ids[r] for r in rows[:, 0]] == EXPECTED_TOP1
    bm25s_index = BM25sIndex.build(merged)
    texts = QUERIES + [
        f"Time 2014-04-01 what does {c.split()[3]} Make a visit ?" for c in corpus.contents
    ]
    figures = parity(bm25s_index, lucene, texts, k=10)
    assert figures["same_topk"] == 1.0
    assert figures["max_score_diff"] < 1e-3
    lucene.close()
    reopened = load_sparse("pyserini", tmp_path)
    np.testing.assert_array_equal(reopened.search(QUERIES, 3)[0], rows)
