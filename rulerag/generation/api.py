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
* Retries: 429, 5xx, connection errors, a request past its deadline and a 200 whose body is
  not JSON (a proxy's error page) are retried with exponential backoff (base * 2^n, capped,
  plus jitter), honouring `Retry-After`; other 4xx fail at once (a bad key or model name does
  not become right by waiting), and so does a 200 without an answer's text (`content: null`:
  a refusal or a tool call, which an empty answer scored as wrong would hide).
* Deadline: `timeout` bounds each request as a whole, from its first byte sent to its last
  byte received. requests' own timeout bounds each socket read only, so a server trickling a
  byte a second held a request (and the stage) indefinitely; here a timer shuts the request's
  socket at the deadline (`_Flight`), whatever phase it is in (headers or body), and the
  request fails as a timeout naming the endpoint and the deadline.
* Stopping: `generate` with `concurrency` > 1 runs the requests in worker threads. When the
  calling thread is interrupted (SIGTERM raised as `StageTerminated` by `rulerag.tracking`,
  Ctrl-C, or an `ApiError` from one request), the pending requests are cancelled, the ones
  in flight are cut off (their sockets shut, their backoff sleep woken) and the pool is left
  without waiting for them, so the stage ends at once instead of after its slowest request.
* Prompt: the closed models in the paper get three fixed F_G examples as demonstrations
  instead of fine-tuning. In the `paper` prompt style they are the paper's Table 10 prompt, one
  user message ("Answer the Final Query by referring to the three cases below." / `Case 1:` ...
  / `Final Query:`); in `legacy` each example is a user turn answered by an assistant turn
  (`PromptFormat.few_shot_messages`). Temperature 0 for reproducibility.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.client
import json
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args
from urllib.parse import urlsplit

from rulerag.errors import InputError
from rulerag.generation.prompts import PromptFormat
from rulerag.redact import redact_secrets, redact_url

if TYPE_CHECKING:  # the settings module imports this one (its key variables)
    from rulerag.generation.settings import ApiSettings

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
#: the most bytes one read of a response body asks for (it returns what has arrived)
_READ_SIZE = 65536
#: how much of a body that is not JSON an error message shows
_EXCERPT_CHARS = 120


class ApiError(InputError, RuntimeError):
    """The API could not answer (after retries, or a non-retryable status). Never holds the key.

    An `InputError`: a server that is down, a wrong URL, key or model name are the user's to
    fix, so a stage prints the one line and exits 2 (`run_stage`), with no traceback."""


class _Retryable(Exception):  # noqa: N818 - a control-flow signal inside `_complete`
    """A failure of one attempt that another attempt may not meet (a dropped connection, the
    deadline, a proxy's page instead of JSON); its text is what the final `ApiError` says."""


class _Abandoned(Exception):  # noqa: N818 - a control-flow signal inside `_complete`
    """The `generate` call this request belongs to was given up (`_Stop`): no answer is
    wanted any more, so the worker ends instead of retrying."""


class _Flight:
    """One request on the wire and the connection carrying it, so that another thread (its
    deadline's timer, or `_Stop.set`) can cut it off by shutting that connection's socket:
    that wakes a read blocked in any phase of the request (a connect is bounded by the socket
    timeout only)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: Any = None
        self._done = False
        #: why the request was cut off: "deadline" or "stopped" (None: it was not)
        self.reason: str | None = None

    def attach(self, conn: Any) -> None:
        """`conn` now carries this request (called from the connection, in the request's
        thread); cut it off at once if that was asked for before it was known."""
        with self._lock:
            self._conn = conn
            conn._rulerag_flight = self
            if self.reason is not None:
                _shutdown(conn)

    def expire(self, reason: str) -> None:
        """Cut the request off (from any thread), unless it has finished: its connection may
        be back in the pool, carrying another thread's request by now."""
        with self._lock:
            if self._done or self.reason is not None:
                return
            self.reason = reason
            conn = self._conn
            if conn is not None and getattr(conn, "_rulerag_flight", None) is self:
                _shutdown(conn)

    def finish(self) -> None:
        with self._lock:
            self._done = True
            if self._conn is not None and getattr(self._conn, "_rulerag_flight", None) is self:
                self._conn._rulerag_flight = None


