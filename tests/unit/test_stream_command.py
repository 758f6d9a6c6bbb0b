"""A stage task stopped the ways Airflow stops it leaves nothing of its command running.

`stream_command` (what the DAG's stage tasks run `dvc repro`, pull and push through) used to
terminate the process it started and nothing else; `dvc` dies of that and its stage, a child of
dvc, kept running and later published outputs dvc.lock does not describe. The stand-in for dvc
here does the same: it starts a long-running child and dies of SIGTERM without passing it on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rulerag.orchestration.workspaces import stream_command
from tests.helpers import process_running

PROJECT = Path(__file__).resolve().parents[2]

#: dvc's stand-in: starts `sys.argv[1]` (python code) as a child, prints "<own pid> <child
#: pid>", and sleeps; SIGTERM kills it by default, leaving the child as dvc leaves its stage
SPAWNER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
    print(os.getpid(), child.pid, flush=True)
    time.sleep(120)
    """
)
SLEEPER = "import time; time.sleep(120)"
#: a stage as DVC runs one: `run_stage` of pipeline_steps.common with DVC_STAGE set
STAGE = textwrap.dedent(
    """
    import os, sys, time
    from pipeline_steps.common import run_stage
    def main(argv):
        print("running", flush=True)
        time.sleep(120)
        return 0
    os.environ["DVC_STAGE"] = "demo@toy"
    sys.exit(run_stage(main))
    """
)
#: the task process: Airflow 3's task runner answers SIGTERM by calling the operator's
#: on_kill() and returning (task_runner.py `_on_term`); then the task's callable runs the command
TASK = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from rulerag.orchestration.workspaces import stream_command
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    stream_command([sys.executable, "-c", sys.argv[1], sys.argv[2]], Path.cwd(), os.environ,
                   lambda line: print(line, flush=True))
    """
)


#: how long a stopped process may take to go: generous, since a loaded machine is slow to
#: deliver and act on signals (5 s failed once with three test workers on two cores); a
#: process nobody stops lives on, so the checks still fail without the group kill
GRACE = 20


def gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(process_running(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(PROJECT)}


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_an_exception_in_the_task_stops_the_commands_whole_group(
    tmp_path: Path, spawned: list[int]
) -> None:
    """What Airflow's execution timeout (raised in the task) or a Ctrl-C does: the stand-in's
    child survived the old terminate()."""

    def echo(line: str) -> None:
        if not line.split() or not all(part.isdigit() for part in line.split()):
            return  # the echoed command
        spawned.extend(int(p) for p in line.split())
        raise TimeoutError("the task's execution_timeout")

    with pytest.raises(TimeoutError):
        stream_command([sys.executable, "-c", SPAWNER, SLEEPER], tmp_path, env(), echo)
    assert len(spawned) == 2
    assert gone_within(spawned, GRACE), "the command's child outlived the task"


def start_task(tmp_path: Path, child: str, spawned: list[int]) -> subprocess.Popen:
    """The task process (`TASK`) running the stand-in, in a process group of its own as
    Airflow 3 starts one; returns once both have started, their pids in `spawned` (the task's,
    the stand-in's, its child's)."""
    task = subprocess.Popen(
        [sys.executable, "-c", TASK, SPAWNER, child],
        cwd=tmp_path, env=env(), stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    spawned.append(task.pid)
    assert task.stdout is not None
    for line in task.stdout:  # after the echoed command (the code spans lines)
        if line.split() and all(part.isdigit() for part in line.split()):
            spawned.extend(int(p) for p in line.split())
            return task
    raise AssertionError(f"the task ended first, status {task.wait()}")


@pytest.mark.parametrize("to_group", [False, True], ids=["task-alone", "task-group"])
def test_sigterm_to_the_task_stops_the_commands_whole_group(
    tmp_path: Path, spawned: list[int], to_group: bool
) -> None:
    """SIGTERM to the task process alone (Airflow's supervisor forwards a pod's SIGTERM so, a
    Celery revoke sends it so): the task used to carry on, its command with it. To the task's
    process group (Airflow 3's own kill): the command, in a session of its own now, is out of
    that group's reach and must still be stopped."""
    task = start_task(tmp_path, SLEEPER, spawned)
    if to_group:
        os.killpg(task.pid, signal.SIGTERM)
    else:
        os.kill(task.pid, signal.SIGTERM)
    assert gone_within(spawned[1:], GRACE), "the command or its child outlived the stopped task"
    assert task.wait(timeout=10) != 0


def test_a_task_killed_outright_takes_dvc_and_its_stage_along(
    tmp_path: Path, spawned: list[int]
) -> None:
    """SIGKILL to the task (Airflow's escalation 5 s after SIGTERM, an OOM kill): no `finally`
    runs there, so the kernel tells the command (PR_SET_PDEATHSIG), and the stage, whose
    parent the command is, stops when it dies (pipeline_steps.common.run_stage)."""
    task = start_task(tmp_path, STAGE, spawned)
    assert task.stdout is not None
    assert task.stdout.readline().strip() == "running"  # run_stage has armed it
    os.kill(task.pid, signal.SIGKILL)
    assert gone_within(spawned[1:], GRACE), "the command or its stage outlived the killed task"
