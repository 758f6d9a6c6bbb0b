"""Stage `report` on two tiny row folders and their robustness twins: it writes, prints and
lists in its manifest exactly what `grid_report` returns for them (whose figures
tests/unit/test_grid_report.py computes by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rulerag.evaluation.grid_report import REPORT_FILES, grid_report
from tests.support.grid_rows import CONFIGS, ROBUST_ROWS, grid_settings, two_row_grid


@pytest.mark.slow  # an MLflow SQLite store is created
def test_the_report_stage_writes_the_report(
    tmp_path: Path, monkeypatch, stage_project, clean_tracking_env, capsys
) -> None:
    import pipeline_steps.report as stage

    layout = two_row_grid(stage_project.root / "data")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    overrides = {
        "datasets": ["icews14"],
        "generation.configs": CONFIGS,
        "generation.robustness_rows": ROBUST_ROWS,
    }
    assert stage_project.run(stage, "--dataset", "icews14", params=overrides) == 0
    expected = grid_report(layout, grid_settings(), [])
    out = stage_project.layout("icews14").report
    assert (out / "results.md").read_text() == expected.markdown
    assert expected.markdown in capsys.readouterr().out
    direct = tmp_path / "direct"
    direct.mkdir()
    expected.write(direct)
    for name in REPORT_FILES:
        assert (out / name).read_bytes() == (direct / name).read_bytes(), name
    assert set(json.loads((out / "manifest.json").read_text())["files"]) == set(REPORT_FILES)
