"""The paper's claims as paired tests: discordant counts and exact McNemar p by hand."""

from __future__ import annotations

import pytest

from rulerag.evaluation.claims import Claim, claims_table, claims_to_markdown, paired_em


def em(right: set[int], n: int = 10) -> dict[str, float]:
    return {f"q{i}": float(i in right) for i in range(n)}


def test_paired_em_hand_checked():
    # a right on q0-q5, b on q4-q6: a alone on q0-q3 (4), b alone on q6 (1)
    result = paired_em(em({0, 1, 2, 3, 4, 5}), em({4, 5, 6}))
    assert (result.queries, result.a_only, result.b_only) == (10, 4, 1)
    assert result.em_a == 0.6 and result.em_b == 0.3
    # two-sided binomial on 5 discordant: 2 * P(X >= 4) = 2 * 6 / 32
    assert result.p_value == pytest.approx(0.375)


def test_paired_em_uses_common_queries_only():
    a = {"q1": 1.0, "q2": 0.0, "only-a": 1.0}
    b = {"q1": 0.0, "q2": 0.0, "only-b": 1.0}
    result = paired_em(a, b)
    assert (result.queries, result.a_only, result.b_only) == (2, 1, 0)
    assert paired_em({"q": 1.0}, {"q": 1.0}).p_value == 1.0  # no discordant query
    with pytest.raises(ValueError, match="share no query"):
        paired_em({"x": 1.0}, {"y": 1.0})


def test_claims_table_verdicts_and_markdown():
    rows = {
        "rulerag_ft": em(set(range(12)), 20),  # 12 of 20
        "standard_rag": em(set(), 20),  # 0: 12 discordant, p = 2 / 4096
        "rulerag_icl": em(set(range(10)), 20),  # 10: 2 discordant
        "other": em({0}, 20),
    }
    claims = [
        Claim("rulerag_ft", "standard_rag", "FT above RAG"),
        Claim("rulerag_ft", "rulerag_icl", "FT above ICL"),
        Claim("standard_rag", "rulerag_icl", "RAG above ICL"),
        Claim("rulerag_ft", "missing_row", "skipped"),
    ]
    table = claims_table(rows, claims)
    assert list(table["claim"]) == ["FT above RAG", "FT above ICL", "RAG above ICL"]
    assert list(table["verdict"]) == ["holds", "same direction", "no"]
    assert table["p"][0] == pytest.approx(2 / 4096)
    assert list(table["only better right"]) == [12, 2, 0]
    text = claims_to_markdown(table)
    assert (
        "| FT above ICL (`rulerag_ft` vs `rulerag_icl`) | 20 | 60.0 | 50.0 | 2 | 0 | 0.500 |"
        in text
    )
    assert (
        "| FT above RAG (`rulerag_ft` vs `standard_rag`) | 20 | 60.0 | 0.0 | 12 | 0 | <0.001 |"
        in text
    )
    assert claims_to_markdown(claims_table({}, claims)) == ""
