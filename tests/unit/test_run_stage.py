"""`run_stage`, the wrapper every stage's `main` runs in, with a stand-in `main`: input the
user can fix exits 2 with its message, no traceback, and the MLflow run says FAILED with that
message (it used to say FINISHED); a bug keeps its traceback. (Real stages failing:
tests/stages/test_stage_failures.py.) And how a stage finds its items: its command line, else
the name of the DVC stage instance it runs as."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline_steps.common import items_from_stage_name, run_stage, stage_inputs
from rulerag.errors import InputError
from rulerag.settings import SettingsError
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


@pytest.mark.parametrize(
    ("stage_name", "options", "items"),
    [
        ("ingest@icews14", [], {"dataset": "icews14"}),
        ("dvc.yaml:report@nell995", [], {"dataset": "nell995"}),
        ("index@icews14-minilm", ["index"], {"dataset": "icews14", "index": "minilm"}),
        ("retrieve@icews14-bm25-rg", ["config"], {"dataset": "icews14", "config": "bm25-rg"}),
        (
            "train_retriever@icews14-minilm-rgft",
            ["encoder", "mode"],
            {"dataset": "icews14", "encoder": "minilm", "mode": "rgft"},
        ),
    ],
)
def test_a_stage_reads_its_items_from_the_instance_dvc_runs(
    stage_name: str, options: list[str], items: dict[str, str]
) -> None:
    assert items_from_stage_name(stage_name, options) == items


@pytest.mark.parametrize(
    ("stage_name", "options", "message"),
    [
        ("ingest@y'; touch /tmp/PWNED; echo '", [], "invalid dataset name"),
        ("index@icews14-bm25;touch /tmp/PWNED;true", ["index"], "invalid item of stage"),
        ("train_retriever@icews14-minilm", ["encoder", "mode"], "expected 2 item"),
        ("ingest", [], "names no item"),
        (None, [], "no --dataset given and no DVC_STAGE"),
    ],
)
def test_a_stage_name_that_breaks_the_rule_is_refused(
    stage_name: str | None, options: list[str], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        items_from_stage_name(stage_name, options)


def test_the_command_line_wins_over_dvc_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DVC_STAGE", "train_retriever@icews14-minilm-rgft")
    stage = stage_inputs("train_retriever", [], None, encoder="e", mode="m")
    assert (stage.dataset, stage.args.encoder, stage.args.mode) == ("icews14", "minilm", "rgft")
    stage = stage_inputs("train_retriever", ["--mode", "ssft"], None, encoder="e", mode="m")
    assert (stage.dataset, stage.args.mode) == ("icews14", "ssft")
    monkeypatch.setenv("DVC_STAGE", "train_retriever@icews14-minilm-xx")
    with pytest.raises(SystemExit):  # argparse: 2, with the choices in the message
        stage_inputs("train_retriever", [], None, {"mode": ["ssft", "rgft"]}, encoder="e", mode="m")
