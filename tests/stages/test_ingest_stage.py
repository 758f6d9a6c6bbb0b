"""Stage `ingest` on input the user can fix: a bad custom-KG setting exits 2 with the key to
fix and no traceback (the settings' own errors: tests/unit/test_hostile_input.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import StageProject


def test_the_ingest_stage_reports_a_bad_custom_kg_without_a_traceback(
    stage_project: StageProject, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import pipeline_steps.ingest as stage

    custom = {"mykg": {"path": str(tmp_path), "delimiter": "::"}}
    assert stage_project.run(stage, "--dataset", "mykg", params={"ingest.custom": custom}) == 2
    err = capsys.readouterr().err
    assert "ingest.custom.mykg.delimiter" in err and "Traceback" not in err
