"""The report of a grid (`rulerag.evaluation.grid_report`) on two tiny row folders and their
robustness twins: Table 2 beside the paper, the robustness table beside Table 7, the paired
claims, every figure computed by hand. (Stage `report` writing exactly that:
tests/stages/test_report_stage.py.)"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rulerag.evaluation.grid_report import grid_report, read_row
from rulerag.layout import DataLayout
from tests.support.grid_rows import CONFIGS, grid_settings, two_row_grid, write_row


@pytest.fixture
def layout(tmp_path: Path) -> DataLayout:
    return two_row_grid(tmp_path / "data")


def test_a_row_folder_gives_its_metrics_and_em_per_query(layout: DataLayout) -> None:
    row = read_row(layout.row("rulerag_icl"))
    assert row is not None and row.metrics["em"] == 0.75
    assert row.em_by_query == {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 0.0}
    assert read_row(layout.row("rulerag_ft")) is None


def test_the_report_sets_rows_beside_the_paper_and_pairs_them(layout: DataLayout) -> None:
    report = grid_report(layout, grid_settings(), ["r2ag"])
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
    report = grid_report(layout, grid_settings(), [])
    assert report.robust_table is None and report.claims.empty
    assert "Robustness" not in report.markdown and "claims" not in report.markdown
    assert report.markdown.count("\n# ") == 0


def test_each_extra_row_sits_in_a_group_that_describes_it() -> None:
    """The evidence row is RuleRAG-ICL with rule-derived documents, an LM answering: it was
    grouped under "Rules alone" beside the symbolic row, which no LM answers (issue 32)."""
    from rulerag.evaluation.report import EXTRA_ROWS, results_table

    groups = {name: group for name, group, _label in EXTRA_ROWS}
    assert groups["symbolic"] == "Rules alone"
    assert groups["rulerag_icl_evidence"] != groups["symbolic"]
    rows = ["symbolic", "rulerag_icl_evidence"]
    table = results_table({}, "icews14", order=rows)
    assert list(table["group"]) == ["Rules alone", "Rules as evidence"]