def _shutdown(conn: Any) -> None:
    """Shut a connection's socket for both directions: a thread blocked reading it wakes at
    once (closing the socket would not wake it). The plain socket's own method, also for a TLS
    socket, whose `shutdown` would drop its TLS state under the reading thread's feet."""
    sock = getattr(conn, "sock", None)
    while sock is not None and not isinstance(sock, socket.socket):
        sock = getattr(sock, "socket", None)  # urllib3's SSLTransport (TLS through a proxy)
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed, or never connected
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


#: the request each thread has on the wire (`_Flight`), for the connection that carries it
_ACTIVE = threading.local()


def _attach_active(conn: Any) -> None:
    flight = getattr(_ACTIVE, "flight", None)
    if flight is not None:
        flight.attach(conn)


class _Stop:
    """What one `generate` call's requests share: an event set when the call is given up,
    and the requests on the wire, cut off when it is set."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._flights: set[_Flight] = set()

    def add(self, flight: _Flight) -> None:
        with self._lock:
            if self.event.is_set():
                raise _Abandoned
            self._flights.add(flight)

    def discard(self, flight: _Flight) -> None:
        with self._lock:
            self._flights.discard(flight)

    def set(self) -> None:
        with self._lock:
            self.event.set()
            flights = list(self._flights)
        for flight in flights:
            flight.expire("stopped")


@dataclass(frozen=True)
class _Reply:
    """A response read whole within the deadline."""

    status: int
    headers: Mapping[str, str]
    content: bytes


def _tracked_session() -> Any:
    """A requests session whose connections tell the request on the wire in their thread
    (`_ACTIVE`) that they carry it, so that its deadline can cut it off (`_Flight`)."""
    import requests

    session = requests.Session()
    adapter = _tracked_adapter()
    session.mount("https://", adapter())
    session.mount("http://", adapter())
    return session


@functools.cache
def _tracked_adapter() -> type:
    """requests' HTTP adapter, whose urllib3 pools make connections that attach themselves
    to the thread's request (`_attach_active`) when they connect and when they send a request
    (a kept-alive connection carries many). Pools of other kinds (a SOCKS proxy's) are left
    as they are: their requests still end at the deadline, after the socket read under way
    (each bounded by `timeout`). Built on first use: requests is imported only then."""
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class Tracked:  # put before urllib3's connection class in the bases
        def connect(self) -> None:
            _attach_active(self)
            super().connect()  # type: ignore[misc]
            _attach_active(self)  # cut off while connecting: now there is a socket to shut

        def request(self, *args: Any, **kwargs: Any) -> None:
            _attach_active(self)
            super().request(*args, **kwargs)  # type: ignore[misc]

    class TrackedHTTPConnection(Tracked, HTTPConnection):
        pass

    class TrackedHTTPSConnection(Tracked, HTTPSConnection):
        pass

    class TrackedHTTPPool(HTTPConnectionPool):
        ConnectionCls = TrackedHTTPConnection

    class TrackedHTTPSPool(HTTPSConnectionPool):
        ConnectionCls = TrackedHTTPSConnection

    stock: dict[type, type] = {
        HTTPConnectionPool: TrackedHTTPPool,
        HTTPSConnectionPool: TrackedHTTPSPool,
    }

    def track(manager: Any) -> Any:
        # a new dict: urllib3 shares its module-level one between all pool managers
        manager.pool_classes_by_scheme = {
            scheme: stock.get(cls, cls) for scheme, cls in manager.pool_classes_by_scheme.items()
        }
        return manager

    class TrackedAdapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            track(self.poolmanager)

        def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
            return track(super().proxy_manager_for(proxy, **kwargs))

    return TrackedAdapter


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
        settings: ApiSettings,
        *,
        api_key: str | None = None,
        examples: Sequence[tuple[str, str]] = (),
        prompt_format: PromptFormat | None = None,
        system: str | None = None,
        max_tokens: int = 16,
        temperature: float = 0.0,
        stop: Sequence[str] = (),
        max_backoff: float = 30.0,
        sleep: Callable[[float], None] | None = None,
        session: Any = None,
    ) -> None:
        """`settings`: `generation.api` (endpoint, model, where the key comes from, deadline,
        retries, backoff, concurrency; its `shots` are the caller's, as `examples`);
        `api_key`: a key already at hand, in place of `settings.key_env` and the connection."""
        key_env, model = settings.key_env, settings.model
        check_key_env(key_env)
        key, conn_url = (
            (api_key, None) if api_key else resolve_api_key(key_env, settings.airflow_conn_id)
        )
        base_url = settings.base_url or conn_url
        # InputErrors (ValueErrors): the user's to fix, so a stage says it in one line
        if not base_url:
            raise InputError(
                "the API generator needs a base_url: set generation.api.base_url (or "
                "generation.api.airflow_conn_id, a connection whose host is the URL)"
            )
        if not key:
            todo = (
                f"set {' or '.join(key_env)} (generation.api.key_env)"
                if key_env
                else f"name {' or '.join(ALLOWED_KEY_ENV)} in generation.api.key_env and set it"
            )
            raise InputError(
                f"no API key for {redact_url(base_url)}: {todo}, or name an Airflow connection "
                "that holds it (generation.api.airflow_conn_id)"
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
        self.timeout = float(settings.timeout)
        self.max_retries = int(settings.max_retries)
        self.backoff = float(settings.backoff)
        self.max_backoff = float(max_backoff)
        self.concurrency = max(1, int(settings.concurrency))
        #: the backoff's sleep (None: a wait that ends early when the call is given up)
        self._sleep = sleep
        self._session = _tracked_session() if session is None else session
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
        """One completion per prompt, in order (`concurrency` requests in flight).

        Whatever interrupts the calling thread (SIGTERM as `StageTerminated`, Ctrl-C, or a
        request's `ApiError`, raised as soon as it happens) gives the whole call up at once:
        pending requests are cancelled, those in flight cut off, and the worker threads are
        not waited for (they end within moments, so the process can exit); a `with
        ThreadPoolExecutor()` would wait for every request in flight, however slowly its
        server trickles."""
        stop = _Stop()
        if self.concurrency == 1:
            return [self._complete(prompt, stop) for prompt in prompts]
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="rulerag-api")
        try:
            futures = [pool.submit(self._complete, prompt, stop) for prompt in prompts]
            # the first failure as soon as it happens, not after the requests before it in order
            done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            if pending:
                next(f for f in futures if f in done and f.exception() is not None).result()
            return [future.result() for future in futures]
        except BaseException:
            stop.set()
            raise
        finally:
            pool.shutdown(wait=not stop.event.is_set(), cancel_futures=True)

    def complete(self, prompt: str) -> str:
        """One chat completion's text, retrying transient failures."""
        return self._complete(prompt, _Stop())

    def _complete(self, prompt: str, stop: _Stop) -> str:
        """`complete`, given up (`_Abandoned`) once `stop` is set."""
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
            if stop.event.is_set():
                raise _Abandoned
            if attempt:
                self.retries += 1
            self.requests_sent += 1
            retry_after = None
            try:
                reply = self._post(url, body, headers, stop)
                if reply.status == 200:
                    return self._text(reply, shown)
            except _Retryable as exc:
                last = str(exc)
            else:
                last = f"HTTP {reply.status}"
                if reply.status not in _RETRY_STATUS:
                    detail = self._redact(self._error_text(reply))
                    raise ApiError(f"{shown}: {last}: {detail}")
                retry_after = self._retry_after(reply)
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
            if self._sleep is not None:
                self._sleep(delay)
            elif stop.event.wait(delay):
                raise _Abandoned
        raise ApiError(f"{shown}: {last} after {self.max_retries + 1} attempts")

    def _post(self, url: str, body: dict[str, Any], headers: dict[str, str], stop: _Stop) -> _Reply:
        """One POST, its response read whole before the deadline (`timeout` from now), else
        `_Retryable`: a timer cuts the request off at the deadline (`_Flight`), and the body
        is read as it arrives, the deadline checked after each piece. `_Abandoned` when `stop`
        is set meanwhile. No exception's text is passed on (one may hold what was sent)."""
        import requests
        import urllib3

        flight = _Flight()
        stop.add(flight)
        deadline = time.monotonic() + self.timeout
        timer = threading.Timer(self.timeout, flight.expire, args=("deadline",))
        timer.daemon = True
        timer.start()
        _ACTIVE.flight = flight
        response = None
        try:
            response = self._session.post(
                url, json=body, headers=headers, timeout=self.timeout, stream=True
            )
            raw = response.raw
            read = getattr(raw, "read1", None)  # what has arrived, not a full buffer's worth
            chunks = []
            while True:
                if flight.reason is None and time.monotonic() >= deadline:
                    flight.expire("deadline")
                if flight.reason is not None:
                    raise ConnectionAbortedError(flight.reason)
                chunk = read(_READ_SIZE, decode_content=True) if read else raw.read(_READ_SIZE)
                if not chunk:
                    break
                chunks.append(chunk)
            return _Reply(response.status_code, response.headers, b"".join(chunks))
        except (
            requests.RequestException,
            urllib3.exceptions.HTTPError,
            http.client.HTTPException,
            OSError,
        ) as exc:
            if flight.reason == "stopped" or stop.event.is_set():
                raise _Abandoned from None
            timeouts = (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)
            if flight.reason == "deadline" or isinstance(exc, timeouts):
                raise _Retryable(
                    f"timed out: no complete answer within the {self.timeout:g} s deadline "
                    "(generation.api.timeout)"
                ) from None
            raise _Retryable(type(exc).__name__) from None
        finally:
            _ACTIVE.flight = None
            timer.cancel()
            flight.finish()
            stop.discard(flight)
            if response is not None:
                response.close()  # a body read whole has given its connection back already

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.max_backoff, self.backoff * (2**attempt))
        delay += random.uniform(0, 0.1 * delay)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff))
        return delay

    @staticmethod
    def _retry_after(response: _Reply) -> float | None:
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
    def _error_text(response: _Reply) -> str:
        try:
            error = _json(response).get("error")
            message = error.get("message") if isinstance(error, dict) else error
            return str(message)[:300]
        except Exception:
            return response.content[:300].decode("utf-8", errors="replace")

    def _text(self, response: _Reply, shown: str) -> str:
        """The answer's text. A body that is not JSON (a proxy's HTML page, a body cut or
        mangled on the way) is `_Retryable`, shown by its content type and first characters;
        JSON of another shape, or an answer without text, is an `ApiError`."""
        try:
            data = _json(response)
        except (ValueError, LookupError):  # JSON or its text encoding (or charset) is wrong
            kind = response.headers.get("Content-Type") or "no Content-Type"
            raise _Retryable(
                f"HTTP {response.status} with a body that is not JSON ({kind}, "
                f"{len(response.content)} bytes): {self._excerpt(response.content)}"
            ) from None
        try:
            choice = data["choices"][0]
            content = choice["message"]["content"]
        except (KeyError, IndexError, TypeError) as err:
            raise ApiError(
                f"{shown}: unexpected response shape: {self._redact(str(data)[:300])}"
            ) from err
        if content is None:
            message = choice["message"]
            refusal = message.get("refusal") if isinstance(message, dict) else None
            said = f"; refusal: {self._excerpt(str(refusal).encode())}" if refusal else ""
            raise ApiError(
                f"{shown}: the answer has no text (message.content is null, finish_reason "
                f"{choice.get('finish_reason')!r}{said}): the model refused, was filtered or "
                "called a tool; scoring it as an empty answer would hide that, so check the "
                "model and its settings (generation.api.model) or leave this row out"
            )
        if not isinstance(content, str):
            raise ApiError(
                f"{shown}: message.content is {type(content).__name__}, not text: "
                f"{self._redact(str(content)[:300])}"
            )
        # a server that echoes the key in its answer must not get it into predictions and
        # MLflow: the key, its base64 forms and runs of 8+ of its characters are masked (not 4,
        # as in errors: an answer may share four letters with the key by chance)
        return redact_secrets(content, self._secrets, min_run=OUTPUT_ECHO_MIN)

    def _excerpt(self, content: bytes) -> str:
        """The start of a body, quoted, for a one-line message: whitespace runs as one space,
        bytes that are not UTF-8 and other unprintable characters escaped (`\\xff`), the key
        and URL credentials masked."""
        if not content:
            return "an empty body"
        text = " ".join(content[: 4 * _EXCERPT_CHARS].decode("utf-8", "backslashreplace").split())
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
        cut = text[:_EXCERPT_CHARS] + ("..." if len(text) > _EXCERPT_CHARS else "")
        return f"'{self._redact(cut)}'"


def _json(response: _Reply) -> Any:
    """A body as JSON: decoded by the charset its Content-Type names, else as JSON's own
    UTF-8 (or UTF-16/32, which `json.loads` recognises), as `requests`' `.json()` reads it."""
    charset = None
    for param in (response.headers.get("Content-Type") or "").split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.lower() == "charset" and value:
            charset = value.strip("\"' ")
    return json.loads(response.content.decode(charset) if charset else response.content)
