"""`dvc repro` stopped alone (kill -9 or SIGTERM to the dvc process, what a scheduler, a CI
timeout or some terminals' Ctrl-C do) stops its stage too, and the stage publishes nothing.

The stage used to keep running and later publish outputs that dvc.lock does not describe. The
throw-away project has one stage whose script goes through `pipeline_steps.common.run_stage`,
as every real stage does, and writes through `rulerag.io.staged_outputs` inside its MLflow run
(`rulerag.tracking.stage_run`); the tracking store is unreachable, so the run is spooled in
the project, where its final status can be read without a database. DVC runs the command with
$SHELL: bash exec's it (dvc is its parent), dash stays in between; both are tried.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import process_running

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG, /proc"),
]

PROJECT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

STAGE = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from pipeline_steps.common import run_stage
    from rulerag.io import staged_outputs
    from rulerag.tracking import stage_run

    def main(argv):
        with stage_run("sleepy", "toy", project_dir=Path.cwd()):
            with staged_outputs(Path("out"), "sleepy") as staging:
                (staging / "result.txt").write_text("published after dvc was stopped\\n")
                Path("running").write_text(f"{os.getpid()} {staging}")
                time.sleep(60)
        return 0

    if __name__ == "__main__":
        sys.exit(run_stage(main))
    """
)
DVC_YAML = """\
stages:
  sleepy:
    cmd: python stage.py
    deps:
      - stage.py
    outs:
      - out
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "stage.py").write_text(STAGE)
    (root / "dvc.yaml").write_text(DVC_YAML)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([str(BIN / "dvc"), "init", "-q"], cwd=root, check=True, env=base_env())
    return root


def base_env() -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("RULERAG_", "MLFLOW_", "DVC_"))
    }
    return {
        **env,
        "PATH": f"{BIN}{os.pathsep}{env['PATH']}",
        "PYTHONPATH": str(PROJECT),  # this checkout's pipeline_steps and rulerag
        "MLFLOW_TRACKING_URI": "http://127.0.0.1:9/",  # refused at once: the run is spooled
        "DVC_NO_ANALYTICS": "1",
    }


@pytest.mark.parametrize("shell", ["/bin/bash", "/bin/sh"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_stopping_dvc_alone_stops_its_stage_unpublished(
    project: Path, spawned: list[int], sig: signal.Signals, shell: str
) -> None:
    if not Path(shell).is_file():
        pytest.skip(f"no {shell}")
    log = project / "dvc.log"
    with open(log, "wb") as out:
        dvc = subprocess.Popen(
            [str(BIN / "dvc"), "repro"], cwd=project, env={**base_env(), "SHELL": shell},
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    marker = project / "running"
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert dvc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the stage never started"
            time.sleep(0.1)
        time.sleep(0.2)  # the marker is written whole
        pid, staging = marker.read_text().split(" ", 1)
        spawned.append(int(pid))

        os.kill(dvc.pid, sig)  # dvc alone, not its process group
        dvc.wait(timeout=10)
        deadline = time.monotonic() + 8
        while process_running(int(pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not process_running(int(pid)), "the stage outlived dvc"
    finally:
        if dvc.poll() is None:
            dvc.kill()
            dvc.wait()

    assert not (project / "out" / "result.txt").exists(), "the stopped stage published"
    assert not Path(staging).exists(), "the staging folder was not discarded"
    assert "stopped by SIGTERM" in log.read_text()
    (spooled,) = (project / ".mlflow-spool").glob("*/run.json")
    assert json.loads(spooled.read_text())["status"] == "KILLED"
