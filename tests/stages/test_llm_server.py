"""The pipeline's API paths against a real OpenAI-compatible server: llama.cpp (llama-cpp-python)
serving the offline SmolLM2-135M GGUF on 127.0.0.1 (`make serve-llm`), not a scripted one.

What a user with a vLLM, llama.cpp or hosted endpoint relies on: a grid row with
`generator: api` written like a local row, answers identical at temperature 0, a rerun that
sends no request (the answer cache), concurrent requests all answered, a server killed mid-run
giving retries then one clear error and a rerun that resumes from the cache, and the chat
template the server applies being the one the local generator applies (the paper's prompt).

One server per xdist worker (module fixture, `xdist_group`), one decoding thread (`make test`
runs two workers on two cores); tiny inputs and token budgets keep the module near a minute.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import StageProject, run_frame, write_bank
from tests.support.llm_server import MODEL, LlmServer, require_llm_server

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("llm_server")]

KEY = "sk-local-llm-server"  # the server asks none; the client sends one anyway
ANSWERS = ["Kabul", "Iran", "Kabul", "Paris"]


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory: pytest.TempPathFactory):
    require_llm_server()
    server = LlmServer(tmp_path_factory.mktemp("llm") / "server.log").start()
    yield server
    server.stop()


def write_row_inputs(layout, answers: list[str]) -> None:
    """A dataset folder with what a grid row reads: test and F_G queries, a corpus, a rule
    bank and the bm25-rg retrieval run (as tests/stages/test_generate_stage.py)."""
    from rulerag.io import write_jsonl

    layout.benchmark.mkdir(parents=True)
    layout.output("bm25-rg").mkdir(parents=True)
    queries = [
        {"qid": f"t{i}", "query": f"what does X{i} visit ?", "answers": [answer],
         "rule_ids": ["R1"], "time": None}
        for i, answer in enumerate(answers)
    ]  # fmt: skip
    f_g = [
        {"qid": f"g{i}", "query": f"what does Y{i} visit ?", "answers": [f"A{i}"], "rule_ids": []}
        for i in range(3)
    ]
    write_jsonl(layout.queries("test"), queries)
    write_jsonl(layout.queries("f_g"), f_g)
    corpus = [{"id": f"D{i}", "contents": f"X{i} visits {a} ."} for i, a in enumerate(answers)]
    write_jsonl(layout.corpus, corpus)
    write_bank(layout.rule_bank, {"R1": "[E1, visits, E2] leads to [E1, meets, E2]"})
    hits = [(f"t{i}", "R1", 1, f"D{i}", 2.0) for i in range(len(answers))]
    run_frame(hits).to_parquet(layout.run("bm25-rg"))


def row_params(server: LlmServer, **api) -> dict:
    return {
        "generation.model": MODEL,
        "generation.retriever": "bm25",
        "generation.num_documents": 1,
        "generation.max_rules": 1,
        "generation.max_new_tokens": 8,
        "generation.batch_size": 4,
        "generation.test_queries": None,
        "generation.seed": 1,
        "generation.grid.api_icl": {"retrieval": "rg", "generator": "api", "prompt": "rule"},
        "generation.grid.local_icl": {"retrieval": "rg", "generator": "base", "prompt": "rule"},
        "generation.grid.api_query": {"retrieval": None, "generator": "api", "prompt": "query"},
        "generation.api": {
            "base_url": server.base_url, "model": MODEL, "shots": 1, "backoff": 0.1,
            "max_retries": 2, "concurrency": 2, "timeout": 60, **api,
        },
    }  # fmt: skip


def predictions(layout, row: str) -> list[dict]:
    text = (layout.row(row) / "predictions.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def test_a_grid_row_through_the_server(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stage_project: StageProject,
    llm_server: LlmServer,
) -> None:
    """`generate` with `generator: api` writes prompts, answers, EM / T-F1 as the local row
    on the same queries does; a rerun sends no request (cached); without the cache a rerun
    gets the same answers again (temperature 0)."""
    import pipeline_steps.generate as stage

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("RULERAG_API_KEY", KEY)
    layout = stage_project.layout("toy")
    write_row_inputs(layout, ANSWERS)
    params = row_params(llm_server)

    def run() -> tuple[int, list[dict]]:
        before = llm_server.requests_to()
        assert (
            stage_project.run(stage, "--dataset", "toy", "--config", "api_icl", params=params) == 0
        )
        return llm_server.requests_to() - before, predictions(layout, "api_icl")

    sent, first = run()
    assert sent == len(ANSWERS)  # one request per query, nothing retried
    assert layout.api_answer_cache.is_file()
    metrics = json.loads((layout.row("api_icl") / "metrics.json").read_text())
    assert metrics["generator"] == f"api:{MODEL}" and metrics["queries"] == len(ANSWERS)
    assert metrics["em"] == sum(r["em"] for r in first) / len(first)
    assert all(r["generation"].strip() for r in first)  # the model did answer

    sent, cached = run()
    assert sent == 0 and cached == first

    layout.api_answer_cache.unlink()
    sent, again = run()
    assert sent == len(ANSWERS)
    assert [r["generation"] for r in again] == [r["generation"] for r in first]

    # the local generator's row on the same queries: the same records, the same prompts
    assert stage_project.run(stage, "--dataset", "toy", "--config", "local_icl", params=params) == 0
    local = predictions(layout, "local_icl")
    assert [set(r) for r in local] == [set(r) for r in first]
    assert [r["prompt"] for r in local] == [r["prompt"] for r in first]
    local_metrics = json.loads((layout.row("local_icl") / "metrics.json").read_text())
    assert {"em", "token_f1", "queries", "recall_at_10"} <= set(metrics) & set(local_metrics)


def test_a_killed_server_gives_retries_then_one_error_and_a_rerun_resumes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    stage_project: StageProject,
) -> None:
    """The server is killed (SIGKILL) during the second batch of answers: the client retries,
    then the stage fails with one line (exit 2, no traceback) saying the first batch is kept;
    after a restart on the same address a rerun sends only the prompts still missing."""
    import signal

    import pipeline_steps.generate as stage

    require_llm_server()
    server = LlmServer(tmp_path / "server.log").start()
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
        monkeypatch.setenv("RULERAG_API_KEY", KEY)
        layout = stage_project.layout("toy")
        answers = [f"City{i}" for i in range(16)]  # batches of 8 (answer_cache's batch_size)
        write_row_inputs(layout, answers)
        params = {**row_params(server, shots=0, concurrency=1), "generation.max_new_tokens": 4}

        def kill_after_ten() -> None:  # 10 answered: the first 8 are stored, 9-16 is in flight
            deadline = time.monotonic() + 120
            while server.requests_to() < 10 and time.monotonic() < deadline:
                time.sleep(0.02)
            server.stop(signal.SIGKILL)

        killer = threading.Thread(target=kill_after_ten)
        killer.start()
        caplog.set_level(logging.WARNING, logger="rulerag.generation.api")
        code = stage_project.run(stage, "--dataset", "toy", "--config", "api_query", params=params)
        killer.join()
        err = capsys.readouterr().err
        assert code == 2
        assert "Traceback" not in err
        failed = [line for line in err.splitlines() if line.startswith("generate failed:")]
        assert len(failed) == 1, err
        assert "after 3 attempts" in failed[0]  # max_retries 2
        assert "8 new answers of this run are kept in" in failed[0]
        retries = [r for r in caplog.records if "retry" in r.getMessage()]
        assert len(retries) >= 2
        assert not layout.row("api_query").exists()  # nothing published

        server.start()  # same port: the same base_url, so the same cache key
        before = server.requests_to()
        code = stage_project.run(stage, "--dataset", "toy", "--config", "api_query", params=params)
        assert code == 0
        assert server.requests_to() - before == len(answers) - 8
        assert len(predictions(layout, "api_query")) == len(answers)
    finally:
        server.stop()


def test_concurrent_requests_are_all_answered(llm_server: LlmServer) -> None:
    """8 prompts with 4 in flight: every one answered, each with what it gets alone (the
    server queues them; no answer goes to another request)."""
    from rulerag.generation.api import ApiGenerator
    from rulerag.generation.settings import ApiSettings

    def client(concurrency: int) -> ApiGenerator:
        endpoint = ApiSettings(
            base_url=llm_server.base_url, model=MODEL, concurrency=concurrency, max_retries=0
        )
        return ApiGenerator(endpoint, api_key=KEY, max_tokens=6)

    prompts = [f"Name a city in country number {i}." for i in range(8)]
    alone = client(1).generate(prompts)
    together = client(4)
    assert together.generate(prompts) == alone
    assert together.requests_sent == len(prompts) and together.retries == 0


def test_the_server_applies_the_local_generators_chat_template(llm_server: LlmServer) -> None:
    """The prompt the server renders for the paper's chat messages is the one the local
    generator's tokenizer renders: /v1/chat/completions on the messages and /v1/completions on
    the locally rendered text read the same number of tokens (the local count: no BOS or
    system turn added or lost) and, at temperature 0, write the same answer."""
    import requests

    from rulerag.generation.models import load_tokenizer
    from rulerag.generation.prompts import PromptFormat, prompt_token_ids

    fmt = PromptFormat("paper")
    prompt = fmt.render("rule", "what does Iran Consult ?", ["2014-01-02 Iran Consult Oman ."],
                        ["[E1, Meet, E2] leads to [E1, Consult, E2]"])  # fmt: skip
    messages = fmt.few_shot_messages([("what does Iran Meet ?", "Oman")], prompt)
    tokenizer = load_tokenizer(MODEL)
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert "You are a helpful AI assistant named SmolLM" in rendered  # the template's own turn
    local_ids = prompt_token_ids(tokenizer, messages[-1]["content"], True)
    body = {"model": MODEL, "max_tokens": 12, "temperature": 0}
    chat = requests.post(
        f"{llm_server.base_url}/chat/completions", json={**body, "messages": messages}, timeout=60
    ).json()
    plain = requests.post(
        f"{llm_server.base_url}/completions", json={**body, "prompt": rendered}, timeout=60
    ).json()
    assert chat["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"] == len(local_ids)
    assert chat["choices"][0]["message"]["content"] == plain["choices"][0]["text"]


def test_siar_and_r3_through_the_server(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stage_project: StageProject,
    llm_server: LlmServer,
) -> None:
    """rule_retrieval_eval with `llm.kind: api`: SIAR's self-induced rules and R³'s rankings
    come from the server (one request per prompt), their rows are written, and a rerun of the
    stage sends none (`DataLayout.rule_llm_cache`)."""
    import pipeline_steps.build_benchmark as build_benchmark
    import pipeline_steps.rule_retrieval_eval as rule_retrieval_eval
    from tests.support.synthetic_kg import write_synthetic_dataset

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("RULERAG_API_KEY", KEY)
    layout = stage_project.layout("toy")
    write_synthetic_dataset(layout, temporal=True)
    params = {
        **row_params(llm_server),
        "build_benchmark.test_size": 20,  # selection `head`: no LLM
        "rule_retrieval.queries": 3,
        "rule_retrieval.methods": ["siar", "siar_r3"],
        "rule_retrieval.retrievers": ["bm25"],
        "rule_retrieval.query_forms": ["si"],
        "rule_retrieval.ks": [1, 2],
        "rule_retrieval.top_k": 2,
        "rule_retrieval.top_n": 3,
        "rule_retrieval.shots": 1,
        "rule_retrieval.similarity": False,
        "rule_retrieval.llm": {
            "kind": "api", "model": MODEL, "max_new_tokens": 24, "rank_max_new_tokens": 12,
            "batch_size": 4,
        },
    }  # fmt: skip
    assert stage_project.run(build_benchmark, "--dataset", "toy", params=params) == 0
    before = llm_server.requests_to()
    assert stage_project.run(rule_retrieval_eval, "--dataset", "toy", params=params) == 0
    sent = llm_server.requests_to() - before
    metrics = json.loads((layout.rule_retrieval / "metrics.json").read_text())
    assert metrics["llm"] == f"api:{MODEL}" and metrics["queries"] == 3
    rows = [r["row"] for r in metrics["rows"]]
    assert any("SIAR" in r and "R³" not in r for r in rows), rows
    assert any("SIAR" in r and "R³" in r for r in rows), rows
    assert 3 < sent <= 6  # 3 self-induced rules, up to 3 rankings (none for one candidate)
    before = llm_server.requests_to()
    assert stage_project.run(rule_retrieval_eval, "--dataset", "toy", params=params) == 0
    assert llm_server.requests_to() == before
    again = json.loads((layout.rule_retrieval / "metrics.json").read_text())
    recalls = [(r["row"], r["R@1"], r["R@2"]) for r in metrics["rows"]]
    assert [(r["row"], r["R@1"], r["R@2"]) for r in again["rows"]] == recalls
    assert sum(r["llm_calls"] for r in metrics["rows"]) == sent
    assert [r["llm_calls"] for r in again["rows"]] == [0] * len(recalls)


def test_a_verify_and_edit_chain_through_the_server(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stage_project: StageProject,
    llm_server: LlmServer,
) -> None:
    """A VE row with `generator: api`: the chain samples its drafts from the server (n
    requests per query at the chain's temperature), searches the BM25 index and answers."""
    import pipeline_steps.generate as generate
    import pipeline_steps.index as index
    from rulerag.io import write_jsonl

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("RULERAG_API_KEY", KEY)
    layout = stage_project.layout("toy")
    write_row_inputs(layout, ["Kabul", "Iran"])
    f_r = [
        {"qid": "r0", "query": "what does Y0 visit ?", "answers": ["Kabul"],
         "oracle_doc_ids": ["D0"], "rule_text": "[E1, visits, E2] leads to [E1, meets, E2]",
         "head_name": "Y0", "relation_name": "visit"},
    ]  # fmt: skip
    write_jsonl(layout.queries("f_r"), f_r)
    params = {
        **row_params(llm_server),
        "index.dense": {},
        "generation.grid.api_ve": {
            "retrieval": None, "generator": "api", "prompt": "query", "method": "ve"
        },
        "generation.chains": {
            "shots": 1, "ve_samples": 2, "max_new_tokens": 24, "step_max_new_tokens": 12,
            "documents": 1,
        },
    }  # fmt: skip
    assert stage_project.run(index, "--dataset", "toy", "--index", "bm25", params=params) == 0
    before = llm_server.requests_to()
    code = stage_project.run(generate, "--dataset", "toy", "--config", "api_ve", params=params)
    assert code == 0
    assert llm_server.requests_to() - before >= 2 * 2  # ve_samples drafts per query
    rows = predictions(layout, "api_ve")
    assert [r["qid"] for r in rows] == ["t0", "t1"]
    metrics = json.loads((layout.row("api_ve") / "metrics.json").read_text())
    assert metrics["generator"] == f"ve:api:{MODEL}" and metrics["queries"] == 2


def test_qa_rag_answers_its_fixture_through_the_server(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stage_project: StageProject,
    llm_server: LlmServer,
) -> None:
    """qa_rag's fixture set (tests/stages/test_qa_rag_stage.py) with API rows: Standard RAG
    and RuleRAG-ICL answered by the server, one request per question and row."""
    from tests.helpers import require_minilm
    from tests.support.qa_sets import TOY_QUESTIONS, write_toy_fixture

    require_minilm()
    import pipeline_steps.qa_rag as stage

    qa_sets = tmp_path / "qa"  # outside data/<dataset>/: the QA sets' own folder
    write_toy_fixture(qa_sets, stage_project.layout("icews14").rule_bank)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("RULERAG_API_KEY", KEY)
    params = {
        **row_params(llm_server, shots=0),
        "generation.grid.api_rag": {"retrieval": "standard", "generator": "api", "prompt": "plain"},
        "qa.datasets": ["toyqa"],
        "qa.dir": str(qa_sets),
        "qa.retriever": "bm25",
        "qa.rows": ["api_rag", "api_icl"],
        "build_benchmark.rule_selection.threshold": 0.2,
    }
    before = llm_server.requests_to()
    assert stage_project.run(stage, "--dataset", "toyqa", params=params) == 0
    assert llm_server.requests_to() - before == 2 * len(TOY_QUESTIONS)
    layout = stage_project.layout("toyqa")
    report = json.loads((layout.qa / "metrics.json").read_text())
    assert set(report["rows"]) == {"api_rag", "api_icl"}
    assert {row["generator"] for row in report["rows"].values()} == {f"api:{MODEL}"}
    assert report["rows"]["api_rag"]["recall_at_10"] == 1.0
