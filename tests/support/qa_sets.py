"""An ordinary QA set on disk, in the layout `qa_rag` reads (questions.jsonl, optionally
corpus.jsonl), and three ICEWS-style rules for its questions to match.

Shared by the QA reader's unit tests and the `qa_rag` stage's test."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

#: a rule bank as mine_rules writes it (rule_id, text, score): two rules phrased like the
#: questions that ask with Consult / Accuse, one that no question is near
RULES = pd.DataFrame(
    {
        "rule_id": ["r1", "r2", "r3"],
        "text": [
            "[Entity1, Consult, Entity2] leads to [Entity1, Consult, Entity2]",
            "[Entity1, Accuse, Entity2] leads to [Entity1, Criticize or denounce, Entity2]",
            "[Entity1, Make a visit, Entity2] leads to [Entity1, Meet, Entity2]",
        ],
        "score": [0.5, 0.4, 0.3],
    }
)


def write_set(folder: Path, questions: Sequence[dict], corpus: Sequence[dict] | None) -> Path:
    """A QA set in `folder`: `questions` as questions.jsonl and, unless None, `corpus` as
    corpus.jsonl (one JSON record a line each). Returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "questions.jsonl").write_text(
        "".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8"
    )
    if corpus is not None:
        (folder / "corpus.jsonl").write_text(
            "".join(json.dumps(d) + "\n" for d in corpus), encoding="utf-8"
        )
    return folder


#: the `qa_rag` stage tests' set: ICEWS-style questions two of the rules match, and one that
#: no rule is near; its corpus holds each answer's document and one other event
TOY_CORPUS = [
    {"id": "c1", "contents": "2014-01-02 Iran Consult Oman ."},
    {"id": "c2", "contents": "2014-01-03 China Accuse Japan ."},
    {"id": "c3", "contents": "2014-01-04 Kerry Criticize or denounce Russia ."},
    {"id": "c4", "contents": "Paris is the capital of France ."},
]
TOY_QUESTIONS = [
    {"id": "1", "question": "Iran Consult whom ?", "answer": "Oman"},
    {"id": "2", "question": "China Accuse whom ?", "answer": "Japan"},
    {"id": "3", "question": "What is the capital of France ?", "answer": "Paris"},
]


def write_toy_fixture(qa_sets: Path, rule_bank: Path) -> None:
    """The set `toyqa` in `qa_sets` (a folder of QA sets, outside data/) and RULES as the
    rule bank at `rule_bank`."""
    write_set(qa_sets / "toyqa", TOY_QUESTIONS, TOY_CORPUS)
    rule_bank.parent.mkdir(parents=True)
    RULES.to_parquet(rule_bank)
