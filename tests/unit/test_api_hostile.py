"""The API generator against hostile or broken servers (issue 45), on a fake server on
127.0.0.1: a reply trickled a byte at a time ends at the request's deadline (body or
headers) and is retried; SIGTERM stops a concurrent `generate`, and the `generate` stage,
at once instead of after its slowest request; a 200 whose body is not JSON is a named,
retried `ApiError` and one line from the stage; `content: null` is an error, not an empty
answer; an `api` row's base URL and key variable are asked for before anything runs.

No test measures speed: the ones that stop or time out assert that something ends within a
bound far above what it takes (the trickling replies would hold it for minutes)."""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml

from rulerag.errors import InputError
from rulerag.generation.api import ALLOWED_KEY_ENV, ApiError, ApiGenerator
from rulerag.generation.prompts import PromptFormat
from rulerag.generation.settings import ApiSettings, generation_settings
from rulerag.orchestration import params_check
from rulerag.settings import SettingsError
from rulerag.tracking import StageTerminated, stop_on_sigterm
from tests.support.fake_openai import FakeOpenAI, RawReply, credentialed_endpoint

KEY = "sk-test-SECRET-0123456789"
API_FIELDS = {field.name for field in dataclasses.fields(ApiSettings)}
PARAMS_FILE = Path(__file__).resolve().parents[2] / "params.yaml"
#: far above what a stopped or timed-out call takes, far below what the trickles last
BOUND = 20.0
#: a good answer sent a byte every 0.25 s: 200 bytes, 50 s (a minute with its headers)
ANSWER = json.dumps({"choices": [{"message": {"content": "Kabul"}}]}).ljust(200).encode()
TRICKLE = RawReply(ANSWER, trickle=0.25)


def make(
    server: FakeOpenAI, settings: ApiSettings | None = None, **kwargs
) -> tuple[ApiGenerator, list[float]]:
    """A generator for `server` (or for `settings`' endpoint); `kwargs`: `ApiSettings` fields,
    or the generator's own."""
    sleeps: list[float] = []
    kwargs.setdefault("sleep", sleeps.append)
    given = {name: kwargs.pop(name) for name in list(kwargs) if name in API_FIELDS}
    given = {"base_url": server.url, "model": "fake-model", "concurrency": 1, **given}
    settings = dataclasses.replace(settings or ApiSettings(), **given)
    kwargs.setdefault("api_key", KEY)
    generator = ApiGenerator(settings, prompt_format=PromptFormat("legacy"), **kwargs)
    return generator, sleeps


def sigterm_when(condition, timeout: float = BOUND) -> list[float]:
    """SIGTERM to the main thread (where `rulerag.tracking` raises it as `StageTerminated`)
    once `condition()` holds: a stage mid-run, as dvc or Airflow stops it. Returns a list
    that gets the monotonic time the signal was sent."""
    main = threading.main_thread().ident or 0
    sent: list[float] = []

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        sent.append(time.monotonic())
        signal.pthread_kill(main, signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()
    return sent


def api_workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("rulerag-api")]


# -- 1. one deadline per request -------------------------------------------------------------


def test_a_trickled_body_ends_at_the_deadline_and_is_retried(caplog, monkeypatch):
    """requests' timeout bounds each socket read: a byte every 0.25 s with a 1 s timeout held
    the request until the body ended. Now each attempt ends at its deadline, is retried as
    a transient failure, and the error names the endpoint (credentials masked) and the
    deadline."""
    caplog.set_level(logging.WARNING)
    with FakeOpenAI([], default=TRICKLE) as server:
        url = server.url.replace("http://", "http://user:hunter2@")
        endpoint = credentialed_endpoint(monkeypatch, url, KEY)
        generator, sleeps = make(
            server, endpoint, base_url=None, api_key=None, timeout=1, max_retries=1
        )
        started = time.monotonic()
        with pytest.raises(ApiError) as info:
            generator.complete("p")
        assert time.monotonic() - started < BOUND
        assert len(server.requests) == 2 and len(sleeps) == 1  # retried once, then gave up
    message = str(info.value)
    assert f"{server.url.replace('http://', 'http://***@')}/chat/completions" in message
    assert "within the 1 s deadline" in message and "after 2 attempts" in message
    assert "hunter2" not in message and KEY not in message
    assert "1 s deadline (generation.api.timeout); retry 1/1" in caplog.text  # said at once
    assert "hunter2" not in caplog.text


def test_trickled_headers_end_at_the_deadline_too():
    """The status line and headers a byte at a time: no body to check a deadline between
    pieces of, so the request's socket is shut at the deadline."""
    with FakeOpenAI([], default=RawReply(ANSWER, trickle=0.25, trickle_headers=True)) as server:
        generator, _ = make(server, timeout=1, max_retries=0)
        started = time.monotonic()
        with pytest.raises(ApiError, match="within the 1 s deadline"):
            generator.complete("p")
        assert time.monotonic() - started < BOUND


