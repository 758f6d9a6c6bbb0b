"""The benchmark builds on the real ICEWS14, FB15k-237 and NELL-995 with the project's default
params (ingest -> mine_rules -> build_benchmark, in a temporary folder) and keeps its promises."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rulerag.kg.registry import DATASETS

pytestmark = [pytest.mark.data, pytest.mark.slow]


@pytest.fixture(scope="module", params=["icews14", "fb15k237", "nell995"])
def real(request, real_benchmark):
    built = real_benchmark(request.param)
    return built.name, built.kg, built.bench


def test_sizes_and_no_leakage(real) -> None:
    name, kg, bench = real
    assert len(bench.test) == DATASETS[name].paper["test"]
    assert len(bench.f_r) > 500 and len(bench.f_g) > 500
    test_links = kg.facts[kg.facts["split"] == "test"][["head", "relation", "tail", "time"]]
    assert bench.corpus.merge(test_links, on=["head", "relation", "tail", "time"]).empty
    key = lambda q: (q["head"], q["relation"], q["time"])  # noqa: E731
    q, fr, fg = ({key(x) for x in s} for s in (bench.test, bench.f_r, bench.f_g))
    assert not q & fr and not q & fg and not fr & fg
    if name == "icews14":
        assert len(bench.corpus) == 63_685  # every train link


def test_oracles_and_answers(real) -> None:
    _, kg, bench = real
    corpus = bench.corpus.set_index("id")
    names = set(kg.entities["name"])
    for item in bench.f_r:
        docs = corpus.loc[item["oracle_doc_ids"]]
        if kg.temporal:
            assert (docs["time"] < item["time"]).all()
    for query in bench.test + bench.f_g:
        assert set(query["answers"]) <= names
    strata = pd.Series([q["stratum"] for q in bench.test]).value_counts()
    assert strata.max() - strata.min() <= 1  # even weights: equal strata
