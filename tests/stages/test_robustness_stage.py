"""Stage `robustness` on a synthetic dataset: the row's retrieval searched with the queries
that need no rule (RuleRAG's App. E) and the row's generator (an API model, faked) answering
them from that run."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from rulerag.layout import ROBUST as ROBUST_SET
from tests.helpers import write_bank
from tests.support.fake_openai import FakeOpenAI


@pytest.mark.slow  # an MLflow SQLite store is created
def test_the_robustness_stage_searches_its_queries_and_answers_them_as_the_row(
    monkeypatch, stage_project, mlflow_store
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
    client = MlflowClient(tracking_uri=mlflow_store)
    (tracked,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert tracked.info.status == "FINISHED"
    assert tracked.data.tags[TAG_STAGE_INSTANCE] == "robustness@toy-api_rag"
    assert tracked.data.metrics["em"] == pytest.approx(1 / 3)
