"""`make serve`: the registered RuleRAG model behind a page and a JSON API (FastAPI).

* `GET /` is the page: a box to type a question, a list of RuleQA test queries to pick, and
  the answer laid out to read (the linked query and how each part matched, the answer beside
  the gold, the rules, the documents found with and without rules side by side, the rules'
  candidates with their grounding facts). Rendered on the server from a Jinja2 template, with
  no script and nothing fetched from elsewhere; a form GET, so an answer has a URL.
* `POST /invocations` speaks `mlflow models serve`'s JSON (`protocol.read_invocation`):
  `{"inputs": [{"question": "..."}]}` in, `{"predictions": [...]}` out.
* `GET /ping`, `GET /health` (200 once the model is loaded: the app exists only then) and
  `GET /version`, as MLflow's server has them; `GET /examples`, the test queries the page
  offers.

Every failure is one line, never a traceback: a request to fix gets its 4xx (400 bad input,
413 too large, 415 not JSON) with a message naming the field; a full line of waiting requests
503 with Retry-After, a passed deadline 504 (`gate.Gate`: one answer runs at a time); a fault
of ours 500, its traceback in the server's log only. The JSON errors have MLflow's form,
`{"error_code": "...", "message": "..."}`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import jinja2
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.templating import Jinja2Templates

from rulerag.errors import InputError
from rulerag.redact import redact_url
from rulerag.serving.gate import Busy, DeadlineExceeded, Gate
from rulerag.serving.page import answer_view
from rulerag.serving.protocol import (
    RequestError,
    ServedModel,
    check_input,
    decode_json,
    jsonable,
    read_invocation,
)
from rulerag.serving.settings import ServeSettings

__all__ = ["TEMPLATES", "create_app", "read_body"]

log = logging.getLogger(__name__)
TEMPLATES = Path(__file__).resolve().with_name("templates")
#: MLflow error codes its scoring server answers with 400: the client's input is wrong
_BAD_INPUT_CODES = frozenset({"INVALID_PARAMETER_VALUE", "BAD_REQUEST"})
#: the longest message a client gets (a model's message is one line; this keeps it one)
_MAX_MESSAGE = 2000


@dataclass(frozen=True)
class Failure:
    """A request that gets no answer: its status, MLflow's error code and the one line."""

    status: int
    code: str
    message: str
    headers: Mapping[str, str] | None = None

    def json(self) -> JSONResponse:
        return JSONResponse(
            {"error_code": self.code, "message": self.message},
            status_code=self.status,
            headers=dict(self.headers or {}),
        )


def create_app(model: ServedModel, settings: ServeSettings) -> FastAPI:
    """The service around a loaded model (the module doc); `serve.queue`, `serve.timeout`,
    `serve.max_request_bytes` and `serve.max_questions` bound it."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.gate = Gate(settings.queue, settings.timeout)  # its lock: this loop's
        yield

    # no /docs or /redoc: FastAPI's pages load their scripts from a CDN, which a closed
    # network cannot reach (docs/operations.md describes the API instead)
    app = FastAPI(
        title="RuleRAG", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    templates = Jinja2Templates(env=_environment())
    versions = _versions()
    offered = [_example(e) for e in model.examples]  # the page's list, built once

    async def answer(
        request: Request, inputs: list[dict[str, Any]], deadline: float
    ) -> list[dict[str, Any]]:
        """The model's answers to `inputs`, one at a time through the gate."""
        gate: Gate = request.app.state.gate
        outputs = await gate.run(model.predict, inputs, deadline=deadline, questions=len(inputs))
        if not isinstance(outputs, list) or len(outputs) != len(inputs):
            got = len(outputs) if isinstance(outputs, list) else type(outputs).__name__
            raise TypeError(f"the model answered {got} for {len(inputs)} inputs")
        return [jsonable(output) for output in outputs]

    @app.get("/ping")
    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        gate: Gate = request.app.state.gate
        return JSONResponse({"status": "ok", "running": gate.running, "waiting": gate.waiting})

    @app.get("/version")
    async def version() -> JSONResponse:
        return JSONResponse({"model": model.title, **versions})

    @app.get("/examples")
    async def examples() -> JSONResponse:
        """The RuleQA test queries the page offers, for clients (`{"qid": ...}` asks one)."""
        return JSONResponse({"examples": offered})

    @app.post("/invocations")
    async def invocations(request: Request) -> Response:
        deadline = request.app.state.gate.deadline()  # from arrival: waiting and running
        try:
            _check_content_type(request.headers.get("content-type"))
            body = await read_body(request, settings.max_request_bytes)
            inputs = read_invocation(decode_json(body), settings.max_questions)
            outputs = await answer(request, inputs, deadline)
        except Exception as err:  # every failure is one line (the module doc)
            return failure(err).json()
        return JSONResponse({"predictions": outputs})

    @app.get("/", response_class=HTMLResponse)
    async def page(request: Request) -> Response:
        deadline = request.app.state.gate.deadline()
        query = request.query_params
        question = query.get("question", "").strip()
        qid = query.get("qid", "").strip()
        context: dict[str, Any] = {
            "title": model.title,
            "examples": offered,
            "question": question,
            "qid": qid,
            "error": None,
            "result": None,
        }
        status = 200
        try:
            if len(request.url.query.encode()) > settings.max_request_bytes:
                raise RequestError(
                    f"the question is over {settings.max_request_bytes:,} bytes "
                    "(serve.max_request_bytes)",
                    413,
                    "REQUEST_TOO_LARGE",
                )
            if question and qid:
                raise RequestError("ask a question or pick a test query, not both")
            given = {"question": question} if question else {"qid": qid} if qid else None
            if given is not None:
                (output,) = await answer(request, [check_input(given, "the question")], deadline)
                context["result"] = answer_view(output)
        except Exception as err:  # shown on the page, one line
            problem = failure(err)
            context["error"], status = problem.message, problem.status
            headers = dict(problem.headers or {})
        else:
            headers = {}
        return templates.TemplateResponse(
            request, "index.html", context, status_code=status, headers=headers
        )

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> Response:
        """What no handler caught (a bug): one line, the traceback to the log."""
        return failure(err).json()

    return app


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, at most `limit` bytes: a declared Content-Length over it is refused
    before a byte is read, and a body sent without one (chunked) is counted as it arrives and
    refused at the first chunk past the limit, so a large body is never held whole."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise RequestError(f"Content-Length {declared[:40]!r} is not a number of bytes")
        if int(declared) > limit:
            raise _too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit, more=True)
        chunks.append(chunk)
    return b"".join(chunks)


