"""One answer of the model laid out for the page (`templates/index.html`).

The template only prints: everything it shows is worked out here, from the answer as the model
returns it (`rulerag.serving.protocol.ServedModel.predict`), so a missing or odd field is
handled once, in Python, and the template's `StrictUndefined` catches a name it misspells.
What is worked out: how each part of the query was linked, whether the answer matches the gold,
each rule's text beside a document it brought in, and the documents found both with and
without rules (marked in both columns, with their rank in the other one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["answer_view", "link_rows"]


def answer_view(output: Mapping[str, Any]) -> dict[str, Any]:
    """Every value the page's result shows, from one answer of the model."""
    link = _mapping(output.get("link"))
    rules = [_rule(r) for r in _list(output.get("rules"))]
    rule_text = {r["rule_id"]: r["text"] for r in rules if r["rule_id"]}
    documents = _mapping(output.get("documents"))
    with_rules = [_document(d, rule_text) for d in _list(documents.get("with_rules"))]
    without = [_document(d, rule_text) for d in _list(documents.get("without_rules"))]
    _mark_both(with_rules, without)
    gold = output.get("gold")
    return {
        "query": _text(link.get("query")),
        "qid": _text(output.get("qid")),
        "link_rows": link_rows(link),
        "answer": _text(output.get("answer")),
        "generation": _text(output.get("generation")),
        "gold": [_text(g) for g in gold] if isinstance(gold, list) else None,
        "correct": output.get("correct") if isinstance(output.get("correct"), bool) else None,
        "rules": rules,
        "with_rules": with_rules,
        "without_rules": without,
        "in_both": sum(1 for d in with_rules if d["other_rank"] is not None),
        "candidates": [_candidate(c) for c in _list(output.get("candidates"))],
    }


def link_rows(link: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The query's parts as linked: what was given, the KG's name and id, and how it matched
    (exact, or fuzzy with rapidfuzz's score)."""
    rows = []
    for part in ("subject", "relation"):
        linked = _mapping(link.get(part))
        if not linked:
            continue
        method = _text(linked.get("method"))
        score = _number(linked.get("score"))
        rows.append(
            {
                "part": part,
                "given": _text(linked.get("text")),
                "name": _text(linked.get("name")),
                "id": _text(linked.get("id")),
                "method": method,
                "score": None if score is None else f"{score:.1f}",
            }
        )
    if link.get("time") is not None or link.get("time_text") is not None:
        rows.append(
            {
                "part": "time",
                "given": _text(link.get("time_text")),
                "name": _text(link.get("time_text")),
                "id": _text(link.get("time")),
                "method": "date",
                "score": None,
            }
        )
    return rows


def _rule(rule: Any) -> dict[str, Any]:
    rule = _mapping(rule)
    confidence = _number(rule.get("confidence"))
    return {
        "rule_id": _text(rule.get("rule_id")),
        "text": _text(rule.get("text")),
        "confidence": None if confidence is None else f"{confidence:.3f}",
    }


def _document(doc: Any, rule_text: Mapping[str, str]) -> dict[str, Any]:
    doc = _mapping(doc)
    score = _number(doc.get("score"))
    rule_id = _text(doc.get("rule_id"))
    return {
        "id": _text(doc.get("id")),
        "text": _text(doc.get("text")),
        "score": None if score is None else f"{score:.3f}",
        "rule_id": rule_id,
        "rule": rule_text.get(rule_id, "") if rule_id else "",
        "other_rank": None,
    }


def _mark_both(left: list[dict[str, Any]], right: list[dict[str, Any]]) -> None:
    """Give each document found in both lists its 1-based rank in the other one."""
    left_rank = {d["id"]: i for i, d in reversed(list(enumerate(left, 1))) if d["id"]}
    right_rank = {d["id"]: i for i, d in reversed(list(enumerate(right, 1))) if d["id"]}
    for doc in left:
        doc["other_rank"] = right_rank.get(doc["id"])
    for doc in right:
        doc["other_rank"] = left_rank.get(doc["id"])


def _candidate(candidate: Any) -> dict[str, Any]:
    candidate = _mapping(candidate)
    score = _number(candidate.get("score"))
    return {
        "name": _text(candidate.get("name")),
        "entity": _text(candidate.get("entity")),
        "score": None if score is None else f"{score:.3f}",
        "rule": _text(candidate.get("rule")),
        "evidence": [_text(e) for e in _list(candidate.get("evidence"))],
    }


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else []


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
