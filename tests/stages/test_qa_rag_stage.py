"""Stage `qa_rag` on an ordinary QA set with RuleQA's rules (the anonymous version's Table 3):
the offline MiniLM matches the rules, BM25 searches with and without them, SmolLM2 answers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import StageProject, require_minilm
from tests.support.qa_sets import write_toy_fixture


@pytest.mark.slow
def test_stage_answers_a_fixture_set_with_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage_project: StageProject
) -> None:
    """The stage end to end on the fixture: MiniLM matches the ICEWS-style rules to the
    questions phrased like them, BM25 searches with and without them, SmolLM2-135M answers
    both rows; files, metrics and the report are there."""
    require_minilm()
    import pipeline_steps.qa_rag as stage

    qa_sets = tmp_path / "qa"  # outside data/<dataset>/: the QA sets' own folder
    write_toy_fixture(qa_sets, stage_project.layout("icews14").rule_bank)
    overrides = {
        "qa.datasets": ["toyqa"],
        "qa.dir": str(qa_sets),
        "qa.retriever": "bm25",
        "build_benchmark.rule_selection.threshold": 0.2,  # MiniLM: 0.28 / 0.38 here
        "generation.max_new_tokens": 4,
        "generation.test_queries": None,
    }
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")

    assert stage_project.run(stage, "--dataset", "toyqa", params=overrides) == 0
    layout = stage_project.layout("toyqa")
    test = [json.loads(line) for line in layout.queries("test").open()]
    by_id = {r["qid"]: r["rule_ids"] for r in test}
    assert by_id["1"][0] == "icews14:r1" and by_id["2"][0] == "icews14:r2"
    assert by_id["3"] == []  # no rule is near a capital-city question
    guided = pd.read_parquet(layout.run("bm25-rg"))
    assert set(guided.loc[guided["qid"] == "1", "rule"]) >= {"icews14:r1"}
    assert set(guided.loc[guided["qid"] == "3", "rule"]) == {""}  # searched alone
    report = json.loads((layout.qa / "metrics.json").read_text())
    assert set(report["rows"]) == {"standard_rag", "rulerag_icl"}
    assert report["rows"]["standard_rag"]["queries"] == 3
    assert report["rows"]["standard_rag"]["recall_at_10"] == 1.0  # every answer is in the corpus
    results = (layout.qa / "results.md").read_text()
    assert "RuleRAG-ICL above Standard RAG" in results and "| Contriever + LLAMA2_7B |" in results
    prompts = [
        json.loads(x)["prompt"] for x in (layout.row("rulerag_icl") / "predictions.jsonl").open()
    ]
    assert any("Consult" in p and "Rule One:" in p for p in prompts)
