"""Queries that need no rule (RuleRAG's App. E): each test query asked through its rule's body
relation, answers and rules kept, only where a corpus document states the answer."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from rulerag.benchmark.robustness import ROBUST_PREFIX, degenerate_queries
from rulerag.evaluation.claims import ROBUST_CLAIMS, claims_table
from rulerag.evaluation.report import PAPER_TABLE7, results_table
from rulerag.layout import ROBUST as ROBUST_SET

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
    import pytest
    import yaml

    from rulerag.generation.config import generation_settings
    from rulerag.settings import SettingsError

    with open("params.yaml", encoding="utf-8") as handle:
        section = yaml.safe_load(handle)["generation"]
    rows = ["standard_rag", "rulerag_icl", "rulerag_ft"]
    assert generation_settings({**section, "robustness_rows": rows}).robustness_rows == tuple(rows)
    for bad, reason in (("symbolic", "reads apply_rules"), ("nope", "not in grid")):
        with pytest.raises(SettingsError, match=reason):
            generation_settings({**section, "robustness_rows": [bad]})


@pytest.mark.slow  # an MLflow SQLite store is created
def test_the_robustness_stage_searches_its_queries_and_answers_them_as_the_row(
    tmp_path, monkeypatch, stage_project, clean_tracking_env
) -> None:
    """Stage `robustness` on a synthetic dataset: the row's BM25 configuration searched with the
    robustness queries (q ∘ r), kept as run.parquet; the row (an API generator,
    faked) answers them from that run; metrics say which query set it was."""
    from mlflow import MlflowClient

    import pipeline_steps.robustness as stage
    from rulerag.io import read_provenance, write_jsonl
    from rulerag.retrieval.data import read_corpus
    from rulerag.retrieval.sparse import BM25sIndex
    from rulerag.tracking import TAG_STAGE_INSTANCE
    from tests.helpers import write_bank
    from tests.unit.test_api_generator import FakeOpenAI

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("RULERAG_API_KEY", "sk-test")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)  # as before passive_openmp set it
    layout = stage_project.layout("toy")
    people = {"Godard": "France", "Varda": "Belgium", "Rohmer": "Tulle"}
    robust = [
        {"qid": f"robust-{i}", "query": f"what does {who} born in ?", "answers": [where],
         "rule_ids": ["R1"], "time": None}
        for i, (who, where) in enumerate(people.items())
    ]  # fmt: skip
    write_jsonl(layout.queries(ROBUST_SET), robust)
    write_jsonl(
        layout.corpus,
        [{"id": f"D{i}", "contents": f"{who} born in {where}."}
         for i, (who, where) in enumerate(people.items())],
    )  # fmt: skip
    rule = "[Entity1, born in, Entity2] leads to [Entity1, has nationality, Entity2]"
    write_bank(layout.rule_bank, {"R1": rule})
    BM25sIndex.build(read_corpus(layout.corpus)).save(layout.index("bm25") / "bm25s")
    params = {
        "generation.retriever": "bm25",
        "generation.test_queries": None,
        "generation.grid.api_rag": {"retrieval": "rg", "generator": "api", "prompt": "rule"},
        "generation.robustness_rows": ["api_rag"],
        "retrieve.top_k": 2,
        "index.sparse.threads": 1,
    }
    with FakeOpenAI([], reply=lambda last: "Answer: France") as server:
        params["generation.api"] = {"base_url": server.url, "model": "fake", "shots": 0}
        args = ("--dataset", "toy", "--config", "api_rag")
        assert stage_project.run(stage, *args, params=params) == 0
    out = layout.row("api_rag", ROBUST_SET)
    run = pd.read_parquet(out / "run.parquet")
    assert read_provenance(out / "run.parquet") == {"stage": "robustness", "config": "bm25-rg"}
    assert set(run["qid"]) == {q["qid"] for q in robust} and set(run["rule"]) == {"R1"}
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["query_set"], metrics["retrieval"], metrics["queries"]) == (
        ROBUST_SET, "bm25-rg", 3
    )  # fmt: skip
    assert metrics["em"] == pytest.approx(1 / 3) and metrics["recall_at_10"] == 1.0
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["doc_ids"][0] for r in rows] == ["D0", "D1", "D2"]  # each query's own document
    manifest = json.loads((out / "manifest.json").read_text())
    assert {"run.parquet", "predictions.jsonl", "metrics.json"} <= set(manifest["files"])
    client = MlflowClient(tracking_uri=uri)
    (tracked,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert tracked.info.status == "FINISHED"
    assert tracked.data.tags[TAG_STAGE_INSTANCE] == "robustness@toy-api_rag"
    assert tracked.data.metrics["em"] == pytest.approx(1 / 3)
