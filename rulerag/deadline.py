"""One wall-clock deadline for a blocking call whose library bounds only each socket read.

MLflow's client (like `requests`) takes a timeout per read: a server that answers one byte
every two seconds holds a call, and the stage waiting on it, forever (issue 45: a stage ignored
SIGTERM for 13 minutes while its run was being sent). `within` runs such a call in a daemon
thread and waits for it at most `seconds`, and less when `stop()` turns true (a SIGTERM the
caller holds while it waits); past either it raises `DeadlineExceeded` and leaves the thread
behind. A daemon thread, not a `concurrent.futures` pool: the interpreter joins a pool's
threads at exit, so one stuck call would still hold the process. The abandoned call's result
is dropped; callers keep what it was about to deliver (the tracking spool keeps the run).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["DeadlineExceeded", "deadline_seconds", "within"]

T = TypeVar("T")

#: how often the waiting thread looks at `stop()` (seconds)
_POLL_S = 0.1


class DeadlineExceeded(TimeoutError):
    """A call ran past its wall-clock deadline, or was abandoned because a stop was asked."""


def deadline_seconds(variable: str, default: float) -> float:
    """A deadline in seconds from the environment variable `variable` (unset or empty: the
    default); a value that is not a positive number is refused by name."""
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise ValueError(f"{variable} must be a positive number of seconds, not {raw!r}")
    return value


def within(
    seconds: float,
    call: Callable[[], T],
    what: str,
    stop: Callable[[], bool] = lambda: False,
) -> T:
    """`call()`'s result if it returns within `seconds` (its exception if it raises);
    DeadlineExceeded naming `what` when it does not, or when `stop()` turns true first."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # noqa: BLE001 - handed back to the waiting thread
            outcome["error"] = error

    worker = threading.Thread(target=run, name=f"deadline: {what}"[:60], daemon=True)
    started = time.monotonic()
    worker.start()
    while worker.is_alive():
        worker.join(_POLL_S)
        if not worker.is_alive():
            break
        if stop():
            raise DeadlineExceeded(f"{what}: abandoned after {time.monotonic() - started:.0f} s,"
                                   " a stop was asked")  # fmt: skip
        if time.monotonic() - started > seconds:
            raise DeadlineExceeded(f"{what}: no answer within {seconds:.0f} s")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
