"""How a stage fails: input the user can fix exits 2 with its message, no traceback, and the
MLflow run says FAILED with that message (it used to say FINISHED). (`run_stage` itself with a
stand-in `main`: tests/unit/test_run_stage.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline_steps.common import run_stage
from rulerag.kg.registry import get_spec, ingest_settings
from rulerag.tracking import TAG_ERROR
from tests.helpers import StageProject, ingest_into, stage_runs

pytestmark = pytest.mark.slow  # an MLflow SQLite store is created per test


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_tracking_env: None) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


def test_mine_rules_without_facts_in_its_splits_is_a_failed_run(
    tmp_path: Path, store: str, stage_project: StageProject
) -> None:
    """The stage exited 2 and MLflow recorded FINISHED before."""
    import pipeline_steps.mine_rules as stage

    source = tmp_path / "src"
    source.mkdir()
    (source / "train.tsv").write_text("a\tr\tb\nb\tr\tc\n")
    params = {"ingest": {"custom": {"mykg": {"path": str(source)}}}}
    layout = stage_project.layout("mykg")
    ingest_into(
        get_spec("mykg", ingest_settings(params["ingest"])),
        layout.kg,
        data_dir=None,
        download_dir=tmp_path / "dl",
    )
    overrides = {
        "mine_rules.splits": ["valid"],
        **{f"ingest.{k}": v for k, v in params["ingest"].items()},
    }
    assert stage_project.run(stage, "--dataset", "mykg", params=overrides) == 2
    (run,) = stage_runs(store, "mine_rules")
    assert run.info.status == "FAILED"
    assert "no facts in splits ['valid']" in run.data.tags[TAG_ERROR]
    assert not layout.rules_dir.exists()


@pytest.mark.parametrize("name", ["../../x", "x;touch pwned", "x y"])
def test_a_stage_refuses_a_dataset_name_that_is_not_an_identifier(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`../../x` used to write outside data/; the name now fails before anything is read."""
    import pipeline_steps.ingest as stage

    with pytest.raises(SystemExit) as caught:
        run_stage(stage.main, ["--dataset", name])
    assert caught.value.code == 2
    assert "invalid dataset name" in capsys.readouterr().err


def test_a_stage_run_with_python_m_names_itself_in_its_error(tmp_path: Path) -> None:
    """Under `python -m`, the failing stage used to call itself `__main__`."""
    import subprocess
    import sys

    broken = tmp_path / "params.yaml"
    broken.write_text("datasets: [icews14]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pipeline_steps.ingest", "--dataset", "icews14",
         "--params", str(broken)],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("ingest failed: ") and "missing section 'ingest'" in done.stderr
    assert "Traceback" not in done.stderr
