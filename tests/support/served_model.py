"""A stand-in for the registered RuleRAG model (`rulerag.serving.protocol.ServedModel`), for the
service's tests and for measuring the service alone (`benchmarks/bench_serve.py`).

It answers from a KG of a few facts written below, as the real model's answers are shaped
(the issue's example: the link, the rules, documents with and without rules, the answer beside
the gold, the rules' candidates with their facts), so the page and the API see every field.
Questions are linked by the names they contain; a name it does not know is an `InputError`,
as the real model's is. `gate` (an Event) holds every answer until it is set, `delay` slows
each by that many seconds; `started` is set when an answer begins.

    python -m tests.support.served_model --port 8051 [--delay 0.05]

serves it through the real command line (`rulerag.serving.cli`) with this model in place of
`load_served`.
"""

from __future__ import annotations

import contextlib
import datetime
import re
import socket
import sys
import threading
import time
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rulerag.errors import InputError

__all__ = ["ENTITIES", "FakeServedModel", "fake_loading", "install_loader", "main", "serving"]

#: the KG's entities by id; one name carries HTML, which the page must show as text
ENTITIES = {
    13: "Aam Aadmi Party",
    7: "Ravi Shankar Prasad",
    1145: "Citizen (India)",
    99: "<b>Tom & Jerry</b>",
}
RELATIONS = {6: "Accuse", 2: "Make statement"}
#: (subject, relation, day) -> objects
FACTS = {(13, 6, "2014-12-18"): [7], (99, 6, "2014-05-01"): [13]}
TESTS = {
    "test-00001": (13, 6, "2014-12-18"),
    "test-00002": (99, 6, "2014-05-01"),
}
RULE = {
    "rule_id": "Rdb5fe4694948",
    "text": "[Entity1, Make statement, Entity2] leads to [Entity1, Accuse, Entity2]",
    "confidence": 0.42,
}
_DAY = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")
EPOCH = datetime.date(1970, 1, 1)


