"""A stage task stopped the ways Airflow stops it leaves nothing of its command running.

`stream_command` (what the DAG's stage tasks run `dvc repro`, pull and push through) used to
terminate the process it started and nothing else; `dvc` dies of that and its stage, a child of
dvc, kept running and later published outputs dvc.lock does not describe. The stand-in for dvc
here does the same: it starts a long-running child and dies of SIGTERM without passing it on.
"""

from __future__ import annotations

import io
import locale
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from rulerag.orchestration.processes import output_lines
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

#: the task again, but the SIGTERM that stops it is taken at the C level while its main thread
#: waits for the command's output without being interrupted: what a SIGTERM arriving in the
#: instant between the task's last check for signals and its next blocking read does (CI of
#: stop 55 failed so). To make that instant certain, another thread of the task takes the signal
#: (the main thread blocks it) half a second after the stand-in's pids are echoed
TASK_SIGNAL_MISSES_THE_READ = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from pathlib import Path
    from rulerag.orchestration.workspaces import stream_command
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    def stop_me():
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)
    def echo(line):
        print(line, flush=True)
        if line.split() and all(part.isdigit() for part in line.split()):
            threading.Thread(target=stop_me).start()
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    stream_command([sys.executable, "-c", sys.argv[1], sys.argv[2]], Path.cwd(), os.environ, echo)
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

    before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before)
    with pytest.raises(TimeoutError) as raised:
        stream_command([sys.executable, "-c", SPAWNER, SLEEPER], tmp_path, env(), echo)
    # undone though the traceback (which keeps stream_command's frame) lives on
    assert raised.tb is not None
    assert signal.set_wakeup_fd(before) == before, "the wakeup descriptor was left set"
    assert len(spawned) == 2
    assert gone_within(spawned, GRACE), "the command's child outlived the task"


def start_task(
    tmp_path: Path, child: str, spawned: list[int], task_code: str = TASK
) -> subprocess.Popen:
    """The task process (`TASK`) running the stand-in, in a process group of its own as
    Airflow 3 starts one; returns once both have started, their pids in `spawned` (the task's,
    the stand-in's, its child's)."""
    task = subprocess.Popen(
        [sys.executable, "-c", task_code, SPAWNER, child],
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


def test_a_sigterm_taken_while_the_task_waits_for_output_still_stops_the_command(
    tmp_path: Path, spawned: list[int]
) -> None:
    """The signal's Python handler runs only when the main thread returns from what it waits
    in: a blocking read of a silent command's output never returned (until the command wrote
    again: hours for a quiet stage), and the command kept running."""
    task = start_task(tmp_path, SLEEPER, spawned, TASK_SIGNAL_MISSES_THE_READ)
    assert gone_within(spawned[1:], GRACE), "the command outlived the task's SIGTERM"
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


#: a command's output cut into the pieces it arrives in: Windows and old-Mac line ends, a
#: two-byte character and a \r\n cut between pieces, a byte the locale cannot decode, a last
#: line without its newline
PIECES = [b"one\r\ntwo\rthr", b"ee\n\xc3", b"\xa9t\r", b"\n\xff\n", b"", b"last"]


def test_output_lines_decode_as_a_text_mode_popen_does() -> None:
    """The lines `stream_command` echoes are the lines Python's own text decoding (what
    `Popen(text=True)` reads with) makes of the same bytes, however they arrive, with an
    undecodable byte replaced instead of failing the run."""
    data = b"".join(PIECES)
    expected = io.TextIOWrapper(
        io.BytesIO(data), encoding=locale.getpreferredencoding(False), errors="replace"
    ).read()
    read_end, write_end = os.pipe()

    def write() -> None:
        for piece in PIECES:
            os.write(write_end, piece)
            time.sleep(0.05)
        os.close(write_end)

    writer = threading.Thread(target=write)
    writer.start()
    with open(read_end, "rb", buffering=0) as stream:
        lines = list(output_lines(stream))
    writer.join()
    assert lines == expected.split("\n")
    assert lines[:3] == ["one", "two", "three"] and lines[-1] == "last"


def test_output_lines_give_back_the_wakeup_descriptor_set_before() -> None:
    """An asyncio loop's wakeup descriptor (set before) is set again after, and gets the
    signals that arrived meanwhile."""
    previous_read, previous_write = os.pipe()
    os.set_blocking(previous_read, False)
    os.set_blocking(previous_write, False)
    read_end, write_end = os.pipe()
    os.write(write_end, b"a\n")
    os.close(write_end)
    handler = signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    before = signal.set_wakeup_fd(previous_write)
    try:
        with open(read_end, "rb", buffering=0) as stream:
            for line in output_lines(stream):
                assert line == "a"
                meanwhile = signal.set_wakeup_fd(-1)
                signal.set_wakeup_fd(meanwhile)
                assert meanwhile not in (-1, previous_write)  # its own
                signal.raise_signal(signal.SIGUSR1)
        assert signal.set_wakeup_fd(before) == previous_write
        assert os.read(previous_read, 16) == bytes([signal.SIGUSR1])
    finally:
        signal.signal(signal.SIGUSR1, handler)
        os.close(previous_read)
        os.close(previous_write)
