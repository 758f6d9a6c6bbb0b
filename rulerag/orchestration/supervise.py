"""Run server commands so that one Ctrl-C or SIGTERM stops them and everything they started.

`make airflow` runs Airflow's API server, scheduler, DAG processor and triggerer, and some of
those start their own processes (uvicorn's workers, the executor's task processes). A SIGTERM
to `airflow standalone`, which it used to run, left those children running with their ports
open; a Ctrl-C left it waiting on children that had become zombies. So `make airflow` runs its
commands under this supervisor (`python -m rulerag.orchestration.supervise -- <command> ...
[--and <command> ...]`; there through `rulerag.orchestration.airflow_home`, which first makes
AIRFLOW_HOME private and migrates the database):

- each command starts as the leader of a process group of its own (`processes.start_group`);
- this process is a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`): a descendant whose
  parent exits is re-parented here rather than to init, so it stays findable and is reaped
  here, never left a zombie;
- on SIGTERM, SIGINT or SIGHUP, every descendant (the process tree under this process, which
  reaches those that started a session of their own) and every command's group get SIGTERM,
  then `grace` seconds, then SIGKILL; the exit status is 128 + the signal;
- when a command exits by itself, the other commands and whatever any of them left behind are
  stopped the same way (a scheduler that died beside a live UI would only mislead), and the
  exit status of the one that exited is this process's;
- a watchdog, a small process in a session of its own, outlives this one: it is told every
  process of the tree as it appears (pid and start time) and, when this process is gone however
  it ended (a SIGKILL to `make airflow`'s whole group after an impatient SIGTERM, the OOM
  killer), stops whatever of them still runs, and their children, the same way. Without it, an
  API server busy with a 90 s request outlived such a stop, re-parented to init, and went on
  growing to 17.5 GiB.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from types import FrameType
from typing import BinaryIO

import psutil

from rulerag.orchestration.processes import GRACE_S, running, start_group
from rulerag.prctl import PR_SET_CHILD_SUBREAPER, prctl_setter

__all__ = ["AND", "Watchdog", "descendants", "main", "split_commands", "supervise", "watchdog"]

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: separates the commands on this module's command line (`-- cmd1 ... --and cmd2 ...`); a
#: command that has this word among its own arguments is for `supervise`'s list form only
AND = "--and"


def split_commands(words: Sequence[str]) -> list[list[str]]:
    """`cmd1 ... --and cmd2 ...` as the list of commands (an empty one where two separators
    meet, or at either end: the caller refuses it)."""
    commands: list[list[str]] = [[]]
    for word in words:
        if word == AND:
            commands.append([])
        else:
            commands[-1].append(word)
    return commands


def _label(cmd: Sequence[str]) -> str:
    """A command as messages name it: the program's name and its first argument."""
    return " ".join([Path(cmd[0]).name, *cmd[1:2]])


def _become_subreaper() -> None:
    set_subreaper = prctl_setter(PR_SET_CHILD_SUBREAPER)
    if set_subreaper is not None:
        set_subreaper(1)


def descendants(root: int) -> set[int]:
    """The live processes (zombies left out) under `root` in the process tree."""
    try:
        below = psutil.Process(root).children(recursive=True)
    except psutil.Error:  # `root` is gone
        return set()
    return {proc.pid for proc in below if running(proc)}


def _reap() -> None:
    """Collect every exited child (this process adopts orphans as a subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:  # gone meanwhile
        return None


def _signal_all(pids: set[int], pgid: int, sig: signal.Signals) -> None:
    for pid in pids:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_tree(
    procs: subprocess.Popen | Sequence[subprocess.Popen],
    grace: float = GRACE_S,
    spare: int | None = None,
) -> None:
    """SIGTERM to every descendant and to each of `procs`' groups, up to `grace` s, then
    SIGKILL; the process `spare` (the watchdog) is left alone."""
    me = os.getpid()
    groups = [procs.pid] if isinstance(procs, subprocess.Popen) else [p.pid for p in procs]

    def tree() -> set[int]:
        return descendants(me) - {spare}

    def signal_all(sig: signal.Signals) -> None:
        # each process once: a second SIGTERM tells Airflow's scheduler and triggerer to stop
        # waiting for their tasks and triggers; so the groups by killpg, the rest one by one
        pids = {pid for pid in tree() if _group_of(pid) not in groups}
        for pgid in groups:
            _signal_all(pids, pgid, sig)
            pids = set()

    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap()
        if not tree():
            return
        time.sleep(0.05)
    signal_all(signal.SIGKILL)
    deadline = time.monotonic() + grace
    while tree() and time.monotonic() < deadline:
        _reap()
        time.sleep(0.05)
    _reap()


def _started(proc: psutil.Process) -> str:
    """When `proc` started, as the watchdog's lines say it (it tells a reused pid apart)."""
    return f"{proc.create_time():.6f}"


def _identity(pid: int) -> str | None:
    """`pid start-time` of a live process."""
    try:
        return f"{pid} {_started(psutil.Process(pid))}"
    except psutil.Error:
        return None


