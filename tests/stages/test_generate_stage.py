"""Stage `generate` with the API generator against a fake chat server on 127.0.0.1: a
retrieval run's samples, the rule prompt, the paper's 3 fixed F_G examples in one message,
metrics and predictions written, MLflow's run FINISHED, and the key in none of them."""

from __future__ import annotations

import json
import logging

import pytest

from tests.helpers import stage_runs
from tests.support.fake_openai import FakeOpenAI

KEY = "sk-test-SECRET-0123456789"


@pytest.mark.slow  # an MLflow SQLite store is created
def test_generate_stage_with_the_api_generator(monkeypatch, caplog, stage_project, mlflow_store):
    """The `generate` glue end to end on synthetic files: samples from a retrieval run, the
    rule prompt, 3 fixed F_G examples, metrics and predictions written, the key nowhere (nor
    in the MLflow run)."""
    import pipeline_steps.generate as stage
    from rulerag.io import write_jsonl
    from tests.helpers import run_frame, write_bank

    caplog.set_level(logging.DEBUG)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)  # as before passive_openmp set it
    layout = stage_project.layout("toy")
    layout.benchmark.mkdir(parents=True)
    run_dir = layout.output("bm25-rg")
    run_dir.mkdir(parents=True)

    queries = [
        {
            "qid": f"t{i}",
            "query": f"what does X{i} visit ?",
            "answers": [ans],
            "rule_ids": ["R1"],
            "time": None,
        }
        for i, ans in enumerate(["Kabul", "Iran", "Kabul", "Paris"])
    ]
    f_g = [
        {"qid": f"g{i}", "query": f"what does Y{i} visit ?", "answers": [f"A{i}"], "rule_ids": []}
        for i in range(5)
    ]
    write_jsonl(layout.queries("test"), queries)
    write_jsonl(layout.queries("f_g"), f_g)
    write_jsonl(
        layout.corpus, [{"id": f"D{i}", "contents": f"X{i} visits Kabul ."} for i in range(4)]
    )
    write_bank(layout.rule_bank, {"R1": "[E1, visits, E2] leads to [E1, meets, E2]"})
    run = run_frame(
        [("t0", "R1", 1, "D0", 2.0), ("t0", "", 1, "D1", 1.0), ("t1", "R1", 1, "D1", 1.0),
         ("t2", "R1", 1, "D2", 1.0)]
    )  # fmt: skip
    run.to_parquet(layout.run("bm25-rg"))
    params = {
        "generation.model": "smollm2",
        "generation.retriever": "bm25",
        "generation.num_documents": 2,
        "generation.max_rules": 1,
        "generation.max_new_tokens": 8,
        "generation.batch_size": 2,
        "generation.recall_k": [10],
        "generation.test_queries": None,
        "generation.seed": 1,
        "generation.configs": ["gpt_icl"],
        "generation.grid.gpt_icl": {"retrieval": "rg", "generator": "api", "prompt": "rule"},
        "build_benchmark.rule_selection.top_n": 3,
    }
    monkeypatch.setenv("RULERAG_API_KEY", KEY)
    with FakeOpenAI([]) as server:
        api = {"base_url": server.url, "model": "fake", "shots": 3, "backoff": 0.0}
        params["generation.api"] = api
        # every completion says Kabul (and runs on into the next section, as small models do)
        server.script = [
            (200, {"choices": [{"message": {"content": "Answer: Kabul\nQuery: more"}}]})
        ] * 4
        code = stage_project.run(stage, "--dataset", "toy", "--config", "gpt_icl", params=params)
        assert code == 0
    out = layout.row("gpt_icl")
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["queries"] == 4 and metrics["em"] == 0.5 and metrics["token_f1"] == 0.5
    assert metrics["recall_at_10"] == 0.5  # t0, t2 have a Kabul document; t1's answer is Iran
    assert metrics["generator"] == "api:fake" and metrics["retrieval"] == "bm25-rg"
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["qid"] for r in rows] == ["t0", "t1", "t2", "t3"]
    assert rows[0]["prediction"] == "Kabul" and rows[0]["doc_ids"] == ["D0", "D1"]
    prompt = rows[0]["prompt"]
    assert (
        "# Rules: Use the following One rule to answer the given Query. Rule One: [E1, " in prompt
    )
    assert "Documents related to the Query. X0 visits Kabul . X1 visits Kabul .\n" in prompt
    assert "what does {subject} {relation} ?" in prompt  # the static instruction
    assert rows[3]["doc_ids"] == [] and rows[3]["recall_at_10"] == 0.0
    (sent,) = server.requests[0]["body"]["messages"]  # Table 10: one message, 3 cases
    assert sent["content"].startswith("Answer the Final Query by referring to the three cases")
    assert "Case 3:" in sent["content"] and "# Answer: A" in sent["content"]
    sent_all = [r["body"]["messages"][-1]["content"] for r in server.requests]
    assert any(text.endswith("Final Query:\n" + prompt) for text in sent_all)
    (tracked,) = stage_runs(mlflow_store, "generate")
    assert tracked.info.status == "FINISHED"
    assert tracked.data.metrics["em"] == 0.5 and tracked.data.tags["rulerag.config"] == "gpt_icl"
    assert KEY not in json.dumps(tracked.data.params)
    for path in out.iterdir():
        assert KEY not in path.read_text()
    assert KEY not in caplog.text
