"""How a stage fails: input the user can fix exits 2 with its message, no traceback, and the
MLflow run says FAILED with that message (it used to say FINISHED)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline_steps.common import run_stage
from rulerag.errors import InputError
from rulerag.kg.registry import get_spec, ingest_settings
from rulerag.tracking import TAG_ERROR, stage_run
from tests.helpers import StageProject, ingest_into

pytestmark = pytest.mark.slow  # an MLflow SQLite store is created per test


def _runs(uri: str, stage: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiments = client.search_experiments()
    return client.search_runs(
        [e.experiment_id for e in experiments], filter_string=f"tags.`rulerag.stage` = '{stage}'"
    )


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_tracking_env: None) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


def test_input_error_exits_2_without_traceback_and_fails_the_run(
    tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def main(argv: list[str] | None) -> int:
        with stage_run("demo", "toy", project_dir=tmp_path):
            raise InputError("toy.tsv:3: empty subject")

    assert run_stage(main) == 2
    err = capsys.readouterr().err
    assert "toy.tsv:3: empty subject" in err and "Traceback" not in err
    (run,) = _runs(store, "demo")
    assert run.info.status == "FAILED"
    assert "toy.tsv:3: empty subject" in run.data.tags[TAG_ERROR]


def test_a_bug_keeps_its_traceback(tmp_path: Path) -> None:
    def main(argv: list[str] | None) -> int:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        run_stage(main)


def test_mine_rules_without_facts_in_its_splits_is_a_failed_run(
    tmp_path: Path, store: str, stage_project: StageProject
) -> None:
    """The stage exited 2 and MLflow recorded FINISHED before."""
    import pipeline_steps.mine_rules as stage

    source = tmp_path / "src"
    source.mkdir()
    (source / "train.tsv").write_text("a\tr\tb\nb\tr\tc\n")
    params = {"ingest": {"custom": {"mykg": {"path": str(source)}}}}
    ingest_into(
        get_spec("mykg", ingest_settings(params["ingest"])),
        tmp_path / "data" / "mykg" / "kg",
        data_dir=None,
        download_dir=tmp_path / "dl",
    )
    overrides = {
        "mine_rules.splits": ["valid"],
        **{f"ingest.{k}": v for k, v in params["ingest"].items()},
    }
    assert stage_project.run(stage, "--dataset", "mykg", params=overrides) == 2
    (run,) = _runs(store, "mine_rules")
    assert run.info.status == "FAILED"
    assert "no facts in splits ['valid']" in run.data.tags[TAG_ERROR]
    assert not (tmp_path / "data" / "mykg" / "rules").exists()


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
