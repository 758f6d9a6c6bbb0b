"""`make serve`'s page in a real headless Chromium (benchmarks/chromium.py drives it over the
DevTools protocol): the service started by its real command line (`python -m
tests.support.served_model`, which is `python -m rulerag.serving` with the fake model of
tests/support/served_model.py in place of the registered one) under uvicorn on a free port of
127.0.0.1; Chromium types a question into the box, presses Enter, and the answer, the rules and
both document lists are read off the rendered page, as a person sees them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.chromium import Browser, free_port, wait_http

PROJECT = Path(__file__).resolve().parents[2]
CHROMIUM = (
    os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
)
QUESTION = "What did Aam Aadmi Party accuse on 2014-12-18?"

pytestmark = [
    pytest.mark.slow,  # a server process and a browser: a few seconds
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium)"),
]

#: the page as read by the browser: texts as rendered, and where the two columns are drawn
READ_PAGE = """JSON.stringify((() => {
  const texts = (selector) => [...document.querySelectorAll(selector)].map(e => e.innerText.trim());
  const docs = (id) => [...document.querySelectorAll(`#${id} > li`)].map(li => ({
    text: li.querySelector('.text').innerText.trim(), both: li.classList.contains('both')}));
  const box = (id) => document.getElementById(id).getBoundingClientRect();
  return {
    url: location.href,
    answer: document.getElementById('answer').innerText.trim(),
    gold: document.getElementById('gold') ? document.getElementById('gold').innerText : null,
    link: texts('#link tbody tr'),
    rules: texts('#rules tbody tr'),
    with_rules: docs('with-rules'),
    without_rules: docs('without-rules'),
    candidates: texts('#candidates > li'),
    columns: {with: [box('with-rules').left, box('with-rules').right, box('with-rules').top],
              without: [box('without-rules').left, box('without-rules').top]},
    bold: document.querySelectorAll('#result b, #result script').length,
  };
})())"""


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The service on a free port: the real command line, uvicorn, the fake model."""
    folder = tmp_path_factory.mktemp("serve")
    values = yaml.safe_load((PROJECT / "params.yaml").read_text(encoding="utf-8"))
    values["serve"] = {**values.get("serve", {}), "port": free_port()}
    params = folder / "params.yaml"
    params.write_text(yaml.safe_dump(values), encoding="utf-8")
    log = (folder / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.served_model", "--params", str(params)],
        cwd=PROJECT,
        env={**os.environ, "PYTHONPATH": str(PROJECT)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{values['serve']['port']}/"
    try:
        wait_http(f"{url}ping", 60)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    text = (folder / "server.log").read_text()
    assert f"at {url} (JSON: POST {url}invocations)" in text, text[-2000:]
    assert "Traceback" not in text, text[-3000:]


@pytest.fixture
def browser() -> Iterator[Browser]:
    assert CHROMIUM is not None
    driven = Browser(CHROMIUM)
    try:
        yield driven
    finally:
        driven.close()


def read_page(browser: Browser) -> dict[str, Any]:
    assert browser.wait_for("document.getElementById('answer') !== null", 30) is not None
    return json.loads(browser.evaluate(READ_PAGE))


def press_enter(browser: Browser) -> None:
    for kind in ("keyDown", "keyUp"):
        browser.call(
            "Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
            windowsVirtualKeyCode=13, **({"text": "\r"} if kind == "keyDown" else {}),
        )  # fmt: skip


def test_a_typed_question_is_answered_with_its_rules_and_both_document_lists(
    service: str, browser: Browser
) -> None:
    browser.navigate(service)
    assert browser.wait_for("document.getElementById('question') !== null", 30) is not None
    browser.evaluate("document.getElementById('question').focus()")
    browser.call("Input.insertText", text=QUESTION)  # typed, as a keyboard would
    press_enter(browser)
    page = read_page(browser)

    assert "question=What+did+Aam+Aadmi+Party" in page["url"]
    assert page["answer"] == "Ravi Shankar Prasad"
    assert "gold: Ravi Shankar Prasad" in page["gold"] and "correct" in page["gold"]
    assert page["link"][0].split("\t")[:2] == ["subject", "Aam Aadmi Party"]
    assert page["link"][1].split("\t")[:2] == ["relation", "accuse"]
    assert page["rules"] == [
        "[Entity1, Make statement, Entity2] leads to [Entity1, Accuse, Entity2]\t0.420\t"
        "Rdb5fe4694948"
    ]
    assert [d["text"] for d in page["with_rules"]] == [
        "Time 2014-11-01 Aam Aadmi Party Make statement Ravi Shankar Prasad.",
        "Time 2014-11-02 Aam Aadmi Party Accuse Ravi Shankar Prasad.",
    ]
    assert [d["text"] for d in page["without_rules"]] == [
        "Time 2014-11-02 Aam Aadmi Party Accuse Ravi Shankar Prasad.",
        "Time 2014-03-09 Aam Aadmi Party Praise India.",
    ]
    assert [d["both"] for d in page["with_rules"]] == [False, True]
    assert [d["both"] for d in page["without_rules"]] == [True, False]
    # side by side: the list without rules starts right of the list with rules, level with it
    (with_left, with_right, with_top), (without_left, without_top) = (
        page["columns"]["with"],
        page["columns"]["without"],
    )
    assert without_left >= with_right > with_left and abs(without_top - with_top) < 2
    assert page["candidates"][0].startswith("Citizen (India) 1145 · 0.989")


def test_a_picked_test_query_shows_html_in_names_as_text(service: str, browser: Browser) -> None:
    browser.navigate(service)
    assert browser.wait_for("document.getElementById('qid') !== null", 30) is not None
    browser.evaluate(
        "document.getElementById('qid').value = 'test-00002';"
        "document.getElementById('example-button').click()"
    )
    page = read_page(browser)
    assert "qid=test-00002" in page["url"]
    assert page["link"][0].split("\t")[:2] == ["subject", "<b>Tom & Jerry</b>"]
    assert page["bold"] == 0  # the name's <b> is text, not an element
    assert page["answer"] == "Aam Aadmi Party"


def test_a_question_the_model_cannot_link_shows_what_to_fix(service: str, browser: Browser) -> None:
    browser.navigate(f"{service}?question=Who+is+Nobody%3F")
    assert browser.wait_for("document.getElementById('error') !== null", 30) is not None
    error = browser.evaluate("document.getElementById('error').innerText")
    assert error == "input 1: no entity of the KG named in 'Who is Nobody?'"
    assert browser.evaluate("document.getElementById('question').value") == "Who is Nobody?"
