"""How a stage fails: input the user can fix exits 2 with its message, no traceback, and the
MLflow run says FAILED with that message (it used to say FINISHED). (`run_stage` itself with a
stand-in `main`: tests/unit/test_run_stage.py.)"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from pipeline_steps.common import run_stage
from rulerag.kg.registry import get_spec
from rulerag.kg.settings import ingest_settings
from rulerag.tracking import TAG_ERROR
from tests.helpers import StageProject, ingest_chain_kg, ingest_into, stage_runs

pytestmark = pytest.mark.slow  # an MLflow SQLite store is created per test


def test_mine_rules_without_facts_in_its_splits_is_a_failed_run(
    tmp_path: Path, mlflow_store: str, stage_project: StageProject
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
    (run,) = stage_runs(mlflow_store, "mine_rules")
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


def test_a_stage_run_with_python_m_names_itself_in_its_error(
    tmp_path: Path, mlflow_store: str
) -> None:
    """Under `python -m`, the failing stage used to call itself `__main__`; its MLflow run
    (recorded though params.yaml failed before the stage's run opened) names it too."""
    import os
    import subprocess
    import sys

    broken = tmp_path / "params.yaml"
    broken.write_text("datasets: [icews14]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pipeline_steps.ingest", "--dataset", "icews14",
         "--params", str(broken)],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=120,
        env={**os.environ, "RULERAG_TRACKING_PROJECT": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 2
    message = done.stderr.splitlines()[-1]  # after MLflow's notes on creating its store
    assert message.startswith("ingest failed: ") and "missing section 'ingest'" in message
    assert "Traceback" not in done.stderr
    (run,) = stage_runs(mlflow_store, "ingest")
    assert (run.info.run_name, run.info.status) == ("ingest", "FAILED")
    assert "missing section 'ingest'" in run.data.tags[TAG_ERROR]


def test_a_params_error_before_the_stage_run_opens_is_a_failed_run(
    mlflow_store: str, stage_project: StageProject, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ingest.duplicates: maybe` fails as `stage_inputs` hands the stage its section, before
    `Stage.track` opened the run: exit 2 and no MLflow run at all, before."""
    import pipeline_steps.ingest as stage

    code = stage_project.run(stage, "--dataset", "icews14", params={"ingest.duplicates": "maybe"})
    assert code == 2 and "Traceback" not in capsys.readouterr().err
    (run,) = stage_runs(mlflow_store, "ingest")
    assert (run.info.run_name, run.info.status) == ("ingest", "FAILED")
    assert "ingest.duplicates" in run.data.tags[TAG_ERROR]


#: mine_rules in a process of its own, stopped while it writes its staged outputs (the
#: confidence plot is drawn after the Parquet files are staged)
SIGTERM_WHILE_WRITING = """
import sys, time
from pathlib import Path
import pipeline_steps.common as common
import rulerag.rules.mining as mining

root = Path(sys.argv[1])
common.PROJECT_DIR, common.DATA_DIR = root, root / "data"

def hang(*args, **kwargs):
    (root / "writing").write_text("")
    time.sleep(60)

mining.plot_confidence = hang
import pipeline_steps.mine_rules as stage
sys.exit(common.run_stage(stage.main, sys.argv[2:]))
"""


def test_mine_rules_stopped_by_sigterm_is_a_killed_run_that_publishes_nothing(
    tmp_path: Path, mlflow_store: str, stage_project: StageProject
) -> None:
    """SIGTERM (a scheduler, a CI timeout, dvc's death) ended the stage on the spot and left no
    MLflow run; now the run is KILLED, the staged files are discarded, exit status 143."""
    import os
    import signal
    import subprocess
    import sys
    import time

    params = stage_project.write_params(ingest_chain_kg(tmp_path, stage_project))
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_store}
    env.pop("DVC_STAGE", None)
    argv = ["--dataset", "mykg", "--params", str(params)]
    process = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_WHILE_WRITING, str(tmp_path), *argv],
        cwd=Path(__file__).resolve().parents[2], env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "writing").exists() and process.poll() is None:
            assert time.monotonic() < deadline, "mine_rules never reached its writes"
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, err
    message = "mine_rules stopped by SIGTERM: what it had staged was discarded"
    assert err.splitlines()[-1] == message and "Traceback" not in err
    (run,) = stage_runs(mlflow_store, "mine_rules")
    assert (run.info.run_name, run.info.status) == ("mine_rules", "KILLED")
    assert run.data.tags[TAG_ERROR] == "StageTerminated: stopped by SIGTERM"
    rules_dir = stage_project.layout("mykg").rules_dir
    assert not rules_dir.exists() or list(rules_dir.iterdir()) == []


def test_a_truncated_facts_parquet_is_one_failed_run(
    tmp_path: Path, mlflow_store: str, stage_project: StageProject
) -> None:
    """A cut-short input fails the stage and its one MLflow run says so."""
    import pipeline_steps.mine_rules as stage

    overrides = ingest_chain_kg(tmp_path, stage_project)
    facts = stage_project.layout("mykg").kg / "facts.parquet"
    facts.write_bytes(facts.read_bytes()[: facts.stat().st_size // 2])
    with contextlib.suppress(Exception):  # an InputError (exit 2) once Parquet is checked
        stage_project.run(stage, "--dataset", "mykg", params=overrides)
    (run,) = stage_runs(mlflow_store, "mine_rules")
    assert (run.info.run_name, run.info.status) == ("mine_rules", "FAILED")
    assert "facts.parquet" in run.data.tags[TAG_ERROR] or "Parquet" in run.data.tags[TAG_ERROR]
