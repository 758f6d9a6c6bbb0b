"""rulerag/serving/app.py: the page and the JSON API around a fake model
(tests/support/served_model.py): MLflow's request formats, every bad request refused with its
4xx and a line that says what to fix, the line and the deadline (503, 504), and the page's
answer laid out (documents side by side, every name escaped)."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rulerag.errors import InputError
from rulerag.serving.app import create_app
from rulerag.serving.protocol import jsonable, read_invocation
from rulerag.serving.settings import ServeSettings, serve_settings
from tests.support.served_model import FakeServedModel, serving

QUESTION = "What did Aam Aadmi Party accuse on 2014-12-18?"


def settings(**values: Any) -> ServeSettings:
    return serve_settings({"max_questions": 3, "max_request_bytes": 2048, **values})


@pytest.fixture
def model() -> FakeServedModel:
    return FakeServedModel()


@pytest.fixture
def client(model: FakeServedModel) -> Iterator[TestClient]:
    with TestClient(create_app(model, settings())) as test_client:
        yield test_client


def post(client: TestClient, body: Any, **headers: str) -> Any:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(
        "/invocations", content=content, headers={"content-type": "application/json", **headers}
    )


# ------------------------------------------------------------------------------------------
# the JSON API: MLflow's formats
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"dataframe_records": [{"question": QUESTION}, {"qid": "test-00002"}]},
        {  # a DataFrame of mixed forms: None where a form has no such key
            "dataframe_split": {
                "columns": ["question", "qid"],
                "data": [[QUESTION, None], [None, "test-00002"]],
                "index": [0, 1],
            }
        },
        {"inputs": [{"question": QUESTION}, {"qid": "test-00002"}]},
        {"instances": [{"question": QUESTION}, {"qid": "test-00002"}]},
        {"inputs": {"question": [QUESTION, None], "qid": [None, "test-00002"]}},
        {"inputs": [{"question": QUESTION}, {"qid": "test-00002"}], "params": {}},
    ],
    ids=["records", "split", "inputs", "instances", "columns", "empty-params"],
)
def test_every_mlflow_format_asks_the_same_questions(
    client: TestClient, model: FakeServedModel, body: dict[str, Any]
) -> None:
    response = post(client, body)
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    assert model.calls == [[{"question": QUESTION}, {"qid": "test-00002"}]]
    assert [p["answer"] for p in predictions] == ["Ravi Shankar Prasad", "Aam Aadmi Party"]
    assert predictions[0]["qid"] == "test-00001" and predictions[0]["correct"] is True
    assert set(predictions[0]["documents"]) == {"with_rules", "without_rules"}


def test_structured_input_and_no_content_type_are_taken(client: TestClient) -> None:
    given = {"subject": "Aam Aadmi Party", "relation": "Accuse", "time": "2014-12-18"}
    response = client.post("/invocations", content=json.dumps({"inputs": [given]}).encode())
    assert response.status_code == 200, response.text
    assert response.json()["predictions"][0]["input"] == given


def test_ping_health_version_and_examples(client: TestClient) -> None:
    for path in ("/ping", "/health"):
        assert client.get(path).json() == {"status": "ok", "running": False, "waiting": 0}
    version = client.get("/version").json()
    assert version["model"].startswith("Fake RuleRAG") and version["mlflow"]
    examples = client.get("/examples").json()["examples"]
    assert examples[0] == {
        "qid": "test-00001",
        "query": "Time 2014-12-18 what does Aam Aadmi Party Accuse ?",
    }


# ------------------------------------------------------------------------------------------
# bad requests: a 4xx and one line that says what to fix
# ------------------------------------------------------------------------------------------

BAD = [
    (b"", 400, "empty body"),
    (b"  \n", 400, "empty body"),
    (b'{"inputs": [', 400, "not JSON"),
    (b'{"inputs": [{"question": NaN}]}', 400, "NaN is not JSON"),
    (b'{"inputs": [{"question": "caf\xe9"}]}', 400, "not UTF-8"),
    (b"[]", 400, "not a list"),
    (b"{}", 400, "none of them"),
    (b'{"inputs": [], "instances": []}', 400, "both instances and inputs"),
    (b'{"inputs": [{"question": "a"}], "extra": 1}', 400, "unknown field 'extra'"),
    (b'{"inputs": [{"question": "a"}], "params": {"k": 1}}', 400, "takes no parameters"),
    (b'{"inputs": []}', 400, "holds no input"),
    (b'{"inputs": "a question"}', 400, "inputs must be a list"),
    (b'{"dataframe_records": {"question": "a"}}', 400, "must be a list of objects"),
    (b'{"inputs": [{"subjcet": "Aam Aadmi Party"}]}', 400, "input 1: unknown field 'subjcet'"),
    (b'{"inputs": [{"question": "a"}, "b"]}', 400, "input 2: expected an object"),
    (b'{"inputs": [{"question": ["a"]}]}', 400, "input 1: question must be text, not list"),
    (b'{"inputs": [{"qid": true}]}', 400, "qid must be text, not boolean"),
    (b'{"inputs": [{}]}', 400, "input 1: an empty object"),
    (b'{"inputs": {"question": ["a"], "qid": "b"}}', 400, "as a list of values"),
    (b'{"inputs": {"question": ["a", "b"], "qid": ["c"]}}', 400, "differ in length"),
    (b'{"dataframe_split": {"columns": ["question"], "data": [["a", "b"]]}}', 400, "data[0]"),
    (b'{"dataframe_split": {"columns": ["q", "q"], "data": []}}', 400, "names a field twice"),
    (b'{"dataframe_split": {"data": []}}', 400, "dataframe_split.columns"),
    (b'{"dataframe_split": {"columns": [], "data": [], "rows": 1}}', 400, "unknown field 'rows'"),
    (b'{"inputs": [{"qid": "a"}, {"qid": "b"}, {"qid": "c"}, {"qid": "d"}]}', 400, "at most 3"),
    # the model's own refusals (InputError): its message, 400
    (b'{"inputs": [{"question": "Who is Nobody?"}]}', 400, "input 1: no entity of the KG"),
    (b'{"inputs": [{"qid": "test-99999"}]}', 400, "'test-99999' is no RuleQA test query"),
]


@pytest.mark.parametrize(("body", "status", "says"), BAD, ids=[b[2] for b in BAD])
def test_a_bad_request_gets_its_status_and_a_line_saying_what_to_fix(
    client: TestClient, body: bytes, status: int, says: str
) -> None:
    response = post(client, body)
    assert response.status_code == status, response.text
    answer = response.json()
    assert says in answer["message"]
    assert "\n" not in answer["message"] and "Traceback" not in response.text
    assert answer["error_code"] in {"BAD_REQUEST", "INVALID_PARAMETER_VALUE"}


@pytest.mark.parametrize(
    ("content_type", "says"),
    [("text/csv", "application/json"), ("application/json; charset=latin-1", "UTF-8")],
)
def test_a_body_that_is_not_json_in_utf8_is_refused_by_its_content_type(
    client: TestClient, content_type: str, says: str
) -> None:
    response = post(client, {"inputs": [{"question": QUESTION}]}, **{"content-type": content_type})
    assert response.status_code == 415
    assert says in response.json()["message"]


def test_a_large_body_is_refused_by_its_declared_length_unread(client: TestClient) -> None:
    response = post(client, b"x" * 100_000)
    assert response.status_code == 413
    assert "at most 2,048 (serve.max_request_bytes)" in response.json()["message"]


def test_a_large_body_without_a_length_is_refused(client: TestClient) -> None:
    chunks = (b" " * 1000 for _ in range(100))
    response = client.post(
        "/invocations", content=chunks, headers={"content-type": "application/json"}
    )
    assert response.status_code == 413, response.text
    assert "over 2,048 bytes" in response.json()["message"]


def raw_exchange(url: str, head: bytes, chunks: list[bytes]) -> bytes:
    """What a real server answers to `head` and `chunks` sent on a socket, with the body never
    finished: read until the server closes or 5 s pass."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(head)
        for chunk in chunks:
            conn.sendall(chunk)
        answer = b""
        with contextlib.suppress(TimeoutError):
            while piece := conn.recv(65536):
                answer += piece
                if b"\r\n\r\n" in answer and answer.rstrip().endswith(b"}"):
                    break
    return answer


