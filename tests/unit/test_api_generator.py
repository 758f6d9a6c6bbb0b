"""The OpenAI-compatible API generator against a fake server on 127.0.0.1: retries on 429 and
500 then succeeds, sends the paper's 3-shot prompt (or the legacy few-shot turns), fails fast on
401, and never logs the key."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

from rulerag.generation.api import ApiError, ApiGenerator, resolve_api_key
from rulerag.generation.prompts import PromptFormat
from rulerag.generation.settings import ApiSettings
from tests.support.fake_openai import FakeOpenAI

KEY = "sk-test-SECRET-0123456789"
API_FIELDS = {field.name for field in dataclasses.fields(ApiSettings)}


def make(server: FakeOpenAI, **kwargs) -> tuple[ApiGenerator, list[float]]:
    """A generator for `server`; `kwargs`: `ApiSettings` fields, or the generator's own."""
    sleeps: list[float] = []
    kwargs.setdefault("prompt_format", PromptFormat("legacy"))  # one turn per example
    given = {name: kwargs.pop(name) for name in list(kwargs) if name in API_FIELDS}
    endpoint = {"base_url": server.url, "model": "fake-model", "concurrency": 1}
    settings = ApiSettings(**{**endpoint, "backoff": 0.5, "timeout": 5, **given})
    generator = ApiGenerator(
        settings,
        api_key=KEY,
        examples=[("ex1", "a1"), ("ex2", "a2"), ("ex3", "a3")],
        sleep=sleeps.append,
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
        ApiGenerator(ApiSettings(base_url="http://127.0.0.1:1/v1", model="m"))
    with pytest.raises(ValueError, match="base_url"):
        ApiGenerator(ApiSettings(base_url=None, model="m"), api_key=KEY)


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


def test_answer_cache_key_holds_what_changes_an_answer(tmp_path):
    """The grid's API answer cache: a rerun sends nothing; another model, endpoint, token
    budget, temperature or set of examples is another key; a failure mid-run keeps the
    answers already received and a rerun sends only the missing prompts."""
    from rulerag.generation.answer_cache import CachedGenerator

    cache = tmp_path / "api.sqlite"

    def cached(generator: ApiGenerator) -> CachedGenerator:
        return CachedGenerator(generator, cache, identity=generator.cache_identity(), batch_size=2)

    prompts = [f"Query: q{i}?" for i in range(5)]
    with FakeOpenAI([]) as server:
        generator, _ = make(server)
        first = cached(generator).generate(prompts)
        assert len(server.requests) == 5
        again = cached(make(server)[0])
        assert again.generate(prompts) == first and again.calls == 0
        assert len(server.requests) == 5
        base = generator.cache_identity()
        variants = [
            make(server, max_tokens=17)[0],
            make(server, temperature=0.5)[0],
            make(server, system="be brief")[0],
            make(server, stop=["\n"])[0],
            make(server, prompt_format=PromptFormat("paper"))[0],
        ]
        other_model = make(server)[0]
        other_model.model = "another"
        other_examples = make(server)[0]
        other_examples.examples = [("ex1", "a1")]
        variants += [other_model, other_examples]
        identities = {g.cache_identity() for g in variants}
        assert base not in identities and len(identities) == len(variants)
        assert KEY not in base and "fake-model" in base and server.url in base

    # a server that stops answering after 3 requests: the first batch (2) is kept
    fresh = tmp_path / "resume.sqlite"
    with FakeOpenAI([(200, None)] * 3 + [(401, None)] * 10) as server:
        generator, _ = make(server, max_retries=0)
        broken = CachedGenerator(generator, fresh, identity="x", batch_size=2)
        with pytest.raises(ApiError, match=r"2 new answers of this run are kept in .*resume"):
            broken.generate(prompts)
    with FakeOpenAI([]) as server:
        generator, _ = make(server)
        resumed = CachedGenerator(generator, fresh, identity="x", batch_size=2)
        resumed.generate(prompts)
        assert resumed.calls == 3 and len(server.requests) == 3
