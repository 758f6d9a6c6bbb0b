"""One answer at a time, a bounded line, and a deadline per request.

The model uses every core (torch's threads, the retriever's), so two answers at once would
each take twice as long and hold twice the memory: `Gate` runs one call at a time, in a thread
of its own so the event loop keeps answering (`/ping`, the page's assets, refusals). At most
`queue` requests wait for it; one more is refused at once (`Busy`: 503 with Retry-After)
instead of joining a line it could not leave before its deadline.

Every request has `timeout` seconds from its arrival, waiting and running together; past them
it is answered `DeadlineExceeded` (504). Python cannot stop a thread, and a generation
half-run has nothing to return, so a running call is **abandoned, not interrupted**: it runs
to its end with the gate still held (the next request waits for it, as the model is still
busy), and its result is dropped. Since such a call only delays those behind it, a request
whose turn comes with less time left than its questions took of late (seconds per question,
smoothed over recent calls; when that fits in `timeout` at all) gets its 504 at once instead
of starting: under overload the model's time goes to answers that are still awaited
(measured with benchmarks/bench_serve.py: docs/operations.md, Serving).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Busy", "DeadlineExceeded", "Gate"]

T = TypeVar("T")
log = logging.getLogger(__name__)


class Busy(Exception):
    """The line is full: try again in `retry_after` seconds."""

    def __init__(self, retry_after: int, waiting: int) -> None:
        super().__init__(
            f"the model is answering and {waiting} request(s) wait: try again in {retry_after} s"
        )
        self.retry_after = retry_after


class DeadlineExceeded(Exception):
    """The request's `timeout` passed while it waited or while its answer ran."""


class Gate:
    """One call at a time in a worker thread, at most `queue` waiting (module doc).

    Create it inside the running event loop (the app's lifespan): its lock belongs to it.
    """

    def __init__(self, queue: int, timeout: float) -> None:
        self.queue = queue
        self.timeout = timeout
        self._lock = asyncio.Lock()
        self.waiting = 0
        #: seconds per question of the last calls, smoothed: what a call is expected to take
        self._per_question: float | None = None

    @property
    def running(self) -> bool:
        return self._lock.locked()

    def deadline(self) -> float:
        """A new request's deadline on `time.monotonic`'s clock."""
        return time.monotonic() + self.timeout

    async def run(self, fn: Callable[..., T], *args: Any, deadline: float, questions: int) -> T:
        """`fn(*args)` (an answer to `questions` questions) in a worker thread once the gate
        is free; Busy when `queue` requests wait already, DeadlineExceeded at `deadline` (the
        call, if it started, runs on) or when too little of it is left to start (module doc)."""
        # busy also while a released gate wakes its next waiter (unlocked for a moment)
        busy = self._lock.locked() or self.waiting > 0
        if busy and self.waiting >= self.queue:
            raise Busy(self.retry_after(), self.waiting)
        self.waiting += 1
        try:
            async with asyncio.timeout_at(self._loop_time(deadline)):
                await self._lock.acquire()
        except TimeoutError:
            raise DeadlineExceeded(
                f"waited {self.timeout:g} s (serve.timeout) for the model; it is busy"
            ) from None
        finally:
            self.waiting -= 1
        # refused only when it could have fit the whole timeout: a request that got its turn
        # at once always starts, so the estimate follows the model (no request waits forever
        # behind one slow call's estimate)
        expected, left = self.expected(questions), deadline - time.monotonic()
        if expected is not None and left < expected <= self.timeout:
            self._lock.release()
            raise DeadlineExceeded(
                f"not started: {questions} question(s) take about {expected:.1f} s (recent "
                f"answers), and only {max(left, 0.0):.1f} s of serve.timeout "
                f"({self.timeout:g} s) were left after waiting"
            )
        future = self._start(fn, args, questions)
        try:
            async with asyncio.timeout_at(self._loop_time(deadline)):
                return await asyncio.shield(future)
        except TimeoutError:
            future.add_done_callback(_log_abandoned)
            raise DeadlineExceeded(
                f"no answer within {self.timeout:g} s (serve.timeout); the answer still "
                "running was abandoned"
            ) from None
        except asyncio.CancelledError:  # the request's task was cancelled: nobody waits now
            future.add_done_callback(_log_abandoned)
            raise

    def _start(
        self, fn: Callable[..., T], args: tuple[Any, ...], questions: int
    ) -> asyncio.Future[T]:
        """Run `fn` in a daemon thread (a server that stops does not wait for an abandoned
        answer); the gate is released when the call ends, not when its request does."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        started = time.monotonic()

        def settle(result: Any, error: BaseException | None) -> None:
            self._lock.release()
            self._record((time.monotonic() - started) / max(questions, 1))
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def work() -> None:
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn(*args)
            except Exception as exc:  # handed to the request's task, which reports it
                error = exc
            except BaseException as exc:  # SystemExit in a thread: no reason to stop serving
                error = RuntimeError(f"the model raised {type(exc).__name__}")
            finally:
                with contextlib.suppress(RuntimeError):  # the server stopped meanwhile
                    loop.call_soon_threadsafe(settle, result, error)

        try:
            threading.Thread(target=work, name="rulerag-predict", daemon=True).start()
        except BaseException:
            self._lock.release()
            raise
        return future

    def _record(self, per_question: float) -> None:
        previous = self._per_question
        self._per_question = (
            per_question if previous is None else 0.7 * previous + 0.3 * per_question
        )

    def expected(self, questions: int) -> float | None:
        """Seconds an answer to `questions` questions is expected to take; None before the
        first call ends."""
        return None if self._per_question is None else self._per_question * max(questions, 1)

    def retry_after(self) -> int:
        """Seconds until the line has room again, as recent calls took (a question each: the
        running one and those waiting), within 1 and `timeout`."""
        each = self.expected(1) or 1.0
        return int(min(max(1.0, math.ceil(each * (self.waiting + 1))), math.ceil(self.timeout)))

    @staticmethod
    def _loop_time(deadline: float) -> float:
        """`deadline` (time.monotonic) on the loop's clock (the same clock, on CPython)."""
        loop = asyncio.get_running_loop()
        return loop.time() + (deadline - time.monotonic())


def _log_abandoned(future: asyncio.Future[Any]) -> None:
    """An abandoned call's failure, logged: its request already had its answer (504), and
    asyncio would otherwise report the error as never retrieved, without saying whose."""
    error = future.exception()
    if error is not None:
        log.error("an answer abandoned at its deadline failed", exc_info=error)