def test_a_real_server_refuses_a_large_body_before_it_arrives(model: FakeServedModel) -> None:
    """Under uvicorn: a declared 100 kB is refused with none of it sent, and a chunked body
    at its first chunk past the limit, the rest never sent (nothing waits for all of it)."""
    declared = (
        b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000\r\n\r\n"
    )
    chunked = (
        b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    kilobyte = b"3e8\r\n" + b" " * 1000 + b"\r\n"
    with serving(create_app(model, settings())) as url:
        for head, chunks in ((declared, []), (chunked, [kilobyte] * 3)):
            answer = raw_exchange(url, head, chunks)
            assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
            assert b"serve.max_request_bytes" in answer
    assert model.calls == []


def test_a_model_input_error_from_mlflow_is_a_400_with_its_message(
    model: FakeServedModel, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import BAD_REQUEST, INVALID_PARAMETER_VALUE

    for code in (INVALID_PARAMETER_VALUE, BAD_REQUEST):
        error = MlflowException("input 1: time 2099-01-01 is after the KG's last day", code)
        monkeypatch.setattr(model, "predict", _raise(error))
        response = post(client, {"inputs": [{"question": QUESTION}]})
        assert response.status_code == 400
        assert response.json()["message"] == "input 1: time 2099-01-01 is after the KG's last day"


def test_an_unexpected_failure_is_a_500_of_one_line_and_the_log_has_it(
    model: FakeServedModel,
    client: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from mlflow.exceptions import MlflowException

    for error in (
        ZeroDivisionError("secret internals /home/x/model.py"),
        MlflowException("the artifact store is down"),  # INTERNAL_ERROR: not the client's
    ):
        monkeypatch.setattr(model, "predict", _raise(error))
        with caplog.at_level(logging.ERROR, logger="rulerag.serving.app"):
            response = post(client, {"inputs": [{"question": QUESTION}]})
        assert response.status_code == 500
        message = response.json()["message"]
        assert type(error).__name__ in message and "log" in message
        assert str(error) not in response.text and "Traceback" not in response.text
        assert caplog.records[-1].exc_info[1] is error  # the traceback is in the server's log


def test_a_model_that_answers_another_number_of_inputs_is_a_500(
    model: FakeServedModel, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model, "predict", lambda inputs: [])
    response = post(client, {"inputs": [{"question": QUESTION}]})
    assert response.status_code == 500
    assert response.json()["error_code"] == "INTERNAL_ERROR"


def test_what_no_handler_catches_is_still_one_line(model: FakeServedModel) -> None:
    """A fault outside the handlers' own catch (here: the app run without its lifespan, so
    without its gate) is still one line of JSON, not Starlette's page or a traceback."""
    broken = TestClient(create_app(model, settings()), raise_server_exceptions=False)
    response = broken.get("/ping")  # no `with`: the lifespan never ran
    assert response.status_code == 500
    assert response.json()["error_code"] == "INTERNAL_ERROR"
    assert "AttributeError" in response.json()["message"] and "Traceback" not in response.text


def test_scores_that_are_no_json_numbers_become_null() -> None:
    numpy = pytest.importorskip("numpy")
    assert jsonable({"s": numpy.float32(0.5), "n": float("nan"), "t": (1, numpy.int64(2))}) == {
        "s": 0.5,
        "n": None,
        "t": [1, 2],
    }
    with pytest.raises(TypeError, match="set is not JSON"):
        jsonable({"x": {1}})
    with pytest.raises(InputError, match="holds 2 inputs; at most 1"):
        read_invocation({"inputs": [{"qid": "a"}, {"qid": "b"}]}, max_questions=1)


# ------------------------------------------------------------------------------------------
# one answer at a time: 503 when the line is full, 504 at the deadline
# ------------------------------------------------------------------------------------------


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    return thread, result


def wait_until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_full_line_gets_503_with_retry_after_and_ping_answers_meanwhile() -> None:
    gate = threading.Event()
    model = FakeServedModel(gate=gate)
    with TestClient(create_app(model, settings(queue=1, timeout=10.0))) as client:
        ask = lambda: post(client, {"inputs": [{"question": QUESTION}]})  # noqa: E731
        first, first_result = in_thread(ask)
        assert model.started.wait(5)
        second, second_result = in_thread(ask)
        wait_until(lambda: client.get("/health").json()["waiting"] == 1)
        assert client.get("/ping").json() == {"status": "ok", "running": True, "waiting": 1}

        refused = ask()
        assert refused.status_code == 503
        assert int(refused.headers["retry-after"]) >= 1
        assert "try again in" in refused.json()["message"]
        page = client.get("/", params={"question": QUESTION})
        assert page.status_code == 503 and "try again in" in page.text

        gate.set()
        first.join(10)
        second.join(10)
    assert [r[0].status_code for r in (first_result, second_result)] == [200, 200]
    assert len(model.calls) == 2  # the refused ones never reached the model


def test_the_deadline_answers_504_and_the_abandoned_answer_still_holds_the_model() -> None:
    gate = threading.Event()
    model = FakeServedModel(gate=gate)
    with TestClient(create_app(model, settings(timeout=0.3))) as client:
        started = time.monotonic()
        running = post(client, {"inputs": [{"question": QUESTION}]})
        assert running.status_code == 504
        assert "abandoned" in running.json()["message"]
        assert time.monotonic() - started < 3
        waited = post(client, {"inputs": [{"qid": "test-00002"}]})  # the first still runs
        assert waited.status_code == 504
        assert "waited 0.3 s" in waited.json()["message"]
        assert len(model.calls) == 1
        page = client.get("/", params={"qid": "test-00002"})
        assert page.status_code == 504 and 'id="error"' in page.text

        gate.set()  # the abandoned answer ends: the model is free again
        wait_until(lambda: not client.get("/health").json()["running"])
        assert post(client, {"inputs": [{"qid": "test-00002"}]}).status_code == 200


def test_a_turn_that_comes_too_late_to_finish_is_not_started() -> None:
    """The model took 0.35 s a question of late; a request whose turn comes with about 0.25 s
    of its 0.6 s left gets its 504 at once, and the model never sees it (an answer nobody
    would wait for would only delay those behind it)."""
    model = FakeServedModel(delay=0.35)
    with TestClient(create_app(model, settings(timeout=0.6))) as client:
        ask = lambda: post(client, {"inputs": [{"qid": "test-00001"}]})  # noqa: E731
        assert ask().status_code == 200  # the estimate: 0.35 s a question
        model.started.clear()
        first, first_result = in_thread(ask)
        assert model.started.wait(5)
        late = ask()
        first.join(10)
    assert first_result[0].status_code == 200
    assert late.status_code == 504
    assert "not started: 1 question(s) take about 0.4 s" in late.json()["message"]
    assert len(model.calls) == 2


# ------------------------------------------------------------------------------------------
# the page
# ------------------------------------------------------------------------------------------


def listed(html: str, list_id: str) -> list[str]:
    """The documents (their ids) of one column, `both` marking those found in both lists."""
    match = re.search(rf'<ol id="{list_id}">(.*?)</ol>', html, flags=re.S)
    assert match, f"no list {list_id}"
    items = re.findall(r'<li class="doc( both)?">\s*<span class="muted">(\w+)', match.group(1))
    return [f"{doc}{'*' if both else ''}" for both, doc in items]


def test_the_page_without_a_question_offers_the_box_and_the_test_queries(
    client: TestClient,
) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert 'name="question"' in page.text and '<option value="test-00001"' in page.text
    assert 'id="result"' not in page.text and 'id="error"' not in page.text
    assert "<script" not in page.text and "http" not in page.text.split("</style>")[0]


def test_the_page_lays_out_the_answer_with_documents_side_by_side(client: TestClient) -> None:
    page = client.get("/", params={"question": QUESTION})
    assert page.status_code == 200, page.text
    html = page.text
    assert '<p class="answer" id="answer">Ravi Shankar Prasad</p>' in html
    assert 'id="verdict">correct<' in html and "gold: Ravi Shankar Prasad" in html
    assert "Time 2014-12-18 what does Aam Aadmi Party Accuse ?" in html
    assert re.search(r"<td>relation</td><td>accuse</td>\s*<td>Accuse", html)
    assert "[Entity1, Make statement, Entity2] leads to [Entity1, Accuse, Entity2]" in html
    assert "0.420" in html
    assert listed(html, "with-rules") == ["d123", "d9*"]
    assert listed(html, "without-rules") == ["d9*", "d40"]
    assert "in both · #1 there" in html and "in both · #2 there" in html
    assert "Citizen (India)" in html and "Time 2014-07-21 Aam Aadmi Party Make statement" in html
    assert f'value="{QUESTION}"' in html  # the box keeps the question


def test_the_page_escapes_every_name(client: TestClient) -> None:
    page = client.get("/", params={"qid": "test-00002"})
    assert page.status_code == 200
    assert "<b>Tom" not in page.text
    assert "&lt;b&gt;Tom &amp; Jerry&lt;/b&gt;" in page.text
    attack = '"><script>alert(1)</script>'
    page = client.get("/", params={"question": attack})
    assert page.status_code == 400
    assert "<script>alert" not in page.text and "&lt;script&gt;" in page.text


@pytest.mark.parametrize(
    ("params", "status", "says"),
    [
        ({"question": "Who is Nobody?"}, 400, "no entity of the KG named in"),
        ({"qid": "test-99999"}, 400, "no RuleQA test query"),
        ({"question": QUESTION, "qid": "test-00001"}, 400, "not both"),
        ({"question": "x" * 3000}, 413, "serve.max_request_bytes"),
    ],
)
def test_the_page_shows_a_bad_question_with_its_4xx(
    client: TestClient, params: dict[str, str], status: int, says: str
) -> None:
    page = client.get("/", params=params)
    assert page.status_code == status
    error = re.search(r'<p class="error" role="alert" id="error">(.*?)</p>', page.text, re.S)
    assert error and says in error.group(1)
    assert 'name="question"' in page.text  # the form is there to try again


def _raise(error: Exception) -> Callable[[Any], Any]:
    def predict(inputs: Any) -> Any:
        raise error

    return predict
