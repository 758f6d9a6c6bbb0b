"""Recall@k: strict on the united list cut at k, loose on the union of per-rule top-k."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rulerag.retrieval.metrics import FirstHits, first_hit_ranks, recall_at_k, recall_curve
from tests.helpers import run_frame

CONTENTS = {
    "d1": "Time 2014 A meets Paris.",
    "d2": "A visits Berlin.",
    "d3": "B visits ROME.",
    "d4": "A visits Rome.",
    "d5": "nothing here",
}


def test_strict_and_loose_recall_differ_as_defined() -> None:
    run = run_frame(
        [
            # q1: rule A finds d1, d2; rule B finds d5 (best score of all), then d4 (Rome).
            ("q1", "A", 1, "d1", 0.9),
            ("q1", "A", 2, "d2", 0.8),
            ("q1", "B", 1, "d5", 0.95),
            ("q1", "B", 2, "d4", 0.5),
            # q2 (query alone): "rome" matches d3's "ROME" at rank 1.
            ("q2", "", 1, "d3", 2.0),
        ]
    )
    answers = {"q1": ["Rome"], "q2": ["rome"], "q3": ["Oslo"], "q4": []}
    ranks = first_hit_ranks(run, CONTENTS, answers)
    assert ranks.loc["q1"].tolist() == [4, 2]  # united list: d5, d1, d2, d4; rule B: rank 2
    assert ranks.loc["q2"].tolist() == [1, 1]
    figures = recall_at_k(run, CONTENTS, answers, ks=(1, 2, 4))
    # q3 was never retrieved and counts as a miss; q4 has no answer and is not counted.
    assert figures["queries"] == 3
    assert figures["recall_at_1"] == pytest.approx(1 / 3)
    assert figures["recall_at_2"] == pytest.approx(1 / 3)  # equal k: d4 is 4th in the union
    assert figures["loose_recall_at_2"] == pytest.approx(2 / 3)  # in rule B's top 2
    assert figures["recall_at_4"] == pytest.approx(2 / 3)


def test_case_insensitive_substring_match_and_query_only_runs() -> None:
    run = run_frame([("q", "", 1, "d5", 3.0), ("q", "", 2, "d3", 2.0)])
    figures = recall_at_k(run, CONTENTS, {"q": ["rome"]}, ks=(1, 2))
    assert figures["recall_at_1"] == 0.0 and figures["recall_at_2"] == 1.0
    assert figures["loose_recall_at_2"] == figures["recall_at_2"]  # no rules: equal


def test_recall_curve_table() -> None:
    figures = {"recall_at_1": 0.25, "loose_recall_at_1": 0.5, "recall_at_5": 1.0}
    figures["loose_recall_at_5"] = 1.0
    curve = recall_curve(figures, "bm25-rg", (1, 5))
    assert curve.to_dict("list") == {
        "k": [1, 5],
        "recall": [0.25, 1.0],
        "loose_recall": [0.5, 1.0],
        "config": ["bm25-rg", "bm25-rg"],
    }


def test_empty_run_recalls_nothing() -> None:
    figures = recall_at_k(run_frame([]), CONTENTS, {"q": ["x"]}, ks=(10,))
    assert figures == {"queries": 1.0, "recall_at_10": 0.0, "loose_recall_at_10": 0.0}


def test_answers_match_whole_words_only():
    """NELL-995 has one-letter answers ("k"): a substring test would find them everywhere."""
    from rulerag.retrieval.metrics import answer_pattern, contains_answer

    pattern = answer_pattern(["k", "China"])
    assert contains_answer("Police (China) visit", pattern)
    assert contains_answer("mike k.", pattern)
    assert not contains_answer("Chinatown", pattern)
    assert not contains_answer("kansas city", pattern)
    assert answer_pattern(["", "  "]) is None
    assert not contains_answer("anything", None)


def random_run(seed: int, queries: int = 40) -> tuple[pd.DataFrame, dict, dict]:
    """A rule-guided run in search order (each query's per-rule lists together) with ties in
    score, documents found by several rules, queries without rows or answers."""
    rng = np.random.default_rng(seed)
    docs = {f"d{i}": f"doc {i} mentions {'city' + str(i % 7)}" for i in range(60)}
    rows, answers = [], {}
    for q in range(queries):
        qid = f"q{q:03d}"
        answers[qid] = [f"city{c}" for c in rng.choice(7, rng.integers(0, 3), replace=False)]
        for rule in [f"r{r}" for r in range(rng.integers(0, 4))] or [""]:
            if rng.random() < 0.1:
                continue  # a search without hits
            found = rng.choice(60, rng.integers(1, 8), replace=False)
            scores = np.round(rng.random(len(found)), 1)  # ties
            for rank, (doc, score) in enumerate(
                sorted(zip(found, scores, strict=True), key=lambda p: -p[1]), start=1
            ):
                rows.append((qid, rule, rank, f"d{doc}", float(score)))
    return run_frame(rows), docs, answers


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("block", [1, 3, 17, 10_000])
def test_ranks_scored_a_block_at_a_time_are_those_of_the_whole_run(seed: int, block: int) -> None:
    run, docs, answers = random_run(seed)
    hits = FirstHits(docs, answers)
    for start in range(0, len(run), block):  # blocks cut inside a query's rows
        hits.add(run.iloc[start : start + block])
    hits.add(run.iloc[:0])
    pd.testing.assert_frame_equal(hits.ranks(), first_hit_ranks(run, docs, answers))
    assert np.isfinite(hits.ranks()["strict"]).any()  # the runs find answers


def test_a_query_whose_rows_come_apart_is_refused() -> None:
    run = run_frame([("q1", "", 1, "d1", 1.0), ("q2", "", 1, "d2", 1.0), ("q1", "A", 1, "d4", 1.0)])
    hits = FirstHits(CONTENTS, {"q1": ["Rome"], "q2": ["Berlin"]})
    hits.add(run.iloc[:2])
    with pytest.raises(ValueError, match="query 'q1' do not come together"):
        hits.add(run.iloc[2:])
        hits.ranks()
    assert first_hit_ranks(run, CONTENTS, {"q1": ["Rome"]}).loc["q1"].tolist() == [2, 1]