def failure(err: Exception) -> Failure:
    """How a request that raised `err` is answered (the module doc)."""
    if isinstance(err, RequestError):
        return Failure(err.status, err.code, _one_line(str(err)))
    if isinstance(err, InputError):
        return Failure(400, "INVALID_PARAMETER_VALUE", _one_line(str(err)))
    mlflow_message = _mlflow_bad_input(err)
    if mlflow_message is not None:
        return Failure(400, "INVALID_PARAMETER_VALUE", _one_line(mlflow_message))
    if isinstance(err, Busy):
        return Failure(
            503, "TEMPORARILY_UNAVAILABLE", str(err), {"Retry-After": str(err.retry_after)}
        )
    if isinstance(err, DeadlineExceeded):
        return Failure(504, "DEADLINE_EXCEEDED", str(err))
    log.error("a request failed", exc_info=err)
    return Failure(
        500,
        "INTERNAL_ERROR",
        f"the service failed on this request ({type(err).__name__}); the server's log has "
        "the details",
    )


def _mlflow_bad_input(err: Exception) -> str | None:
    """The message of an MlflowException that says the input is wrong, else None. MLflow is
    not imported for this: a model that raises one has imported it already."""
    module = sys.modules.get("mlflow.exceptions")
    if module is None or not isinstance(err, module.MlflowException):
        return None
    return str(err.message) if err.error_code in _BAD_INPUT_CODES else None


def _check_content_type(value: str | None) -> None:
    """JSON in UTF-8, or no Content-Type at all (taken as JSON), as MLflow's server reads it."""
    if value is None:
        return
    mime, *parameters = (part.strip() for part in value.split(";"))
    charset = "utf-8"
    for parameter in parameters:
        key, _, found = parameter.partition("=")
        if key.strip().lower() == "charset":
            charset = found.strip().strip('"').lower()
    if mime.lower() != "application/json":
        raise RequestError(
            f"Content-Type {value[:80]!r}: send JSON with Content-Type: application/json",
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        )
    if charset not in ("utf-8", "utf8"):
        raise RequestError(
            f"charset {charset[:40]!r}: send UTF-8 JSON", 415, "UNSUPPORTED_MEDIA_TYPE"
        )


def _too_large(size: int, limit: int, more: bool = False) -> RequestError:
    said = f"over {limit:,}" if more else f"{size:,}"
    return RequestError(
        f"the body is {said} bytes; at most {limit:,} (serve.max_request_bytes): send fewer "
        "questions per request",
        413,
        "REQUEST_TOO_LARGE",
    )


def _one_line(message: str) -> str:
    """A message as one line of bounded length, credentials in URLs masked."""
    line = " ".join(message.split())
    if len(line) > _MAX_MESSAGE:
        line = line[: _MAX_MESSAGE - 1] + "…"
    return redact_url(line)


def _example(example: Mapping[str, Any]) -> dict[str, str]:
    return {"qid": str(example.get("qid", "")), "query": str(example.get("query", ""))}


def _environment() -> jinja2.Environment:
    """The page's templates, every value escaped, a misspelt name an error."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _versions() -> dict[str, str]:
    found = {}
    for name in ("rulerag", "mlflow", "fastapi"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "unknown"
    return found
