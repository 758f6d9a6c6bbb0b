"""The report of a grid (`rulerag.evaluation.grid_report`) on two tiny row folders and their
robustness twins: Table 2 beside the paper, the robustness table beside Table 7, the paired
claims, every figure computed by hand; and stage `report` writing exactly that."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rulerag.evaluation.grid_report import REPORT_FILES, grid_report, read_row
from rulerag.generation.config import generation_settings
from rulerag.generation.grid import RowResult
from rulerag.io import staged_outputs
from rulerag.layout import ROBUST, DataLayout

PROJECT = Path(__file__).resolve().parents[2]
CONFIGS = ["standard_rag", "rulerag_icl", "rulerag_ft"]  # rulerag_ft has not run


def write_row(folder: Path, em: dict[str, int], token_f1: float, recall: float) -> None:
    """A row folder as `generate` writes it: per-query EM in predictions.jsonl, the means in
    metrics.json (with its manifest)."""
    records = [{"qid": qid, "em": float(hit), "prediction": "x"} for qid, hit in em.items()]
    metrics = {
        "queries": len(em),
        "em": sum(em.values()) / len(em),
        "token_f1": token_f1,
        "recall_at_10": recall,
        "generator": "base:smollm2",
    }
    with staged_outputs(folder, "generate") as staging:
        RowResult(records, metrics).write(staging)


@pytest.fixture
def layout(tmp_path: Path) -> DataLayout:
    layout = DataLayout.of(tmp_path / "data", "icews14")
    write_row(layout.row("standard_rag"), {"q1": 1, "q2": 0, "q3": 0, "q4": 0}, 0.5, 0.75)
    write_row(layout.row("rulerag_icl"), {"q1": 1, "q2": 1, "q3": 1, "q4": 0}, 0.8, 1.0)
    write_row(layout.row("standard_rag", ROBUST), {"r1": 0, "r2": 0, "r3": 0}, 0.1, 0.5)
    write_row(layout.row("rulerag_icl", ROBUST), {"r1": 1, "r2": 1, "r3": 1}, 1.0, 0.5)
    return layout


def settings():
    import yaml

    section = yaml.safe_load((PROJECT / "params.yaml").read_text())["generation"]
    return generation_settings(
        {**section, "configs": CONFIGS, "robustness_rows": ["standard_rag", "rulerag_icl"]}
    )


def test_a_row_folder_gives_its_metrics_and_em_per_query(layout: DataLayout) -> None:
    row = read_row(layout.row("rulerag_icl"))
    assert row is not None and row.metrics["em"] == 0.75
    assert row.em_by_query == {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 0.0}
    assert read_row(layout.row("rulerag_ft")) is None


def test_the_report_sets_rows_beside_the_paper_and_pairs_them(layout: DataLayout) -> None:
    report = grid_report(layout, settings(), ["r2ag"])
    assert report.rows == [*CONFIGS, "r2ag"]
    table = report.table.set_index("config")
    assert list(table.index) == report.rows  # rows that have not run stay, empty
    assert table.loc["standard_rag", ["R@10", "EM", "T-F1"]].tolist() == [75.0, 25.0, 50.0]
    assert table.loc["rulerag_icl", ["R@10", "EM", "T-F1"]].tolist() == [100.0, 75.0, 80.0]
    assert table.loc["rulerag_icl", ["paper R@10", "paper EM", "paper T-F1"]].tolist() == [
        24.2, 9.8, 29.1
    ]  # fmt: skip
    assert pd.isna(table.loc["rulerag_ft", "EM"]) and table.loc["rulerag_ft", "paper EM"] == 20.5
    robust = report.robust_table.set_index("config")
    assert robust.loc["rulerag_icl", ["EM", "paper EM"]].tolist() == [100.0, 11.9]  # Table 7
    # rulerag_icl alone is right on q2, q3: 2 discordant queries, p = 2 * 0.5**2; on the
    # robust queries on r1-r3: p = 2 * 0.5**3
    claims = report.claims.set_index("better")
    assert list(claims.index) == ["rulerag_icl", "robust/rulerag_icl"]
    paired = claims.loc["rulerag_icl"]
    assert (paired["queries"], paired["EM better"], paired["EM worse"]) == (4, 75.0, 25.0)
    assert (paired["only better right"], paired["only worse right"]) == (2, 0)
    assert paired["p"] == pytest.approx(0.5) and paired["verdict"] == "same direction"
    assert claims.loc["robust/rulerag_icl", "p"] == pytest.approx(0.25)
    md = report.markdown
    assert md.startswith("# icews14: RuleRAG result grid\n")
    assert "- no results yet for: rulerag_ft, r2ag\n" in md
    assert "test queries per row: 4\n" in md and "- generators: base:smollm2\n" in md
    # (queries print as 4.0 beside the empty rows: a column with gaps is a float column)
    assert (
        "| Standard RAG | retriever + generator | 4.0 | 75.0 | 25.0 | 50.0 | 14.1 | 5.2 | 24.4 |\n"
        in md
    )
    assert "\n# Robustness: the same rows on queries that need no rule\n" in md
    assert (
        "| RuleRAG-ICL above Standard RAG (`rulerag_icl` vs `standard_rag`) | 4 | 75.0 | 25.0 "
        "| 2 | 0 | 0.500 | same direction |"
    ) in md
    assert report.metrics() == {
        "standard_rag.recall_at_10": 75.0, "standard_rag.em": 25.0,
        "standard_rag.token_f1": 50.0, "rulerag_icl.recall_at_10": 100.0,
        "rulerag_icl.em": 75.0, "rulerag_icl.token_f1": 80.0,
        "claim.rulerag_icl_vs_standard_rag.p": pytest.approx(0.5),
        "claim.robust/rulerag_icl_vs_robust/standard_rag.p": pytest.approx(0.25),
    }  # fmt: skip


def test_without_robust_rows_or_claims_only_table_2(tmp_path: Path) -> None:
    layout = DataLayout.of(tmp_path / "data", "yago")
    write_row(layout.row("standard_rag"), {"q1": 1, "q2": 0}, 0.5, 0.5)
    report = grid_report(layout, settings(), [])
    assert report.robust_table is None and report.claims.empty
    assert "Robustness" not in report.markdown and "claims" not in report.markdown
    assert report.markdown.count("\n# ") == 0


@pytest.mark.slow  # an MLflow SQLite store is created
def test_the_report_stage_writes_the_report(
    layout: DataLayout, tmp_path: Path, monkeypatch, stage_project, clean_tracking_env, capsys
) -> None:
    import pipeline_steps.report as stage

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    overrides = {
        "datasets": ["icews14"],
        "generation.configs": CONFIGS,
        "generation.robustness_rows": ["standard_rag", "rulerag_icl"],
    }
    assert stage_project.run(stage, "--dataset", "icews14", params=overrides) == 0
    expected = grid_report(layout, settings(), [])
    out = stage_project.layout("icews14").report
    assert (out / "results.md").read_text() == expected.markdown
    assert expected.markdown in capsys.readouterr().out
    direct = tmp_path / "direct"
    direct.mkdir()
    expected.write(direct)
    for name in REPORT_FILES:
        assert (out / name).read_bytes() == (direct / name).read_bytes(), name
    assert set(json.loads((out / "manifest.json").read_text())["files"]) == set(REPORT_FILES)
