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
