"""The retrieval comparison table and plot of `retrieval_report`."""

from __future__ import annotations

from pathlib import Path

from rulerag.retrieval.report import plot_recall, recall_table, to_markdown

METRICS = {
    "bm25-standard": {"recall_at_1": 0.25, "recall_at_10": 0.5, "loose_recall_at_10": 0.5},
    "minilm-rg": {"recall_at_1": 0.3, "recall_at_10": 0.6, "loose_recall_at_10": 0.7},
    "minilm-rgft": {"recall_at_1": 0.5, "recall_at_10": 0.9, "loose_recall_at_10": 0.95},
}


def test_table_markdown_and_plot(tmp_path: Path) -> None:
    table = recall_table(METRICS, [1, 10])
    assert list(table.columns) == ["config", "k", "recall", "loose_recall"]
    assert len(table) == 6
    text = to_markdown("icews14", table, [1, 10])
    lines = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if "|" in line}
    # percent figures; the paper's DPR and Contriever Recall@10 beside dense configurations
    assert lines["bm25-standard"] == "| bm25-standard | 25.0 | 50.0 | 50.0 | – | – |"
    assert lines["minilm-rg"] == "| minilm-rg | 30.0 | 60.0 | 70.0 | 24.2 | 45.5 |"
    assert lines["minilm-rgft"] == "| minilm-rgft | 50.0 | 90.0 | 95.0 | 45.1 | – |"
    plot_recall("icews14", table, tmp_path / "recall.tmp")
    assert (tmp_path / "recall.tmp").read_bytes()[:4] == b"\x89PNG"
