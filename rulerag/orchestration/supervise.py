"""Run a server command so that one Ctrl-C or SIGTERM stops it and everything it started.

`airflow standalone` starts the API server, scheduler, DAG processor and triggerer as
children, and some of those start their own (uvicorn's workers, the executor's task
processes). A SIGTERM to `standalone` left its children running with their ports open; a
Ctrl-C left it waiting on children that had become zombies. `make airflow` therefore runs it
under this supervisor (`python -m rulerag.orchestration.supervise -- <command> ...`):

- the command starts as the leader of a process group of its own (`processes.start_group`);
- this process is a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`): a descendant whose
  parent exits is re-parented here rather than to init, so it stays findable and is reaped
  here, never left a zombie;
- on SIGTERM, SIGINT or SIGHUP, every descendant (the process tree under this process, which
  reaches those that started a session of their own) and the command's group get SIGTERM,
  then `grace` seconds, then SIGKILL; the exit status is 128 + the signal;
- when the command exits by itself, whatever it left behind is stopped the same way and its
  exit status is this process's.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from types import FrameType

from rulerag.orchestration.processes import GRACE_S, proc_table, start_group

__all__ = ["descendants", "main", "supervise"]

_PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _become_subreaper() -> None:
    if sys.platform.startswith("linux"):
        with suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def descendants(root: int) -> set[int]:
    """The live processes (zombies left out) under `root` in the process tree."""
    children: dict[int, list[int]] = {}
    for pid, state, parent, _group in proc_table():
        if state not in "ZX":
            children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _reap() -> None:
    """Collect every exited child (this process adopts orphans as a subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _signal_all(pids: set[int], pgid: int, sig: signal.Signals) -> None:
    for pid in pids:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_tree(proc: subprocess.Popen, grace: float = GRACE_S) -> None:
    """SIGTERM to every descendant and to `proc`'s group, up to `grace` s, then SIGKILL."""
    me = os.getpid()
    _signal_all(descendants(me), proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap()
        if not descendants(me):
            return
        time.sleep(0.05)
    _signal_all(descendants(me), proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + grace
    while descendants(me) and time.monotonic() < deadline:
        _reap()
        time.sleep(0.05)
    _reap()


def supervise(cmd: list[str], grace: float = GRACE_S) -> int:
    """Run `cmd` until it exits or this process is told to stop; nothing it started outlives
    this call. Returns the command's exit status, or 128 + the stopping signal."""
    _become_subreaper()
    stopped: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopped.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
    try:
        proc = start_group(cmd, cwd=Path.cwd(), env=os.environ)
        while proc.poll() is None and not stopped:
            time.sleep(0.1)
        if stopped:
            print(
                f"supervise: {signal.Signals(stopped[0]).name}: stopping {cmd[0]} and every "
                "process it started",
                file=sys.stderr,
            )
        stop_tree(proc, grace)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        if stopped:
            return 128 + stopped[0]
        code = proc.returncode or 0
        return 128 - code if code < 0 else code  # killed by a signal: the shell's convention
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grace", type=float, default=GRACE_S, help="seconds before SIGKILL")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (python -m rulerag.orchestration.supervise -- cmd ...)")
    try:
        return supervise(command, args.grace)
    except FileNotFoundError as err:
        print(f"supervise: cannot start {command[0]!r}: {err}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
