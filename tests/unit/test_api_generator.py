"""The OpenAI-compatible API generator against a fake server on 127.0.0.1: retries on 429 and
500 then succeeds, sends the paper's 3-shot prompt (or the legacy few-shot turns), fails fast on
401, and never logs the key."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rulerag.generation.api import ApiError, ApiGenerator, resolve_api_key
from rulerag.generation.prompts import PromptFormat

KEY = "sk-test-SECRET-0123456789"


class FakeOpenAI:
    """A chat-completions endpoint answering from a script of (status, body) steps; once the
    script is used up every request succeeds with `reply(last user message)` (default: the
    message echoed after "A:")."""

    def __init__(
        self, script: list[tuple[int, dict | None]], reply: Callable[[str], str] | None = None
    ) -> None:
        self.script = list(script)
        self.reply = reply or (lambda last: f"A:{last}")
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                outer.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                status, payload = outer.script.pop(0) if outer.script else (200, None)
                if status == 200 and payload is None:
                    last = body["messages"][-1]["content"]
                    payload = {
                        "choices": [
                            {"message": {"role": "assistant", "content": outer.reply(last)}}
                        ]
                    }
                data = json.dumps(payload or {"error": {"message": "busy"}}).encode()
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def make(server: FakeOpenAI, **kwargs) -> tuple[ApiGenerator, list[float]]:
    sleeps: list[float] = []
    kwargs.setdefault("prompt_format", PromptFormat("legacy"))  # one turn per example
    generator = ApiGenerator(
        base_url=server.url,
        model="fake-model",
        api_key=KEY,
        examples=[("ex1", "a1"), ("ex2", "a2"), ("ex3", "a3")],
        backoff=0.5,
        sleep=sleeps.append,
        timeout=5,
        **kwargs,
    )
    return generator, sleeps


def test_retries_429_and_500_then_succeeds(caplog):
    caplog.set_level(logging.DEBUG)
    with FakeOpenAI([(429, None), (500, None)]) as server:
        generator, sleeps = make(server)
        out = generator.generate(["Query: q?\nAnswer:"])
    assert out == ["A:Query: q?\nAnswer:"]
    assert len(server.requests) == 3
    assert len(sleeps) == 2 and sleeps[0] >= 0.5 and sleeps[1] >= 1.0  # exponential backoff
    first = server.requests[0]
    assert first["path"] == "/v1/chat/completions"
    assert first["auth"] == f"Bearer {KEY}"
    messages = first["body"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3 + ["user"]
    assert messages[1]["content"] == "a1"
    assert first["body"]["temperature"] == 0.0 and first["body"]["model"] == "fake-model"
    assert generator.retries == 2
    assert "429" in caplog.text and "500" in caplog.text  # retries are logged...
    assert KEY not in caplog.text  # ...never the key
    assert KEY not in repr(generator)


def test_paper_style_sends_table10_as_one_message():
    with FakeOpenAI([]) as server:
        generator, _ = make(server, prompt_format=PromptFormat("paper"))
        generator.generate(["# Query: q?\n# Answer:"])
    (message,) = server.requests[0]["body"]["messages"]
    assert message == {
        "role": "user",
        "content": "Answer the Final Query by referring to the three cases below.\n"
        "Case 1:\nex1 a1.\nCase 2:\nex2 a2.\nCase 3:\nex3 a3.\n"
        "Final Query:\n# Query: q?\n# Answer:",
    }


def test_gives_up_after_max_retries_without_leaking_the_key(caplog):
    caplog.set_level(logging.DEBUG)
    with FakeOpenAI([(503, None)] * 10) as server:
        generator, sleeps = make(server, max_retries=2)
        with pytest.raises(ApiError) as info:
            generator.complete("p")
    assert len(server.requests) == 3 and len(sleeps) == 2
    assert "503" in str(info.value) and KEY not in str(info.value)
    assert KEY not in caplog.text


def test_client_errors_fail_at_once_and_echoed_keys_are_redacted():
    error = {"error": {"message": f"Incorrect API key provided: {KEY}"}}
    with FakeOpenAI([(401, error)]) as server:
        generator, sleeps = make(server)
        with pytest.raises(ApiError) as info:
            generator.complete("p")
    assert len(server.requests) == 1 and sleeps == []
    assert "401" in str(info.value) and KEY not in str(info.value) and "***" in str(info.value)


def test_concurrent_requests_keep_order():
    with FakeOpenAI([]) as server:
        generator, _ = make(server, concurrency=3)
        prompts = [f"p{i}" for i in range(7)]
        assert generator.generate(prompts) == [f"A:{p}" for p in prompts]


def test_key_from_environment_or_airflow_connection(monkeypatch):
    env = {"OPENAI_API_KEY": "from-openai", "RULERAG_API_KEY": ""}
    assert resolve_api_key(environ=env) == ("from-openai", None)
    env["RULERAG_API_KEY"] = "from-rulerag"
    assert resolve_api_key(environ=env) == ("from-rulerag", None)

    class Conn:
        password = "from-airflow"
        host = "llm.example.org"
        schema = "https"
        port = 8443

    import rulerag.generation.api as api

    monkeypatch.setattr(api, "_airflow_connection", lambda conn_id: Conn())
    assert resolve_api_key((), "llm_api", environ={}) == (
        "from-airflow",
        "https://llm.example.org:8443",
    )
    assert resolve_api_key((), None, environ={}) == (None, None)


def test_missing_key_or_url_is_an_error(monkeypatch):
    monkeypatch.delenv("RULERAG_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="no API key"):
        ApiGenerator(base_url="http://127.0.0.1:1/v1", model="m")
    with pytest.raises(ValueError, match="base_url"):
        ApiGenerator(base_url=None, model="m", api_key=KEY)


def test_key_from_a_real_airflow_connection_variable(monkeypatch):
    pytest.importorskip("airflow")
    monkeypatch.setenv(
        "AIRFLOW_CONN_RULERAG_TEST_LLM",
        json.dumps({"conn_type": "http", "host": "llm.example.org", "password": "pw-123"}),
    )
    assert resolve_api_key((), "rulerag_test_llm", environ={}) == (
        "pw-123",
        "https://llm.example.org",
    )


def _finished_runs(uri: str, stage: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments, filter_string=f"tags.`rulerag.stage` = '{stage}'")


@pytest.mark.slow  # an MLflow SQLite store is created
def test_generate_stage_with_the_api_generator(
    tmp_path, monkeypatch, caplog, stage_project, clean_tracking_env
):
    """The `generate` glue end to end on synthetic files: samples from a retrieval run, the
    rule prompt, 3 fixed F_G examples, metrics and predictions written, the key nowhere (nor
    in the MLflow run)."""
    import pipeline_steps.generate as stage
    from rulerag.io import write_jsonl
    from tests.helpers import run_frame, write_bank

    caplog.set_level(logging.DEBUG)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
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
    (tracked,) = _finished_runs(uri, "generate")
    assert tracked.info.status == "FINISHED"
    assert tracked.data.metrics["em"] == 0.5 and tracked.data.tags["rulerag.config"] == "gpt_icl"
    assert KEY not in json.dumps(tracked.data.params)
    for path in out.iterdir():
        assert KEY not in path.read_text()
    assert KEY not in caplog.text
