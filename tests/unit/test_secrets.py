"""Secrets stay home: credentials in URLs and API keys never reach stderr, logs, spool files,
MLflow params or exceptions, and neither params.yaml nor a run conf can send an arbitrary
environment variable to a server."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rulerag.generation.api import ApiError, ApiGenerator
from rulerag.generation.settings import ApiSettings, generation_settings
from rulerag.orchestration.run_conf import validate_run_conf
from rulerag.params import read_params_file
from rulerag.redact import redact_secrets, redact_url
from rulerag.settings import SettingsError
from rulerag.tracking import flatten_params, stage_run
from tests.support.fake_openai import credentialed_endpoint

PROJECT = Path(__file__).resolve().parents[2]
PASSWORD = "s3cret-Pw-9931"
KEY = "sk-test-Abc1Def2Ghi3Jkl4Mno5"


def test_redaction_of_urls_and_echoed_keys() -> None:
    assert redact_url("http://user:pw@host:5000/x") == "http://***@host:5000/x"
    assert redact_url("sqlite:///data/mlflow.db") == "sqlite:///data/mlflow.db"
    text = f"request to https://u:{PASSWORD}@h/v1 failed; key {KEY}; echo sk-t*****Mno5"
    out = redact_secrets(text, [KEY, PASSWORD])
    assert PASSWORD not in out and KEY not in out and "Mno5" not in out and "sk-t" not in out
    assert "request to https://***@h/v1 failed" in out
    assert redact_secrets("nothing to hide here", [KEY]) == "nothing to hide here"


def test_a_password_holding_an_at_sign_is_masked_whole() -> None:
    """Issue 28: the userinfo ended at the first `@`, so `TAIL` reached stderr and the spool."""
    uri = "http://user:hunter@TAIL@127.0.0.1:9/"
    assert redact_url(uri) == "http://***@127.0.0.1:9/"
    assert "TAIL" not in redact_secrets(f"cannot reach {uri}: refused")
    assert redact_url("http://h/p?q=a@b and mailto:x@y.z") == "http://h/p?q=a@b and mailto:x@y.z"


def test_a_tracking_uri_with_credentials_never_shows_its_password(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    clean_tracking_env: None,
) -> None:
    """The store is down: the run is spooled, with the error text, and a warning is logged;
    both used to carry the URL with its password (MLflow's message names the URL)."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    caplog.set_level(logging.DEBUG)
    uri = f"http://user:{PASSWORD}@127.0.0.1:9/"
    params = {"generation": {"api": {"base_url": f"https://u:{PASSWORD}@api.example/v1"}}}
    with stage_run("demo", "toy", project_dir=tmp_path, tracking_uri=uri, params=params) as run:
        run.log_metrics({"x": 1.0})
    assert run.spooled
    seen = caplog.text + capsys.readouterr().err
    assert "***@127.0.0.1:9" in seen and PASSWORD not in seen
    files = [p for p in (tmp_path / ".mlflow-spool").rglob("*") if p.is_file()]
    assert files and all(PASSWORD not in p.read_text(errors="replace") for p in files)
    spooled = json.loads(next(p for p in files if p.name == "run.json").read_text())
    assert spooled["params"]["generation.api.base_url"] == "https://***@api.example/v1"


def test_mlflow_params_never_hold_url_credentials() -> None:
    flat = flatten_params({"generation": {"api": {"base_url": f"https://u:{KEY}@h/v1"}}})
    assert flat == {"generation.api.base_url": "https://***@h/v1"}


class _Server(ThreadingHTTPServer):
    seen: list[dict[str, str]]


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.server.seen.append(dict(self.headers))  # type: ignore[attr-defined]
        body = json.dumps(
            {"error": {"message": f"Incorrect API key provided: {KEY[:4]}*****{KEY[-4:]}."}}
        ).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Any:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.seen = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()


def test_key_env_cannot_name_another_variable(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any variable named in key_env used to be sent as the Bearer token."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-very-secret")
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    with pytest.raises(ValueError, match="key_env may only name"):
        ApiGenerator(ApiSettings(base_url=url, model="m", key_env=("AWS_SECRET_ACCESS_KEY",)))
    section = {"api": {"key_env": ["AWS_SECRET_ACCESS_KEY"]}}
    with pytest.raises(SettingsError, match=r"generation\.api\.key_env"):
        generation_settings(section)
    assert server.seen == []


def test_an_error_body_echoing_the_key_and_a_url_key_stay_hidden(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"http://user:{PASSWORD}@127.0.0.1:{server.server_address[1]}/v1"
    generator = ApiGenerator(credentialed_endpoint(monkeypatch, url, KEY, model="m", max_retries=0))
    with pytest.raises(ApiError) as caught:
        generator.complete("hello")
    message = str(caught.value)
    assert "HTTP 401" in message and "***@127.0.0.1" in message
    for secret in (PASSWORD, KEY, KEY[:4], KEY[-4:]):
        assert secret not in message, secret
    assert PASSWORD not in repr(generator)
    assert len(server.seen) == 1  # the request went out (requests turns userinfo into Basic)


@pytest.mark.parametrize(
    "key",
    [
        "generation.api.base_url",
        "generation.api.key_env",
        "generation.api.airflow_conn_id",
        "generation.api",
    ],
)
def test_a_run_conf_cannot_redirect_secrets(key: str) -> None:
    params = read_params_file(PROJECT / "params.yaml")
    value: Any = {"base_url": "http://evil.example"} if key == "generation.api" else "x"
    if key.endswith("key_env"):
        value = ["AWS_SECRET_ACCESS_KEY"]
    with pytest.raises(ValueError, match="only params.yaml may set it"):
        validate_run_conf({"params": {key: value}}, params, ["icews14"])
    assert validate_run_conf({"params": {"generation.api.model": "m2"}}, params, ["icews14"])


def test_a_completion_echoing_the_key_never_reaches_the_predictions() -> None:
    """Issue 28: a server answering 200 with the key in its completion got it back verbatim
    (into predictions.jsonl and MLflow); a base64 echo in an error was not masked either."""
    import base64

    from rulerag.generation.api import ApiError
    from tests.support.fake_openai import FakeOpenAI

    encoded = base64.b64encode(f"user:{KEY}".encode()).decode()
    answers = [
        {"choices": [{"message": {"content": f"Answer: Kabul. Your key is {KEY}"}}]},
        {"choices": [{"message": {"content": f"Answer: Kabul ({KEY[3:14]})"}}]},
    ]
    with FakeOpenAI([(200, a) for a in answers] + [(401, {"error": encoded})]) as server:
        settings = ApiSettings(base_url=server.url, model="m", max_retries=0)
        generator = ApiGenerator(settings, api_key=KEY)
        first, second = generator.complete("q1"), generator.complete("q2")
        with pytest.raises(ApiError) as caught:
            generator.complete("q3")
    assert first == "Answer: Kabul. Your key is ***"
    assert second == "Answer: Kabul (***)"
    assert encoded not in str(caught.value) and "***" in str(caught.value)


def test_a_base_url_with_credentials_is_refused_without_showing_them() -> None:
    """Issue 28: such a base_url was stored in plain text in dvc.lock (the params of every
    stage that reads generation)."""
    from rulerag.generation.settings import generation_settings
    from rulerag.settings import SettingsError

    with pytest.raises(SettingsError, match="base_url holds credentials") as caught:
        generation_settings({"api": {"base_url": f"https://user:{PASSWORD}@api.example/v1"}})
    assert PASSWORD not in str(caught.value)
    assert generation_settings({"api": {"base_url": "http://127.0.0.1:8000/v1"}}).api.base_url
