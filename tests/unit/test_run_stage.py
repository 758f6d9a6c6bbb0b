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
from rulerag.tracking import TAG_ERROR, TAG_STAGE_INSTANCE, stage_run
from tests.helpers import stage_runs


@pytest.mark.slow  # an MLflow SQLite store is created
def test_input_error_exits_2_without_traceback_and_fails_the_run(
    tmp_path: Path, mlflow_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def main(argv: list[str] | None) -> int:
        with stage_run("demo", "toy", project_dir=tmp_path):
            raise InputError("toy.tsv:3: empty subject")

    assert run_stage(main) == 2
    err = capsys.readouterr().err
    assert "toy.tsv:3: empty subject" in err and "Traceback" not in err
    (run,) = stage_runs(mlflow_store, "demo")
    assert run.info.status == "FAILED"
    assert "toy.tsv:3: empty subject" in run.data.tags[TAG_ERROR]


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_store: str) -> str:
    """A throw-away store, and the stage process's run opened under tmp_path."""
    import pipeline_steps.common as common

    monkeypatch.setattr(common, "PROJECT_DIR", tmp_path)
    return mlflow_store


@pytest.mark.slow  # an MLflow SQLite store is created
def test_an_error_before_the_stage_opens_its_run_is_recorded(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A params or input error raised before `Stage.track` (in `stage_inputs`, a plan read
    before the run) left no MLflow run: the run is open from the stage's first line."""

    def main(argv: list[str] | None) -> int:
        raise InputError("params.yaml: ingest.duplicates: 'maybe' is not one of drop, keep")

    assert run_stage(main, ["--dataset", "toy"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    (run,) = stage_runs(store, "test_run_stage")  # the stage's module names it
    assert (run.info.run_name, run.info.status) == ("test_run_stage", "FAILED")
    assert "ingest.duplicates: 'maybe'" in run.data.tags[TAG_ERROR]


@pytest.mark.slow  # an MLflow SQLite store is created
def test_the_stage_run_adopts_the_process_run_and_a_launcher_sends_none(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One run per stage: the stage's `stage_run` is the process's run (named and tagged as it
    says, started when the process did); a process that opens none and returns (a torchrun
    launcher) sends nothing; a usage error under DVC is recorded with its message and the
    instance DVC ran."""
    started: list[int] = []

    def main(argv: list[str] | None) -> int:
        with stage_run("demo", "toy", project_dir=tmp_path) as run:
            started.append(run._record.start_time)
            run.set_tags({TAG_STAGE_INSTANCE: "demo@toy-x"})
        return 0

    def launcher(argv: list[str] | None) -> int:
        return 0

    assert run_stage(main, ["--dataset", "toy"]) == 0
    assert run_stage(launcher, ["--dataset", "toy"]) == 0
    (run,) = stage_runs(store, "demo")
    assert (run.info.run_name, run.info.status) == ("x (demo)", "FINISHED")
    assert run.data.tags[TAG_STAGE_INSTANCE] == "demo@toy-x" and not stage_runs(
        store, "test_run_stage"
    )

    def usage(argv: list[str] | None) -> int:
        stage_inputs("train_retriever", argv, None, {"mode": ["rgft"]}, encoder="e", mode="m")
        return 0

    monkeypatch.setenv("DVC_STAGE", "dvc.yaml:train_retriever@toy-minilm-xx")
    with pytest.raises(SystemExit) as caught:
        run_stage(usage, [])
    assert caught.value.code == 2
    (failed,) = stage_runs(store, "train_retriever")
    assert failed.info.run_name == "minilm-xx (train_retriever)"
    assert failed.info.status == "FAILED"
    assert "--mode: 'xx' is not one of ['rgft']" in failed.data.tags[TAG_ERROR]


#: a stage process that gets SIGTERM (what a scheduler, a CI timeout or dvc's death sends)
#: before its own run opens (`early`) or while it writes its staged outputs (`writing`)
SIGTERMED = """
import os, signal, sys, time
from pathlib import Path
from pipeline_steps.common import run_stage
from rulerag.io import staged_outputs
from rulerag.tracking import stage_run

out = Path(sys.argv[1])

def main(argv):
    if argv[-1] == "early":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    with stage_run("demo", "toy", project_dir=out.parent):
        with staged_outputs(out, "demo") as staging:
            (staging / "half.json").write_text("{}")
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
    return 0

main.__module__ = "pipeline_steps.demo"
sys.exit(run_stage(main, ["--dataset", "toy", sys.argv[2]]))
"""


@pytest.mark.slow  # an MLflow SQLite store is created, in a subprocess
@pytest.mark.parametrize("when", ["early", "writing"])
def test_a_stage_stopped_by_sigterm_leaves_a_killed_run_and_publishes_nothing(
    when: str, tmp_path: Path, clean_tracking_env: None
) -> None:
    """SIGTERM used to end the stage on the spot: no MLflow run at all. Now it stops the stage
    as an exception: the run is KILLED, the staged outputs are discarded, exit status 143."""
    import os
    import subprocess
    import sys

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "RULERAG_TRACKING_PROJECT": str(tmp_path)}
    env.pop("DVC_STAGE", None)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", SIGTERMED, str(out), when],
        cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 128 + 15, done.stderr
    assert (
        done.stderr.splitlines()[-1] == "demo stopped by SIGTERM: what it had staged was discarded"
    )
    assert "Traceback" not in done.stderr
    (run,) = stage_runs(uri, "demo")
    assert (run.info.run_name, run.info.status) == ("demo", "KILLED")
    assert run.data.tags[TAG_ERROR] == "StageTerminated: stopped by SIGTERM"
    assert not out.exists() or list(out.iterdir()) == []


def test_a_sigterm_while_the_run_is_sent_waits_until_it_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop request during the flush is held: the run is not cut in half, then the stop is
    raised."""
    import os
    import signal

    from rulerag.tracking import StageTerminated
    from rulerag.tracking import run as run_module

    sent: list[str] = []

    def send_run(record, *args: object) -> str:
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # else pytest would die
        os.kill(os.getpid(), signal.SIGTERM)
        sent.append(record.status)
        return "id"

    monkeypatch.setattr(run_module, "send_run", send_run)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(StageTerminated), stage_run("demo", "toy", project_dir=tmp_path):
        pass
    assert sent == ["FINISHED"]
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_second_sigterm_does_not_cut_the_clean_up_short() -> None:
    """dvc's group gets one SIGTERM and dvc's death sends another: the stop is raised once,
    the second is ignored while the stage unwinds."""
    import os
    import signal
    import time

    from rulerag.tracking import StageTerminated, stop_on_sigterm

    cleaned = []
    with pytest.raises(StageTerminated), stop_on_sigterm():
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # else pytest would die
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)
            cleaned.append("staging removed")
    assert cleaned == ["staging removed"]


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