def test_a_slow_but_timely_answer_and_keep_alive_are_unchanged():
    """A reply trickled well within the deadline is read whole, and requests to a
    well-behaved server share one kept-alive connection, as before."""
    short = json.dumps({"choices": [{"message": {"content": "Kabul"}}]}).encode()
    with FakeOpenAI([RawReply(short, trickle=0.001)]) as server:
        generator, sleeps = make(server, timeout=30)
        assert generator.complete("p") == "Kabul"
    assert sleeps == [] and generator.retries == 0
    with FakeOpenAI([], keep_alive=True) as server:
        generator, _ = make(server)
        assert generator.generate(["a", "b", "c"]) == ["A:a", "A:b", "A:c"]
        assert server.connections == 1


# -- 2. SIGTERM stops a concurrent generate at once ------------------------------------------


def test_sigterm_stops_a_concurrent_generate_at_once():
    """Four requests in flight, each a minute long, four more queued: SIGTERM (raised as
    `StageTerminated` in the main thread) ends `generate` at once, sends none of the queued
    requests and leaves no worker thread behind (the pool used to wait for every request in
    flight, so the stage outlived its SIGTERM by the slowest of them)."""
    with FakeOpenAI([], default=TRICKLE) as server:
        generator, _ = make(server, timeout=120, max_retries=3, concurrency=4)
        sent = sigterm_when(lambda: len(server.requests) >= 4)
        with stop_on_sigterm(), pytest.raises(StageTerminated):
            generator.generate([f"p{i}" for i in range(8)])
        assert time.monotonic() - sent[0] < BOUND
        for worker in api_workers():
            worker.join(BOUND)
            assert not worker.is_alive(), "a worker outlived the stopped generate"
        assert len(server.requests) == 4  # the queued prompts were never sent


def test_an_api_error_in_one_worker_does_not_wait_for_the_others():
    """A worker's `ApiError` (a 401) is raised without waiting for the requests still
    trickling in the other workers."""
    with FakeOpenAI([TRICKLE, TRICKLE, TRICKLE], default=RawReply(b"{}", status=401)) as server:
        generator, _ = make(server, timeout=120, concurrency=4)
        started = time.monotonic()
        with pytest.raises(ApiError, match="HTTP 401"):
            generator.generate([f"p{i}" for i in range(4)])
        assert time.monotonic() - started < BOUND
        for worker in api_workers():
            worker.join(BOUND)
            assert not worker.is_alive()


# -- 3. a 200 whose body is not JSON ---------------------------------------------------------

HTML = RawReply(
    f"<html>\n<body><h1>502 Bad Gateway</h1> upstream said {KEY}</body></html>".encode(),
    content_type="text/html; charset=utf-8",
)


def test_a_body_that_is_not_json_is_retried_then_named(caplog):
    """Malformed JSON, bytes that are not UTF-8, a proxy's HTML page: each is a transient
    failure (logged, retried), and the last one is named by the endpoint, the status, the
    content type and the start of the body (the key masked), in one line."""
    caplog.set_level(logging.WARNING)
    script = [RawReply(b'{"choices": [tru'), RawReply(b"\xff\xfe{\x00}"), HTML]
    with FakeOpenAI(script) as server:
        generator, sleeps = make(server, max_retries=2)
        with pytest.raises(ApiError) as info:
            generator.complete("p")
    assert len(server.requests) == 3 and len(sleeps) == 2
    message = str(info.value)
    assert message.startswith(f"{server.url}/chat/completions: HTTP 200 with a body that is not")
    assert "(text/html; charset=utf-8, " in message and "502 Bad Gateway" in message
    assert "after 3 attempts" in message and "\n" not in message
    assert KEY not in message and KEY not in caplog.text
    assert "'{\"choices\": [tru'" in caplog.text  # the malformed one, as it came
    assert r"'\xff\xfe{\x00}'" in caplog.text  # the non-UTF-8 one, its bytes escaped


def test_a_proxy_page_once_then_the_answer():
    with FakeOpenAI([HTML]) as server:
        generator, sleeps = make(server)
        assert generator.complete("p") == "A:p"
    assert len(server.requests) == 2 and len(sleeps) == 1


# -- 4. content null -------------------------------------------------------------------------


def test_null_content_is_an_error_not_an_empty_answer():
    """`content: null` (a refusal, a content filter, a tool call) used to become an empty
    answer, scored as wrong without a word; it is an `ApiError` saying why, at once (at
    temperature 0 asking again gets the same)."""
    null = {
        "choices": [
            {
                "message": {"role": "assistant", "content": None, "refusal": "I can't help."},
                "finish_reason": "content_filter",
            }
        ]
    }
    with FakeOpenAI([(200, null)]) as server:
        generator, sleeps = make(server)
        with pytest.raises(ApiError) as info:
            generator.complete("p")
    assert len(server.requests) == 1 and sleeps == []
    message = str(info.value)
    assert message.startswith(f"{server.url}/chat/completions: the answer has no text")
    assert "content is null" in message and "'content_filter'" in message
    assert "I can't help." in message


