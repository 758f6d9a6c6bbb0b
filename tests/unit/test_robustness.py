"""Queries that need no rule (RuleRAG's App. E): each test query asked through its rule's body
relation, answers and rules kept, only where a corpus document states the answer. (Stage
`robustness` on them: tests/stages/test_robustness_stage.py.)"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from rulerag.benchmark.robustness import ROBUST_PREFIX, degenerate_queries
from rulerag.evaluation.claims import ROBUST_CLAIMS, claims_table
from rulerag.evaluation.report import PAPER_TABLE7, results_table

ENTITIES = {0: "Godard", 1: "Paris", 2: "France", 3: "Lyon", 4: "Nice"}
RELATIONS = {0: "has nationality", 1: "born in", 2: "lives in", 3: "capital of"}


def bank() -> pd.DataFrame:
    rows = [  # rule id, length, body [[relation, subject, object], ...]
        ("Rfwd", 1, [[1, 0, 1]]),  # [E1, born in, E2] leads to [E1, has nationality, E2]
        ("Rinv", 1, [[2, 1, 0]]),  # [E2, lives in, E1] ...: read backwards, no query form
        ("Rlong", 2, [[1, 0, 1], [3, 1, 2]]),
        ("Rlate", 1, [[2, 0, 1]]),  # [E1, lives in, E2]
    ]
    return pd.DataFrame([{"rule_id": r, "length": n, "body": json.dumps(b)} for r, n, b in rows])


def query(qid: str, rule_ids: list[str], answers: list[int], time: int | None = 10) -> dict:
    return {
        "qid": qid,
        "query": "Time 10 what does Godard has nationality ?",
        "answers": [ENTITIES[a] for a in answers],
        "answer_ids": answers,
        "head": 0,
        "head_name": "Godard",
        "relation": 0,
        "relation_name": "has nationality",
        "time": time,
        "time_text": None if time is None else str(time),
        "rule_ids": rule_ids,
    }


def corpus(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["head", "relation", "tail", "time"])


def test_a_query_is_asked_through_its_first_forward_one_atom_rule() -> None:
    docs = corpus([(0, 1, 2, 3), (0, 2, 4, 12)])  # born in France at 3; lives in Nice at 12
    test = [
        query("test-1", ["Rinv", "Rlong", "Rfwd"], [2, 3]),  # only Rfwd can degenerate it
        query("test-2", ["Rlate"], [4]),  # the document is after the query time
        query("test-3", ["Rinv", "Rlong"], [2]),  # no forward one-atom rule
    ]
    out, counts = degenerate_queries(test, bank(), docs, ENTITIES, RELATIONS)
    assert counts == {"queries": 3, "degenerated": 1, "no_forward_one_atom_rule": 1,
                      "no_document": 1}  # fmt: skip
    (robust,) = out
    assert robust["qid"] == ROBUST_PREFIX + "test-1" and robust["original_qid"] == "test-1"
    assert robust["query"] == "Time 10 what does Godard born in ?"
    assert (robust["relation"], robust["relation_name"]) == (1, "born in")
    assert robust["original_relation"] == 0
    assert robust["rule_ids"] == ["Rinv", "Rlong", "Rfwd"]  # the original query's rules
    assert (robust["answer_ids"], robust["answers"]) == ([2], ["France"])  # the stated one


def test_static_documents_have_no_time_to_respect() -> None:
    docs = corpus([(0, 2, 4, None)])
    out, _ = degenerate_queries([query("q", ["Rlate"], [4], time=None)], bank(), docs,
                                ENTITIES, RELATIONS)  # fmt: skip
    assert [q["query"] for q in out] == ["what does Godard lives in ?"]


def test_the_report_sets_robust_rows_beside_table_7_with_paired_tests() -> None:
    metrics = {"standard_rag": {"em": 0.1, "token_f1": 0.2, "recall_at_10": 0.3, "queries": 4}}
    table = results_table(metrics, "icews14", order=["standard_rag"], paper_table=PAPER_TABLE7)
    row = table.iloc[0]
    assert (row["EM"], row["paper EM"], row["paper R@10"]) == (10.0, 10.7, 4.6)
    per_query = {
        "robust/standard_rag": {"a": 0.0, "b": 0.0, "c": 1.0},
        "robust/rulerag_icl": {"a": 1.0, "b": 1.0, "c": 1.0},
    }
    claims = claims_table(per_query, ROBUST_CLAIMS)
    assert list(claims["better"]) == ["robust/rulerag_icl"]  # rulerag_ft has no run
    assert (claims.iloc[0]["only better right"], claims.iloc[0]["only worse right"]) == (2, 0)


def test_robustness_rows_must_be_generating_grid_rows() -> None:
    import yaml

    from rulerag.generation.settings import generation_settings
    from rulerag.settings import SettingsError

    with open("params.yaml", encoding="utf-8") as handle:
        section = yaml.safe_load(handle)["generation"]
    rows = ["standard_rag", "rulerag_icl", "rulerag_ft"]
    assert generation_settings({**section, "robustness_rows": rows}).robustness_rows == tuple(rows)
    for bad, reason in (("symbolic", "reads apply_rules"), ("nope", "not in grid")):
        with pytest.raises(SettingsError, match=reason):
            generation_settings({**section, "robustness_rows": [bad]})
