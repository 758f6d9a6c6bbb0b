"""Rules that answer, in the grid: the `symbolic` generator and rule-derived evidence.

`apply_rules` answers every RuleQA test query with ranked, explained candidates
(data/<dataset>/rule_application/answers.jsonl). The `symbolic` row answers with the best
candidate's name and no language model (rule application alone, TLogic's way of answering),
on the same queries as every row. A row with `evidence: n` puts the body facts of its query's
best candidates (up to n documents, best candidate first, each fact once) before the
retrieved documents: what the rules would point the generator to, in the corpus's own form.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rulerag.generation.prompts import Sample
from rulerag.io import iter_jsonl
from rulerag.layout import DataLayout

__all__ = ["SymbolicGenerator", "add_evidence", "read_answers"]


def read_answers(base: Path) -> dict[str, list[dict[str, Any]]]:
    """qid -> its explained candidates, best first (data/<dataset>/ is `base`; `apply_rules`
    writes them)."""
    path = DataLayout(Path(base)).rule_answers
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run the apply_rules stage")
    return {str(r["qid"]): list(r["candidates"]) for r in iter_jsonl(path)}


def add_evidence(
    samples: Sequence[Sample], answers: Mapping[str, Sequence[Mapping[str, Any]]], n: int
) -> list[Sample]:
    """Each sample with up to `n` rule-derived evidence documents before its retrieved ones."""
    out = []
    for sample in samples:
        evidence: list[str] = []
        for candidate in answers.get(sample.qid, []):
            for fact in candidate["evidence"]:
                if fact not in evidence and fact not in sample.documents:
                    evidence.append(fact)
        evidence = evidence[:n]
        extra = {**sample.extra, "evidence": evidence}
        documents = (*evidence, *sample.documents)
        out.append(dataclasses.replace(sample, documents=documents, extra=extra))
    return out


class SymbolicGenerator:
    """Answers each sample with its best rule-derived candidate ("" when rules found none)."""

    name = "rules"

    def __init__(self, answers: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        self.answers = answers
        self.stats = None

    def generate_samples(self, samples: Sequence[Sample], prompts: Sequence[str]) -> list[str]:
        out = []
        for sample in samples:
            candidates = self.answers.get(sample.qid) or []
            out.append(str(candidates[0]["name"]) if candidates else "")
        return out

    def generate(self, prompts: Sequence[str]) -> list[str]:
        raise TypeError("the symbolic generator answers samples: call generate_samples")
