"""An OpenAI-compatible chat API as the generator (closed models, or a local vLLM/llama.cpp
server), with the paper's 3-shot prompt in place of fine-tuning.

* Endpoint: `POST {base_url}/chat/completions`, the OpenAI wire format that most servers
  speak. Plain `requests`, so the retry policy and what is logged stay in this file.
* Key: from the environment (`RULERAG_API_KEY`, then `OPENAI_API_KEY`: `key_env` may reorder
  or narrow these two, never name another variable, so a params file or a run conf cannot
  send, say, `AWS_SECRET_ACCESS_KEY` to a server of its choosing), or from an Airflow
  connection (its password; its host as the base URL when none is given). The key lives only
  in the request header: it is never logged, never put in an exception message (nor the parts
  of it a server echoes back), and `repr` masks it; URLs are shown without their credentials
  (`rulerag.redact`). params.yaml and MLflow hold the variable's name, never its value.
* Retries: 429, 5xx and connection errors are retried with exponential backoff (base * 2^n,
  capped, plus jitter), honouring `Retry-After`; other 4xx fail at once (a bad key or model
  name does not become right by waiting).
* Prompt: the closed models in the paper get three fixed F_G examples as demonstrations
  instead of fine-tuning. In the `paper` prompt style they are the paper's Table 10 prompt, one
  user message ("Answer the Final Query by referring to the three cases below." / `Case 1:` ...
  / `Final Query:`); in `legacy` each example is a user turn answered by an assistant turn
  (`PromptFormat.few_shot_messages`). Temperature 0 for reproducibility.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from rulerag.errors import InputError
from rulerag.generation.prompts import PromptFormat
from rulerag.redact import redact_secrets, redact_url

logger = logging.getLogger(__name__)

__all__ = [
    "ALLOWED_KEY_ENV",
    "DEFAULT_KEY_ENV",
    "ApiError",
    "ApiGenerator",
    "ApiKeyVariable",
    "check_key_env",
    "resolve_api_key",
]

#: the shortest run of the key's characters masked in a completion (`ApiGenerator._text`)
OUTPUT_ECHO_MIN = 8
#: the only environment variables an API key may come from (documented in params.yaml)
ApiKeyVariable = Literal["RULERAG_API_KEY", "OPENAI_API_KEY"]
ALLOWED_KEY_ENV: tuple[str, ...] = get_args(ApiKeyVariable)
DEFAULT_KEY_ENV: tuple[str, ...] = ALLOWED_KEY_ENV
_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class ApiError(InputError, RuntimeError):
    """The API could not answer (after retries, or a non-retryable status). Never holds the key.

    An `InputError`: a server that is down, a wrong URL, key or model name are the user's to
    fix, so a stage prints the one line and exits 2 (`run_stage`), with no traceback."""


def _airflow_connection(conn_id: str) -> Any:
    """An Airflow connection by id (Airflow 3's task SDK, else the classic hook)."""
    try:
        from airflow.sdk import BaseHook  # Airflow 3
    except ImportError:  # pragma: no cover - Airflow 2
        from airflow.hooks.base import BaseHook
    return BaseHook.get_connection(conn_id)


def check_key_env(env_names: Sequence[str]) -> None:
    """Refuse a variable outside `ALLOWED_KEY_ENV`: whatever it names is sent as the key."""
    if isinstance(env_names, str):
        raise ValueError(f"key_env must be a list of variable names, not {env_names!r}")
    other = [name for name in env_names if name not in ALLOWED_KEY_ENV]
    if other:
        raise ValueError(
            f"key_env may only name {', '.join(ALLOWED_KEY_ENV)}, not {', '.join(other)}: "
            "the variable's value is sent to the API server as its key"
        )


def resolve_api_key(
    env_names: Sequence[str] = DEFAULT_KEY_ENV,
    airflow_conn_id: str | None = None,
    *,
    environ: dict[str, str] | None = None,
) -> tuple[str | None, str | None]:
    """(key, base URL from the connection or None). Environment first, then the connection.

    The connection route is for Airflow workers, where secrets live in a secrets backend or an
    `AIRFLOW_CONN_<ID>` variable rather than in the task's environment.
    """
    check_key_env(env_names)
    environ = os.environ if environ is None else environ
    for name in env_names:
        value = environ.get(name, "").strip()
        if value:
            return value, None
    if airflow_conn_id:
        conn = _airflow_connection(airflow_conn_id)
        host = getattr(conn, "host", None) or None
        if host and not host.startswith(("http://", "https://")):
            schema = getattr(conn, "schema", None) or "https"
            port = getattr(conn, "port", None)
            host = f"{schema}://{host}" + (f":{port}" if port else "")
        return (getattr(conn, "password", None) or None), host
    return None, None


class ApiGenerator:
    """Prompts in, raw generations out, through an OpenAI-compatible chat endpoint."""

    def __init__(
        self,
        *,
        base_url: str | None,
        model: str,
        api_key: str | None = None,
        key_env: Sequence[str] = DEFAULT_KEY_ENV,
        airflow_conn_id: str | None = None,
        examples: Sequence[tuple[str, str]] = (),
        prompt_format: PromptFormat | None = None,
        system: str | None = None,
        max_tokens: int = 16,
        temperature: float = 0.0,
        stop: Sequence[str] = (),
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        concurrency: int = 1,
        sleep: Callable[[float], None] = time.sleep,
        session: Any = None,
    ) -> None:
        check_key_env(key_env)
        key, conn_url = (api_key, None) if api_key else resolve_api_key(key_env, airflow_conn_id)
        base_url = base_url or conn_url
        if not base_url:
            raise ValueError("the API generator needs a base_url (or an Airflow connection host)")
        if not key:
            raise ValueError(
                f"no API key: set one of {list(key_env)} or name an Airflow connection"
            )
        self._key = key
        self.base_url = base_url.rstrip("/")
        # what messages show: no credentials in the URL, nothing the server echoes of the key
        self._secrets = (key, urlsplit(self.base_url).password, urlsplit(self.base_url).username)
        self.shown_url = redact_url(self.base_url)
        self.model = model
        self.examples = [(str(p), str(a)) for p, a in examples]
        self.prompt_format = prompt_format or PromptFormat()
        self.system = system
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        #: OpenAI's `stop` strings (none: the answer runs to `max_tokens` or the end token)
        self.stop = [str(text) for text in stop]
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.concurrency = max(1, int(concurrency))
        self._sleep = sleep
        if session is None:
            import requests

            session = requests.Session()
        self._session = session
        self.name = f"api:{model}"
        self.requests_sent = 0
        self.retries = 0

    def __repr__(self) -> str:
        return f"ApiGenerator(base_url={self.shown_url!r}, model={self.model!r}, api_key='***')"

    def cache_identity(self, max_tokens: int | None = None) -> str:
        """What besides the prompt decides an answer, for an answer cache's key
        (`answer_cache.CachedLLM`): the endpoint without credentials, the model, the decoding
        settings and `stop` strings, and the system turn, prompt format and fixed examples that
        `messages` wraps around each prompt (their digest). `max_tokens` overrides the
        generator's own."""
        wrapping = {"format": asdict(self.prompt_format), "system": self.system}
        wrapping.update(examples=self.examples, stop=self.stop)
        digest = hashlib.sha256(json.dumps(wrapping, sort_keys=True).encode()).hexdigest()
        tokens = self.max_tokens if max_tokens is None else int(max_tokens)
        return (
            f"api:{self.model}@{self.shown_url}:max_tokens={tokens}:"
            f"temperature={self.temperature}:"
            f"messages={digest[:16]}"
        )

    def messages(self, prompt: str) -> list[dict[str, str]]:
        """The chat turns sent for one prompt: the fixed examples, then the prompt."""
        return self.prompt_format.few_shot_messages(self.examples, prompt, system=self.system)

    def generate(self, prompts: Sequence[str]) -> list[str]:
        """One completion per prompt, in order (`concurrency` requests in flight)."""
        if self.concurrency == 1:
            return [self.complete(prompt) for prompt in prompts]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(self.complete, prompts))

    def complete(self, prompt: str) -> str:
        """One chat completion's text, retrying transient failures."""
        import requests

        url = f"{self.base_url}/chat/completions"
        shown = f"{self.shown_url}/chat/completions"
        body = {
            "model": self.model,
            "messages": self.messages(prompt),
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            **({"stop": self.stop} if self.stop else {}),
        }
        headers = {"Authorization": f"Bearer {self._key}", "Content-Type": "application/json"}
        last = "no attempt made"
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.retries += 1
            self.requests_sent += 1
            try:
                response = self._session.post(url, json=body, headers=headers, timeout=self.timeout)
            except requests.RequestException as exc:
                # The exception text names the URL, never the headers.
                last = f"{type(exc).__name__}"
                retry_after = None
            else:
                if response.status_code == 200:
                    return self._text(response)
                last = f"HTTP {response.status_code}"
                if response.status_code not in _RETRY_STATUS:
                    detail = self._redact(self._error_text(response))
                    raise ApiError(f"{shown}: {last}: {detail}")
                retry_after = self._retry_after(response)
            if attempt == self.max_retries:
                break
            delay = self._delay(attempt, retry_after)
            logger.warning(
                "%s: %s; retry %d/%d in %.1fs",
                shown,
                last,
                attempt + 1,
                self.max_retries,
                delay,
            )
            self._sleep(delay)
        raise ApiError(f"{shown}: {last} after {self.max_retries + 1} attempts")

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.max_backoff, self.backoff * (2**attempt))
        delay += random.uniform(0, 0.1 * delay)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff))
        return delay

    @staticmethod
    def _retry_after(response: Any) -> float | None:
        value = response.headers.get("Retry-After")
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None  # an HTTP date: fall back to our own backoff

    def _redact(self, text: str) -> str:
        """Servers echo the key, or its head and tail (`sk-abc1*****wxyz`), in error bodies;
        never pass any of it on."""
        return redact_secrets(text, self._secrets)

    @staticmethod
    def _error_text(response: Any) -> str:
        try:
            error = response.json().get("error")
            message = error.get("message") if isinstance(error, dict) else error
            return str(message)[:300]
        except Exception:
            return response.text[:300]

    def _text(self, response: Any) -> str:
        data = response.json()
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as err:
            raise ApiError(f"unexpected response shape: {self._redact(str(data)[:300])}") from err
        # a server that echoes the key in its answer must not get it into predictions and
        # MLflow: the key, its base64 forms and runs of 8+ of its characters are masked (not 4,
        # as in errors: an answer may share four letters with the key by chance)
        return redact_secrets(content or "", self._secrets, min_run=OUTPUT_ECHO_MIN)