def test_content_that_is_not_text_is_an_error():
    with FakeOpenAI([(200, {"choices": [{"message": {"content": ["a", "b"]}}]})]) as server:
        generator, _ = make(server)
        with pytest.raises(ApiError, match="message.content is list, not text"):
            generator.complete("p")


# -- 5. API settings before anything runs ----------------------------------------------------

API_ROW = {"retrieval": "rg", "generator": "api", "prompt": "rule"}


def test_an_api_row_without_a_base_url_fails_the_params_check():
    """An `api` row in `configs` (or `robustness_rows`) with `base_url: null` passed
    params_check, then failed in the stage; it is a params error now, naming the key, unless
    an Airflow connection may give the URL. A row that is not selected asks nothing."""
    grid = {"gpt": API_ROW}
    for selected in ({"configs": ["gpt"]}, {"robustness_rows": ["gpt"]}):
        with pytest.raises(SettingsError, match=r"api\.base_url is null, but rows \['gpt'\]"):
            generation_settings({**selected, "grid": grid})
        generation_settings({**selected, "grid": grid, "api": {"airflow_conn_id": "llm"}})
        generation_settings({**selected, "grid": grid, "api": {"base_url": "http://h:1/v1"}})
    generation_settings({"grid": grid})
    with pytest.raises(SettingsError, match=r"api\.key_env is empty"):
        generation_settings(
            {"configs": ["gpt"], "grid": grid, "api": {"base_url": "http://h/v1", "key_env": []}}
        )
    params = yaml.safe_load(PARAMS_FILE.read_text(encoding="utf-8"))
    params["generation"]["grid"]["gpt"] = API_ROW
    params["generation"]["configs"].append("gpt")
    with pytest.raises(SettingsError, match=r"generation\.api\.base_url"):
        params_check.check_params(params)


def with_api_row(**api) -> dict:
    params = yaml.safe_load(PARAMS_FILE.read_text(encoding="utf-8"))
    params["generation"]["grid"]["gpt"] = API_ROW
    params["generation"]["configs"] = ["gpt"]
    params["serve"]["row"] = None  # no local row to package
    params["generation"]["api"].update(base_url="https://api.example/v1", **api)
    return params


def test_params_check_asks_for_the_key_variable(tmp_path, monkeypatch, capsys):
    """No key variable set and an `api` row selected: `make run`'s check says which variable
    to set before dvc starts (it used to be `ValueError: no API key` in the stage). The
    Makefile's `OPENAI_API_KEY=unused` counts as set; an Airflow connection cannot be checked
    here, so it asks for nothing."""
    check = params_check.check_environment
    params = params_check.check_params(with_api_row())
    (problem,) = check(params, {})
    assert "generation row 'gpt' asks the chat API" in problem
    assert "export RULERAG_API_KEY=<your key>" in problem
    assert check(params, {"RULERAG_API_KEY": "  "})  # blank is not set, as at run time
    assert check(params, {"OPENAI_API_KEY": "unused"}) == []
    assert check(params_check.check_params(with_api_row(airflow_conn_id="llm")), {}) == []
    narrowed = params_check.check_params(with_api_row(key_env=["OPENAI_API_KEY"]))
    (problem,) = check(narrowed, {"RULERAG_API_KEY": KEY})
    assert "OPENAI_API_KEY is not set" in problem and "export OPENAI_API_KEY=" in problem
    assert check(params_check.check_params(yaml.safe_load(PARAMS_FILE.read_text())), {}) == []

    rule_llm = yaml.safe_load(PARAMS_FILE.read_text(encoding="utf-8"))
    rule_llm["rule_retrieval"]["llm"]["kind"] = "api"
    (problem,) = check(params_check.check_params(rule_llm), {})
    assert problem.startswith("rule_retrieval.llm (kind: api) asks the chat API")

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(with_api_row()), encoding="utf-8")
    for name in ("RULERAG_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    assert params_check.main([str(path)]) == 2
    assert "export RULERAG_API_KEY=<your key>" in capsys.readouterr().err
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    assert params_check.main([str(path)]) == 0


def test_a_missing_key_or_url_is_the_users_to_fix(monkeypatch):
    """In a stage they are one line (an `InputError`), naming what to set."""
    for name in ("RULERAG_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(InputError, match=r"no API key for http://\*\*\*@h/v1: set RULERAG_API"):
        ApiGenerator(
            credentialed_endpoint(
                monkeypatch, "http://u:p@h/v1", model="m", key_env=ALLOWED_KEY_ENV
            )
        )
    with pytest.raises(InputError, match="generation.api.base_url"):
        ApiGenerator(ApiSettings(base_url=None, model="m"), api_key=KEY)
