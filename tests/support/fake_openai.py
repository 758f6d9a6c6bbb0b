"""The fake OpenAI-compatible server (`rulerag.fake_openai`, which the benchmarks use
too), and the answers a chat LLM gives to rule retrieval's two prompts."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from rulerag.fake_openai import FakeOpenAI, RawReply
from rulerag.generation.settings import ApiSettings
from rulerag.rule_retrieval.prompts import R3_TEMPLATE_HEAD

__all__ = ["FakeOpenAI", "RawReply", "credentialed_endpoint", "fake_rule_llm"]


def credentialed_endpoint(
    monkeypatch: pytest.MonkeyPatch, url: str, key: str | None = None, **fields: Any
) -> ApiSettings:
    """`generation.api` settings whose endpoint is `url` with credentials in it (`user:pw@`):
    `base_url` refuses those (params.yaml is committed), so they come, as on an Airflow
    worker, from a connection (`airflow_conn_id`, faked here) whose host is `url` and whose
    password is `key`. `key_env` is empty unless given, so the environment's key is not used."""
    import rulerag.generation.api as api

    conn = SimpleNamespace(host=url, password=key)
    monkeypatch.setattr(api, "_airflow_connection", lambda conn_id: conn)
    fields.setdefault("key_env", ())
    return ApiSettings(airflow_conn_id="llm", **fields)


def fake_rule_llm(last: str) -> str:
    """A chat API's answers to the two prompts: a ranking for R³, a rule for self-induction."""
    if last.startswith(R3_TEMPLATE_HEAD):
        return "[2] > [1]"
    return "Make a visit leads to Host a visit"
