"""`run_stage`, the wrapper every stage's `main` runs in, with a stand-in `main`: input the
user can fix exits 2 with its message, no traceback, and the MLflow run says FAILED with that
message (it used to say FINISHED); a bug keeps its traceback. (Real stages failing:
tests/stages/test_stage_failures.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline_steps.common import run_stage
from rulerag.errors import InputError
from rulerag.tracking import TAG_ERROR, stage_run
from tests.helpers import stage_runs


@pytest.mark.slow  # an MLflow SQLite store is created
def test_input_error_exits_2_without_traceback_and_fails_the_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    clean_tracking_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)

    def main(argv: list[str] | None) -> int:
        with stage_run("demo", "toy", project_dir=tmp_path):
            raise InputError("toy.tsv:3: empty subject")

    assert run_stage(main) == 2
    err = capsys.readouterr().err
    assert "toy.tsv:3: empty subject" in err and "Traceback" not in err
    (run,) = stage_runs(store, "demo")
    assert run.info.status == "FAILED"
    assert "toy.tsv:3: empty subject" in run.data.tags[TAG_ERROR]


def test_a_bug_keeps_its_traceback(tmp_path: Path) -> None:
    def main(argv: list[str] | None) -> int:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        run_stage(main)
