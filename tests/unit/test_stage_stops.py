"""A stage under DVC stops when its dvc is gone, even when dvc died before the stage armed the
parent-death signal (while it imported: seconds, for the stages that load torch). `run_stage`
with a stand-in `main`; dvc killed while the stage runs: tests/pipeline/test_stopped_dvc.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]

#: the stage: imports pipeline_steps (which notes its parent), says so, waits until its
#: parent has died, then runs `run_stage` as under DVC; its status goes to argv[3]
STAGE = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import pipeline_steps
    parent = os.getppid()
    Path(sys.argv[1]).write_text("imported")
    while os.getppid() == parent:
        time.sleep(0.02)
    from pipeline_steps.common import run_stage
    def main(argv):
        Path(sys.argv[2]).write_text("main ran")
        return 0
    os.environ["DVC_STAGE"] = "demo@toy"
    Path(sys.argv[3]).write_text(str(run_stage(main, [])))
    """
)
#: dvc's stand-in: starts the stage and dies once the stage has imported pipeline_steps
SPAWNER = textwrap.dedent(
    """
    import subprocess, sys, time
    from pathlib import Path
    subprocess.Popen([sys.executable, "-c", *sys.argv[1:]])
    while not Path(sys.argv[2]).exists():
        time.sleep(0.02)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")
def test_a_stage_whose_dvc_died_while_it_imported_stops_before_main(tmp_path: Path) -> None:
    imported, ran, status = (tmp_path / name for name in ("imported", "ran", "status"))
    env = {  # the KILLED run it records goes to a store of its own, not the project's
        **os.environ,
        "PYTHONPATH": str(PROJECT),
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "RULERAG_TRACKING_PROJECT": str(tmp_path),
    }
    args = [STAGE, str(imported), str(ran), str(status)]
    subprocess.run([sys.executable, "-c", SPAWNER, *args], env=env, check=True, timeout=60)
    deadline = time.monotonic() + 30
    while not status.exists():
        assert time.monotonic() < deadline, "the orphaned stage never finished"
        time.sleep(0.05)
    time.sleep(0.1)  # written whole
    assert not ran.exists(), "main ran after dvc had died"
    assert status.read_text() == "143"
