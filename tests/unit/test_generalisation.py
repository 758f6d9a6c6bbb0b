"""Rule generalisation (Figure 5): disjoint equal-size banks by head relation, queries that
follow their rules, the gain table and its heat map."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rulerag.experiments.generalisation import (
    assign_queries,
    gains_table,
    long_form,
    plot_gains,
    split_bank,
    summary,
    to_markdown,
)


def bank(sizes: dict[int, int]) -> pd.DataFrame:
    rows = []
    for relation, n in sizes.items():
        for k in range(n):
            rows.append(
                {"rule_id": f"r{relation}_{k}", "head_relation": relation, "score": 1 - k / 10}
            )
    return pd.DataFrame(rows)


def test_banks_are_disjoint_equal_and_keep_whole_relations() -> None:
    rules = bank({1: 5, 2: 4, 3: 4, 4: 3, 5: 3, 6: 2, 7: 2, 8: 1})
    parts = split_bank(rules, 4, seed=3)
    by_part = pd.Series(parts).groupby(pd.Series(parts)).size()
    assert sorted(by_part.index) == [1, 2, 3, 4]
    assert by_part.nunique() == 1  # equal sizes
    relation = rules.set_index("rule_id")["head_relation"]
    for _rel, group in relation[list(parts)].groupby(relation[list(parts)]):
        assert len({parts[r] for r in group.index}) == 1  # a relation lives in one bank
    assert set(relation[list(parts)]) == set(relation)  # no relation lost
    dropped = set(rules["rule_id"]) - set(parts)
    best = rules.sort_values("score", ascending=False).drop_duplicates("head_relation")
    assert not dropped & set(best["rule_id"])  # only lower-scoring rules are cut
    assert split_bank(rules, 4, seed=3) == parts  # seeded
    assert split_bank(rules, 4, seed=4) != parts


def test_too_few_relations_for_the_banks() -> None:
    with pytest.raises(ValueError, match="3 head relations; 4 disjoint banks"):
        split_bank(bank({1: 2, 2: 2, 3: 2}), 4, seed=1)


def test_queries_follow_their_first_rule_and_keep_its_bank_only() -> None:
    parts = {"a": 1, "b": 1, "c": 2}
    records = [
        {"qid": "1", "rule_ids": ["a", "b"]},
        {"qid": "2", "rule_ids": ["cut", "c", "a"]},
        {"qid": "3", "rule_ids": []},
        {"qid": "4", "rule_ids": ["cut"]},
    ]
    out = assign_queries(records, parts)
    assert out == {
        1: [{"qid": "1", "rule_ids": ["a", "b"]}],
        2: [{"qid": "2", "rule_ids": ["c"]}],
    }


def test_gains_summary_report_and_heat_map(tmp_path: Path) -> None:
    em = {(i, j): 0.1 * (i == j) + 0.05 for i in (1, 2) for j in (1, 2)}
    baseline = {1: 0.05, 2: 0.10}
    gains = gains_table(em, baseline)
    assert gains.loc["R1", "R1"] == 10.0 and gains.loc["R1", "R2"] == -5.0
    assert summary(gains) == {
        "mean_gain_same_bank": 7.5,
        "mean_gain_other_banks": -2.5,
        "other_bank_cells_positive": 0,
        "other_bank_cells": 2,
    }
    cells = long_form(em, baseline)
    assert list(cells.columns) == ["trained_on", "tested_on", "em", "standard_rag_em", "gain"]
    assert cells["gain"].tolist() == [10.0, -5.0, 0.0, 5.0]
    text = to_markdown("toy", gains, em, baseline, {1: [3, 2, 10, 8, 5], 2: [3, 1, 9, 7, 5]})
    assert "| R1 | +10.0 | -5.0 |" in text and "| Standard RAG | 5.0 | 10.0 |" in text
    plot_gains(gains, tmp_path / "gains.png", "toy")
    assert (tmp_path / "gains.png").stat().st_size > 1000
