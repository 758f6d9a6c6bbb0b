"""Commands the orchestration starts (`dvc repro`, pull, push) stop as a whole.

`dvc repro` runs its stage as a child (`$SHELL -c <cmd>`). Stopping `dvc` alone (SIGTERM, a
kill -9, a timeout that terminates only the process it started) leaves the stage running, and
it later publishes outputs that dvc.lock does not describe. So a command is started as the
leader of a process group of its own (a new session: no terminal or Airflow group signal
reaches it behind our back) and stopped as a group: SIGTERM to every process of the group, a
grace period in which the stage discards its staged outputs and records its MLflow run KILLED,
then SIGKILL to what is left (`stop_group`). Who started it:

- exits with an exception (a failing echo, Airflow's execution timeout, Ctrl-C's
  KeyboardInterrupt): the caller's `finally` stops the group;
- gets SIGTERM (Airflow's task runner only calls `on_kill` and carries on;
  `raise_on_sigterm` makes it unwind into that `finally`, and `output_lines` waits for the
  command's output so that the signal is never left waiting behind a blocking read);
- is killed outright (SIGKILL): on Linux the command gets SIGTERM from the kernel
  (`PR_SET_PDEATHSIG`) and dvc dies; the stage, whose own parent was dvc, then exits the same
  way (pipeline_steps/common.py).
"""

from __future__ import annotations

import codecs
import io
import locale
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from rulerag.prctl import parent_death_signal

if TYPE_CHECKING:  # psutil is imported where it is used: the KFP SDK's venv, which compiles
    import psutil  # the pipeline through kfp_tasks -> workspaces -> here, does not have it

__all__ = [
    "GRACE_S",
    "Terminated",
    "group_alive",
    "output_lines",
    "raise_on_sigterm",
    "running",
    "start_group",
    "stop_group",
]

#: seconds a stopped group gets between SIGTERM and SIGKILL: enough for a stage to discard its
#: staging folder and record its MLflow run KILLED. (Airflow kills a task that has not exited
#: 5 s after its SIGTERM; the group, already told to stop, then finishes stopping alone.)
GRACE_S = 10.0


class Terminated(RuntimeError):
    """The process running a command got SIGTERM; the command's group has been stopped."""