class Watchdog:
    """The watchdog process (the module's doc): started in a session of its own, so no
    signal to this process's group reaches it; reads the tree's processes from a pipe whose
    only writer is this process, and acts when the pipe ends."""

    def __init__(self, grace: float) -> None:
        command = [sys.executable, "-m", "rulerag.orchestration.supervise", "--watchdog",
                   "--grace", str(grace)]  # fmt: skip
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self.told: set[int] = set()

    def tell(self, pids: set[int]) -> None:
        """Name the processes the watchdog has not heard of yet."""
        lines = [line for pid in sorted(pids - self.told) if (line := _identity(pid))]
        self.told |= pids
        if lines and self.proc.stdin is not None:
            with suppress(OSError):
                self.proc.stdin.write(("\n".join(lines) + "\n").encode())
                self.proc.stdin.flush()

    def close(self) -> None:
        """End the pipe (the tree is stopped by now: the watchdog finds nothing to do)."""
        if self.proc.stdin is not None:
            with suppress(OSError):
                self.proc.stdin.close()
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


def watchdog(grace: float = GRACE_S, stream: BinaryIO | None = None) -> int:
    """Read `pid start-time` lines until the supervisor's pipe ends, then stop every named
    process still running (the same start time: not a reused pid) and their descendants:
    SIGTERM, `grace` seconds, SIGKILL. Returns the number of processes it had to stop."""
    stream = sys.stdin.buffer if stream is None else stream
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the terminal is the tree's
    known: dict[int, str] = {}
    for line in stream:
        parts = line.split()
        if len(parts) == 2:
            known[int(parts[0])] = parts[1].decode()
    victims: dict[int, psutil.Process] = {}
    for pid, created in known.items():
        with suppress(psutil.Error):
            proc = psutil.Process(pid)
            if _started(proc) == created:
                victims[pid] = proc
                for child in proc.children(recursive=True):
                    victims.setdefault(child.pid, child)
    alive = [proc for proc in victims.values() if running(proc)]
    for proc in alive:
        with suppress(psutil.Error):
            proc.terminate()
    _gone, left = psutil.wait_procs(alive, timeout=grace)
    for proc in left:
        with suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(left, timeout=grace)
    if alive:
        print(f"supervise: its supervisor gone, the watchdog stopped {len(alive)} processes",
              file=sys.stderr)  # fmt: skip
    return len(alive)


def supervise(commands: Sequence[str] | Sequence[Sequence[str]], grace: float = GRACE_S) -> int:
    """Run `commands` (one argument list, or a list of them, all started at once) until one
    exits or this process is told to stop; then stop all of them. Nothing they started
    outlives this call, nor this process (`Watchdog`). Returns the exit status of the command
    that exited, or 128 + the stopping signal."""
    if commands and isinstance(commands[0], str):
        cmds = [list(commands)]  # one command
    else:
        cmds = [list(cmd) for cmd in commands]
    if not cmds or not all(cmds):
        raise ValueError("supervise: no command, or an empty one")
    _become_subreaper()
    stopped: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopped.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
    guard = Watchdog(grace)
    procs: list[subprocess.Popen] = []
    try:
        try:
            for cmd in cmds:
                procs.append(start_group(cmd, cwd=Path.cwd(), env=os.environ))
        except BaseException:  # one did not start: neither do the others
            stop_tree(procs, grace, spare=guard.proc.pid)
            raise
        me, ticks = os.getpid(), 0
        ended: subprocess.Popen | None = None
        while ended is None and not stopped:
            if ticks % 10 == 0:  # every second: the processes that appeared meanwhile
                guard.tell(({p.pid for p in procs} | descendants(me)) - {guard.proc.pid})
            ticks += 1
            ended = next((p for p in procs if p.poll() is not None), None)
            if ended is None:
                time.sleep(0.1)
        names = ", ".join(_label(cmd) for cmd in cmds)
        if stopped:
            they = "it" if len(cmds) == 1 else "they"
            print(
                f"supervise: {signal.Signals(stopped[0]).name}: stopping {names} and every "
                f"process {they} started",
                file=sys.stderr,
            )
        elif len(cmds) > 1 and ended is not None:
            print(
                f"supervise: {_label(cmds[procs.index(ended)])} exited with status "
                f"{_status(ended.returncode)}: stopping {names} and every process they started",
                file=sys.stderr,
            )
        stop_tree(procs, grace, spare=guard.proc.pid)
        for proc in procs:
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
        if stopped:
            return 128 + stopped[0]
        return _status(ended.returncode if ended is not None else None)
    finally:
        guard.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _status(code: int | None) -> int:
    """A process's exit status as a shell reports it (killed by signal N: 128 + N)."""
    code = code or 0
    return 128 - code if code < 0 else code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grace", type=float, default=GRACE_S, help="seconds before SIGKILL")
    parser.add_argument("--watchdog", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help=f"-- then the command (several: {AND} between)"
    )
    args = parser.parse_args(argv)
    if args.watchdog:
        watchdog(args.grace)
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    commands = split_commands(command)
    if not all(commands):
        parser.error(
            "no command given, or an empty one (python -m rulerag.orchestration.supervise -- "
            f"cmd ... [{AND} cmd ...])"
        )
    try:
        return supervise(commands, args.grace)
    except FileNotFoundError as err:
        print(f"supervise: cannot start {err.filename or commands[0][0]!r}: {err}",
              file=sys.stderr)  # fmt: skip
        return 127


if __name__ == "__main__":
    sys.exit(main())
