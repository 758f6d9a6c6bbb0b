"""Retrieval on the real benchmarks (built from the mirror with the default params):
bm25s and Pyserini agree on the top 10, rule-guided searches are what the queries select,
and the strict / loose Recall@k relate as defined."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rulerag.layout import DataLayout
from rulerag.io import write_jsonl
from rulerag.retrieval.data import read_corpus, read_queries, read_rule_texts
from rulerag.retrieval.metrics import recall_at_k
from rulerag.retrieval.rule_guided import expand, retrieve
from rulerag.retrieval.sparse import BM25sIndex, PyseriniIndex, parity

pytestmark = [pytest.mark.data, pytest.mark.slow]

DATASETS = ["icews14", "fb15k237", "nell995"]


def benchmark(real_benchmark, name: str) -> DataLayout:
    """The dataset's benchmark files as `build_benchmark` writes them, in a temporary folder."""
    built = real_benchmark(name)
    paths = DataLayout(built.folder / "data")
    if not paths.queries("test").is_file():
        bench = built.bench
        paths.benchmark.mkdir(parents=True, exist_ok=True)
        write_jsonl(paths.corpus, bench.corpus[["id", "contents"]].to_dict("records"))
        write_jsonl(paths.queries("test"), bench.test)
        paths.rule_bank.parent.mkdir(parents=True, exist_ok=True)
        built.bank.to_parquet(paths.rule_bank)
    return paths


@pytest.mark.parametrize("name", DATASETS)
def test_bm25_backends_agree_and_recall_is_consistent(
    name: str, tmp_path: Path, real_benchmark
) -> None:
    os.environ.setdefault("OPENAI_API_KEY", "unused")
    paths = benchmark(real_benchmark, name)
    corpus = read_corpus(paths.corpus)
    queries = read_queries(paths.queries("test"))
    rules = read_rule_texts(paths.rule_bank)
    plan = expand(queries, rules, True)
    assert plan.unknown_rules == 0, "test queries name rules the bank does not hold"
    bm25 = BM25sIndex.build(corpus)
    lucene = PyseriniIndex.build(corpus, tmp_path / "lucene")
    texts = plan.texts[::10][:150] + [q.text for q in queries[::10]][:150]
    figures = parity(bm25, lucene, texts, k=10)
    lucene.close()
    assert figures["same_topk_up_to_ties"] >= 0.99, figures
    contents = dict(zip(corpus.ids, corpus.contents, strict=True))
    answers = {q.qid: q.answers for q in queries}
    for use_rules in (False, True):
        run, _ = retrieve(queries, bm25, 50, rules, use_rules)
        m = recall_at_k(run, contents, answers)
        assert m["queries"] == len([q for q in queries if q.answers])
        for k in (1, 2, 5, 10, 20, 50):
            assert m[f"loose_recall_at_{k}"] >= m[f"recall_at_{k}"] - 1e-9
        assert 0.05 < m["recall_at_10"] < 0.99