def _parent_death_signal() -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child get SIGTERM when the thread that started it dies
    (`rulerag.prctl`), and exit at once if that already happened; None where the call does not
    exist. libc is resolved here, before the fork."""
    set_signal = parent_death_signal()
    if set_signal is None:
        return None
    parent = os.getpid()

    def arm() -> None:
        set_signal(signal.SIGTERM)
        if os.getppid() != parent:  # the starter died before the signal was armed
            os._exit(143)

    return arm


def start_group(
    cmd: list[str], *, cwd: Path, env: Mapping[str, str], **popen: Any
) -> subprocess.Popen:
    """Start `cmd` (an argument list, never a shell) as the leader of a new session, so its
    process group id is its pid and `stop_group` reaches everything it starts."""
    return subprocess.Popen(
        cmd, cwd=cwd, env=dict(env), start_new_session=True, preexec_fn=_parent_death_signal(),
        **popen,
    )  # fmt: skip


def running(proc: psutil.Process) -> bool:
    """Whether `proc` still runs. A zombie does not: an orphan is reaped by whatever init the
    machine has, and some (a container's) never do."""
    import psutil

    try:  # is_running: not another process that got the same pid meanwhile
        return proc.is_running() and proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:  # gone meanwhile
        return False


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (`running`)."""
    import psutil

    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid and running(psutil.Process(pid)):
                return True
        except (OSError, psutil.Error):  # gone meanwhile
            continue
    return False


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send `sig` to group `pgid`; False when the group is gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def stop_group(proc: subprocess.Popen, grace: float = GRACE_S) -> None:
    """Stop `proc`'s whole process group (`start_group`): SIGTERM to all, up to `grace` seconds
    for them to exit, then SIGKILL to what is left; `proc` is reaped. A group already empty
    costs nothing. (The group id cannot be reused while a member lives, so signalling it after
    the leader is reaped reaches only the leader's descendants.) A SIGTERM to this process
    meanwhile is ignored: it asks for what is being done, and must not cut it short; a Ctrl-C
    skips the grace period (SIGKILL at once)."""
    pgid = proc.pid
    with _sigterm_ignored():
        if _signal_group(pgid, signal.SIGTERM):
            deadline = time.monotonic() + grace
            try:
                while True:
                    proc.poll()  # reap the leader: a zombie leader keeps the group "alive"
                    if not group_alive(pgid):
                        break
                    if time.monotonic() >= deadline:
                        _signal_group(pgid, signal.SIGKILL)
                        break
                    time.sleep(0.05)
            except KeyboardInterrupt:
                _signal_group(pgid, signal.SIGKILL)
                raise
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)


@contextmanager
def _sigterm_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None:  # a handler installed outside Python: leave it
        yield
        return
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def raise_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` in the main thread (after the handler that
    was there, e.g. Airflow's, which calls the operator's `on_kill` and returns), so the block
    unwinds and its `finally` stops the command's group. Elsewhere than the main thread, or
    where SIGTERM is ignored, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None or previous == signal.SIG_IGN:  # set outside Python, or ignored
        yield
        return

    def on_term(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the group is being stopped
        if callable(previous):
            previous(signum, frame)
        raise Terminated("stopped by SIGTERM")

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _SignalWakeup:
    """Within the block, `fd` becomes readable whenever a signal with a Python handler arrives
    (`signal.set_wakeup_fd`); main thread only (`fd` is None elsewhere). What arrives is passed
    on (`drain`) to the wakeup descriptor set before (an asyncio loop's), set again after."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self._write_end, self._previous = -1, -1

    def __enter__(self) -> _SignalWakeup:
        if threading.current_thread() is threading.main_thread():
            self.fd, self._write_end = os.pipe()
            for end in (self.fd, self._write_end):
                os.set_blocking(end, False)
            self._previous = signal.set_wakeup_fd(self._write_end, warn_on_full_buffer=False)
        return self

    def drain(self) -> None:
        if self.fd is None:
            return
        with suppress(BlockingIOError):
            arrived = os.read(self.fd, 4096)
            if self._previous != -1:
                with suppress(OSError):  # a full or closed pipe: as the signal module does
                    os.write(self._previous, arrived)

    def __exit__(self, *exc: object) -> None:
        if self.fd is None:
            return
        signal.set_wakeup_fd(self._previous)
        self.drain()
        os.close(self.fd)
        os.close(self._write_end)


def output_lines(stream: io.RawIOBase | io.BufferedIOBase) -> Iterator[str]:
    """The lines of a command's output pipe (`stream`, opened in binary mode) as they come,
    without their newline, decoded as a text-mode `Popen` decodes them (the locale's encoding,
    universal newlines), an undecodable byte replaced rather than failing the run.

    Why not `for line in proc.stdout`: a signal's Python handler runs only once the main
    thread comes back from what it waits in. A SIGTERM arriving in the instant between the
    last check for signals and a blocking read does not interrupt that read, so
    `raise_on_sigterm`'s handler waited until the command printed again (hours for a quiet
    stage) while the command ran on. Here the wait is a `select` on the pipe and on a wakeup
    descriptor that the signal itself writes to, so the handler runs at once."""
    decoder = io.IncrementalNewlineDecoder(
        codecs.getincrementaldecoder(locale.getpreferredencoding(False))(errors="replace"),
        translate=True,
    )
    fd, pending = stream.fileno(), ""
    with _SignalWakeup() as wakeup, selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        if wakeup.fd is not None:
            selector.register(wakeup.fd, selectors.EVENT_READ)
        while True:
            ready = {key.fd for key, _events in selector.select()}
            if wakeup.fd in ready:  # the handler has run or runs now; drained for the next one
                wakeup.drain()
            if fd not in ready:
                continue
            chunk = os.read(fd, 65536)
            *lines, pending = (pending + decoder.decode(chunk, final=not chunk)).split("\n")
            yield from lines
            if not chunk:  # end of output
                if pending:
                    yield pending
                return
