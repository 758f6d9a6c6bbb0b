"""Rules that answer in the grid: the symbolic row and rule-derived evidence documents."""

from __future__ import annotations

from pathlib import Path

import pytest

from rulerag.generation.grid import run_row
from rulerag.generation.prompts import Sample
from rulerag.generation.settings import GridConfig, generation_settings
from rulerag.generation.symbolic import add_evidence, read_answers
from rulerag.io import write_jsonl
from rulerag.layout import DataLayout
from tests.helpers import run_frame, write_bank

ANSWERS = [
    {"qid": "t0", "candidates": [
        {"entity": 5, "name": "Kabul", "score": 0.9, "rule": "r", "evidence": ["A visits Kabul."]},
        {"entity": 6, "name": "Iran", "score": 0.4, "rule": "r",
         "evidence": ["A visits Iran.", "A visits Kabul."]},
    ]},
    {"qid": "t1", "candidates": []},
]  # fmt: skip


def toy(tmp_path: Path) -> Path:
    layout = DataLayout(tmp_path / "toy")
    queries = [
        {"qid": "t0", "query": "what does A visit ?", "answers": ["Kabul"], "rule_ids": ["R1"]},
        {"qid": "t1", "query": "what does B visit ?", "answers": ["Rome"], "rule_ids": ["R1"]},
    ]
    write_jsonl(layout.queries("test"), queries)
    corpus = [{"id": "D0", "contents": "A met C."}, {"id": "D1", "contents": "B met D."}]
    write_jsonl(layout.corpus, corpus)
    write_bank(layout.rule_bank, {"R1": "[E1, visits, E2] leads to [E1, meets, E2]"})
    layout.output("bm25-rg").mkdir(parents=True)
    run_frame([("t0", "R1", 1, "D0", 1.0), ("t1", "R1", 1, "D1", 1.0)]).to_parquet(
        layout.run("bm25-rg")
    )
    write_jsonl(layout.rule_answers, ANSWERS)
    return layout.root


SETTINGS = {"retriever": "bm25", "num_documents": 2, "test_queries": None, "recall_k": [10]}


def test_the_symbolic_row_answers_with_the_best_applied_candidate(tmp_path) -> None:
    base = toy(tmp_path)
    grid = GridConfig("symbolic", None, "symbolic", "query")
    result = run_row(base, "toy", grid, generation_settings(SETTINGS))
    assert [r["generation"] for r in result.records] == ["Kabul", ""]
    assert result.metrics["em"] == 0.5 and result.metrics["generator"] == "rules"


def test_evidence_documents_come_first_each_fact_once(tmp_path) -> None:
    base = toy(tmp_path)
    samples = add_evidence(
        [Sample("t0", "q", ("Kabul",), ("A met C.", "A visits Iran."))], read_answers(base), 3
    )
    assert samples[0].documents == ("A visits Kabul.", "A met C.", "A visits Iran.")
    assert samples[0].extra["evidence"] == ["A visits Kabul."]  # Iran's is already retrieved

    class Echo:
        name, stats = "echo", None

        def generate(self, prompts):
            self.prompts = list(prompts)
            return ["Kabul"] * len(prompts)

    echo = Echo()
    grid = GridConfig("ev", "rg", "base", "rule", evidence=2)
    result = run_row(base, "toy", grid, generation_settings(SETTINGS), lambda *a: echo)
    assert "A visits Kabul. A visits Iran. A met C." in echo.prompts[0]
    assert result.records[0]["evidence"] == ["A visits Kabul.", "A visits Iran."]
    assert result.records[1]["evidence"] == []


def test_missing_answers_name_the_stage(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="apply_rules"):
        read_answers(tmp_path)