class FakeServedModel:
    """`ServedModel` over the facts above (module doc)."""

    def __init__(self, gate: threading.Event | None = None, delay: float = 0.0) -> None:
        self.title = "Fake RuleRAG on a tiny KG (tests/support/served_model.py)"
        self.examples = [
            {"qid": qid, "query": _query(s, r, day)} for qid, (s, r, day) in TESTS.items()
        ]
        self.gate, self.delay = gate, delay
        self.started = threading.Event()
        self.calls: list[list[dict[str, Any]]] = []

    def predict(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.calls.append(inputs)
        self.started.set()
        if self.gate is not None:
            self.gate.wait(timeout=30)
        if self.delay:
            time.sleep(self.delay)
        return [self._answer(given, f"input {i + 1}") for i, given in enumerate(inputs)]

    def _answer(self, given: dict[str, Any], where: str) -> dict[str, Any]:
        if "qid" in given:
            if given["qid"] not in TESTS:
                raise InputError(f"{where}: {given['qid']!r} is no RuleQA test query of this model")
            subject, relation, day = TESTS[given["qid"]]
            link = _link(ENTITIES[subject], RELATIONS[relation], subject, relation, day)
        elif "question" in given:
            link = _link_question(str(given["question"]), where)
        else:
            link = _link_structured(given, where)
        subject, relation, day = link["subject"]["id"], link["relation"]["id"], link["time_text"]
        qid = next((q for q, key in TESTS.items() if key == (subject, relation, day)), None)
        gold_ids = FACTS.get((subject, relation, day))
        gold = [ENTITIES[e] for e in gold_ids] if qid and gold_ids else None
        answer = gold[0] if gold else ENTITIES[1145]
        subject_name = ENTITIES[subject]
        shared = {"id": "d9", "text": f"Time 2014-11-02 {subject_name} Accuse {answer}."}
        return {
            "input": given,
            "link": link,
            "qid": qid,
            "gold": gold,
            "rules": [RULE],
            "documents": {
                "with_rules": [
                    {
                        "id": "d123",
                        "text": f"Time 2014-11-01 {subject_name} Make statement {answer}.",
                        "score": 0.71,
                        "rule_id": RULE["rule_id"],
                    },
                    {**shared, "score": 0.66, "rule_id": RULE["rule_id"]},
                ],
                "without_rules": [
                    {**shared, "score": 0.69},
                    {
                        "id": "d40",
                        "text": f"Time 2014-03-09 {subject_name} Praise India.",
                        "score": 0.5,
                    },
                ],
            },
            "answer": answer,
            "generation": answer,
            "correct": None if gold is None else answer in gold,
            "candidates": [
                {
                    "entity": 1145,
                    "name": ENTITIES[1145],
                    "score": 0.989,
                    "rule": RULE["text"],
                    "evidence": [f"Time 2014-07-21 {subject_name} Make statement Citizen (India)."],
                }
            ],
        }


def _query(subject: int, relation: int, day: str) -> str:
    return f"Time {day} what does {ENTITIES[subject]} {RELATIONS[relation]} ?"


def _link(
    subject_text: str, relation_text: str, subject: int, relation: int, day: str
) -> dict[str, Any]:
    def part(text: str, ident: int, name: str) -> dict[str, Any]:
        exact = text.casefold() == name.casefold()
        method, score = ("exact", 100.0) if exact else ("fuzzy", 90.0)
        return {"text": text, "id": ident, "name": name, "method": method, "score": score}

    days = (datetime.date.fromisoformat(day) - EPOCH).days
    return {
        "subject": part(subject_text, subject, ENTITIES[subject]),
        "relation": part(relation_text, relation, RELATIONS[relation]),
        "time": days,
        "time_text": day,
        "query": _query(subject, relation, day),
    }


def _find(text: str, names: dict[int, str], what: str, where: str) -> tuple[int, str]:
    found = [(i, n) for i, n in names.items() if n.casefold() in text.casefold()]
    if not found:
        raise InputError(f"{where}: no {what} of the KG named in {text[:80]!r}")
    ident, name = max(found, key=lambda pair: len(pair[1]))
    return ident, name


def _link_question(text: str, where: str) -> dict[str, Any]:
    subject, name = _find(text, ENTITIES, "entity", where)
    relation, verb = _find(text, RELATIONS, "relation", where)
    day = _DAY.search(text)
    if day is None:
        raise InputError(f"{where}: no date (YYYY-MM-DD) in {text[:80]!r}")
    return _link(name, verb.lower(), subject, relation, day.group(1))


def _link_structured(given: dict[str, Any], where: str) -> dict[str, Any]:
    subject, _ = _find(str(given.get("subject", "")), ENTITIES, "entity", where)
    relation, _ = _find(str(given.get("relation", "")), RELATIONS, "relation", where)
    day = str(given.get("time", ""))
    if not _DAY.fullmatch(day):
        raise InputError(f"{where}: time {day[:40]!r} is no date (YYYY-MM-DD)")
    return _link(str(given["subject"]), str(given["relation"]), subject, relation, day)


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """`app` served by a real uvicorn in a thread on a free port of 127.0.0.1 (the socket is
    bound first and handed over, so no other process takes the port meanwhile); its URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def fake_loading(model: Any) -> types.ModuleType:
    """A `rulerag.serving.loading` whose `load_served` returns `model` whatever the URI (the
    command line imports the module only once every value is checked)."""
    fake = types.ModuleType("rulerag.serving.loading")
    fake.load_served = lambda uri, project_dir: model  # type: ignore[attr-defined]
    return fake


def install_loader(model: Any) -> None:
    """`fake_loading(model)` in place of the real module, for this process."""
    sys.modules["rulerag.serving.loading"] = fake_loading(model)


def main(argv: Sequence[str] | None = None) -> int:
    """The real command line, serving the fake model (`--delay` seconds per answer)."""
    import argparse

    from rulerag.serving import cli

    args = list(sys.argv[1:] if argv is None else argv)
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--delay", type=float, default=0.0)
    known, rest = extra.parse_known_args(args)
    install_loader(FakeServedModel(delay=known.delay))
    folder = Path(__file__).resolve().parent  # any folder: the fake loader ignores it
    if "--model" not in rest:
        rest = ["--model", str(folder), *rest]
    return cli.main(rest)


if __name__ == "__main__":
    sys.exit(main())
