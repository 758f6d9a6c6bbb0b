"""The retrieval comparison table and plot of `retrieval_report`, and the stage's call."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rulerag.errors import InputError
from rulerag.io import write_json
from rulerag.layout import DataLayout
from rulerag.retrieval.report import plot_recall, recall_table, retrieval_report, to_markdown
from rulerag.retrieval.settings import RetrieveSettings

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


def test_retrieval_report_reads_each_configuration_and_writes_the_comparison(
    tmp_path: Path,
) -> None:
    """The stage's call: every configuration retrieve.indexes x {standard, rg} and
    retrieve.finetune x {ssft, rgft} names, in that order; a missing one names its file."""
    layout = DataLayout(tmp_path / "icews14")
    settings = RetrieveSettings(indexes=("bm25", "minilm"), finetune=(), ks=(1, 10))
    figures = {**METRICS, "bm25-rg": METRICS["bm25-standard"], "minilm-standard": {}}
    for name in settings.config_names()[:-1]:
        write_json(layout.retrieval_metrics(name), figures[name])
    with pytest.raises(InputError, match=r"retrieval_report@icews14: .*minilm-rg/metrics.json"):
        retrieval_report(layout, settings)

    write_json(layout.retrieval_metrics("minilm-rg"), METRICS["minilm-rg"])
    report = retrieval_report(layout, settings)
    assert list(report.metrics) == ["bm25-standard", "bm25-rg", "minilm-standard", "minilm-rg"]
    assert report.ks == [1, 10] and report.metrics["minilm-rg"] == METRICS["minilm-rg"]
    expected = recall_table(report.metrics, [1, 10])
    pd.testing.assert_frame_equal(report.table, expected)
    assert report.markdown == to_markdown("icews14", expected, [1, 10])
    assert report.recall_metrics() == {
        "bm25-standard_recall_at_1": 0.25, "bm25-standard_recall_at_10": 0.5,
        "bm25-rg_recall_at_1": 0.25, "bm25-rg_recall_at_10": 0.5,
        "minilm-rg_recall_at_1": 0.3, "minilm-rg_recall_at_10": 0.6,
    }  # a configuration without figures logs none  # fmt: skip

    out = layout.retrieval_report
    report.write(out)
    assert sorted(p.name for p in out.iterdir()) == sorted(report.FILES)
    pd.testing.assert_frame_equal(pd.read_csv(out / "recall_at_k.csv"), expected)
    assert (out / "results.md").read_text(encoding="utf-8") == report.markdown
    assert (out / "recall_at_k.png").read_bytes()[:4] == b"\x89PNG"
