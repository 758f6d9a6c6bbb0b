"""What a person asks, checked and linked to the KG before anything is searched.

An input is one of three forms, and nothing else (a key that is none of them is refused, so a
typo such as `subjcet` is not silently a question without a subject):

* `{"question": "What did Aam Aadmi Party accuse on 2014-12-18?"}`: words, linked to the KG's
  names (`linking.Linker.link_question`: exact, then fuzzy);
* `{"subject": ..., "relation": ..., "time": ...}`: RuleQA's structured query (names or ids;
  `time` only on a temporal KG);
* `{"qid": "test-00001"}`: a RuleQA test query by its id.

A linked query that is a RuleQA test query (same subject, relation and time) is that query: it
keeps the benchmark's rules and gold answers, so the served model answers it exactly as the
grid's row did. Any other query gets the bank's rules for its relation (`select_by_head`, the
paper's selection) and no gold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rulerag.errors import InputError
from rulerag.serving.linking import LinkedQuery, Linker

__all__ = [
    "FORMS",
    "INPUT_FIELDS",
    "MAX_TEXT",
    "Question",
    "QuestionReader",
    "check_form",
    "is_given",
]

#: every key an input may have (the pyfunc's input columns, the JSON API's fields)
INPUT_FIELDS = ("question", "subject", "relation", "time", "qid")
#: the keys of each input form
FORMS: dict[str, frozenset[str]] = {
    "question": frozenset(INPUT_FIELDS[:1]),
    "structured": frozenset(INPUT_FIELDS[1:4]),
    "qid": frozenset(INPUT_FIELDS[4:]),
}
#: the longest text a field may hold (a question of 100 kB is no question)
MAX_TEXT = 1000


@dataclass(frozen=True)
class Question:
    """One input, linked: the RuleQA-shaped record the row answers, and what it came from."""

    given: dict[str, Any]
    link: LinkedQuery
    record: dict[str, Any]  # qid, query, answers, head, relation, time, rule_ids
    test_qid: str | None  # the RuleQA test query it is, if it is one

    @property
    def gold(self) -> list[str] | None:
        return list(self.record["answers"]) if self.test_qid else None


def is_given(value: Any) -> bool:
    """A value given (a DataFrame row of mixed forms holds NaN / None where a key is absent)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _field(value: Any, key: str, where: str) -> str | int:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InputError(f"{where}: {key} must be text or a number, not {type(value).__name__}")
    if isinstance(value, float):
        if not value.is_integer():
            raise InputError(f"{where}: {key} must be text or a whole number, not {value!r}")
        value = int(value)
    if isinstance(value, str):
        value = value.strip()
        if not value:
            raise InputError(f"{where}: {key} is empty")
        if len(value) > MAX_TEXT:
            raise InputError(f"{where}: {key} is {len(value):,} characters; at most {MAX_TEXT:,}")
    return value


def check_form(given: Any, where: str) -> tuple[str, dict[str, Any]]:
    """The form of one input (`FORMS`) and the values it gives; an `InputError` naming
    `where` for anything else. The served model's callers run it before MLflow's schema step,
    which would drop an unknown key without a word."""
    if not isinstance(given, Mapping):
        raise InputError(f'{where}: expected an object such as {{"question": ...}}')
    keys = {str(k) for k, v in given.items() if is_given(v)}
    unknown = sorted(keys - set(INPUT_FIELDS))
    if unknown:
        raise InputError(
            f"{where}: unknown field {unknown[0]!r}; give question, or subject + relation "
            "(+ time), or qid"
        )
    forms = [name for name, fields in FORMS.items() if keys & fields]
    if len(forms) != 1:
        raise InputError(
            f"{where}: give exactly one of question, subject + relation (+ time), or qid"
            + (f", not {' and '.join(forms)}" if forms else "")
        )
    return forms[0], {k: v for k, v in given.items() if str(k) in keys}


class QuestionReader:
    """Turns inputs into `Question`s: checks their form, links them, finds the test query."""

    def __init__(
        self,
        linker: Linker,
        tests: Sequence[Mapping[str, Any]],
        heads: Mapping[int, Sequence[str]],
    ) -> None:
        """`tests`: RuleQA's test records; `heads`: relation id -> the bank's rule ids for a
        query of that relation, best first (`select_by_head`)."""
        self.linker = linker
        self.tests = {str(t["qid"]): dict(t) for t in tests}
        self._by_query = {
            (int(t["head"]), int(t["relation"]), _time(t.get("time"))): str(t["qid"]) for t in tests
        }
        self.heads = heads

    def read(self, inputs: Sequence[Any]) -> list[Question]:
        """Every input checked and linked; the first bad one fails the whole request, naming
        its position (nothing is answered half)."""
        if not inputs:
            raise InputError("no question given: send at least one input")
        return [self._one(given, f"input {i + 1}") for i, given in enumerate(inputs)]

    def _one(self, given: Any, where: str) -> Question:
        form, values = check_form(given, where)
        keys = set(values)
        if form == "qid":
            return self._test_query(_field(values["qid"], "qid", where), values, where)
        if form == "question":
            text = _field(values["question"], "question", where)
            link = self.linker.link_question(str(text))
        else:
            missing = [k for k in ("subject", "relation") if k not in keys]
            if missing:
                raise InputError(f"{where}: {missing[0]} is missing")
            link = self.linker.link_structured(
                _field(values["subject"], "subject", where),
                _field(values["relation"], "relation", where),
                _field(values["time"], "time", where) if "time" in keys else None,
            )
        return self._question(values, link)

    def _test_query(self, qid: Any, given: dict[str, Any], where: str) -> Question:
        record = self.tests.get(str(qid))
        if record is None:
            raise InputError(f"{where}: {qid!r} is no RuleQA test query of this model")
        link = self.linker.link_structured(
            int(record["head"]), int(record["relation"]), _time(record.get("time"))
        )
        return Question(given, link, record, str(qid))

    def _question(self, given: dict[str, Any], link: LinkedQuery) -> Question:
        key = (link.subject.id, link.relation.id, link.time)
        qid = self._by_query.get(key)
        if qid is not None:
            return Question(given, link, self.tests[qid], qid)
        record = {
            "qid": "asked",
            "query": link.query,
            "answers": [],
            "head": link.subject.id,
            "relation": link.relation.id,
            "time": link.time,
            "rule_ids": list(self.heads.get(link.relation.id, [])),
        }
        return Question(given, link, record, None)


def _time(value: Any) -> int | None:
    return int(value) if is_given(value) else None
