"""How long the stage graph takes on N workers, and a small executor that runs it so.

`critical_path` is the least wall time any number of workers can reach (the longest chain of
dependent stages); `list_schedule` is what N workers reach by always starting, among the
stages whose dependencies are done, the one with the longest chain still behind it (HLFET,
within a factor 2 - 1/N of the optimum). Both take the per-stage times a pipeline run logs
(`benchmarks/bench_parallel.py` reads them from MLflow). `run_graph` runs a graph that way
with threads, for the benchmark's measured comparison without Airflow.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Schedule", "critical_path", "list_schedule", "run_graph"]


def _graph(
    names: Iterable[str], edges: Iterable[tuple[str, str]]
) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
    nodes = list(dict.fromkeys(names))
    known = set(nodes)
    ups: dict[str, list[str]] = {n: [] for n in nodes}
    downs: dict[str, list[str]] = {n: [] for n in nodes}
    for up, down in edges:
        if up in known and down in known:
            ups[down].append(up)
            downs[up].append(down)
    return nodes, ups, downs


def _order(nodes: list[str], ups: dict[str, list[str]], downs: dict[str, list[str]]) -> list[str]:
    waiting = {n: len(ups[n]) for n in nodes}
    ready = [n for n in nodes if waiting[n] == 0]
    order = []
    while ready:
        node = ready.pop()
        order.append(node)
        for down in downs[node]:
            waiting[down] -= 1
            if waiting[down] == 0:
                ready.append(down)
    if len(order) != len(nodes):
        raise ValueError("the stage graph has a cycle")
    return order


def _tails(
    durations: Mapping[str, float], nodes: list[str], ups: dict, downs: dict
) -> dict[str, float]:
    """Each stage's own time plus the longest chain after it."""
    tail: dict[str, float] = {}
    for node in reversed(_order(nodes, ups, downs)):
        tail[node] = durations[node] + max((tail[d] for d in downs[node]), default=0.0)
    return tail


def critical_path(
    durations: Mapping[str, float], edges: Iterable[tuple[str, str]]
) -> tuple[float, list[str]]:
    """The longest chain of dependent stages: its length and the stages on it."""
    nodes, ups, downs = _graph(durations, edges)
    if not nodes:
        return 0.0, []
    tail = _tails(durations, nodes, ups, downs)
    node = max((n for n in nodes if not ups[n]), key=lambda n: tail[n])
    path = [node]
    while downs[node]:
        node = max(downs[node], key=lambda n: tail[n])
        path.append(node)
    return tail[path[0]], path


@dataclass
class Schedule:
    """Each stage's start and end (seconds from 0) and worker, and the makespan."""

    makespan: float
    start: dict[str, float] = field(default_factory=dict)
    end: dict[str, float] = field(default_factory=dict)
    worker: dict[str, int] = field(default_factory=dict)


def list_schedule(
    durations: Mapping[str, float], edges: Iterable[tuple[str, str]], workers: int
) -> Schedule:
    """N workers, each starting the ready stage with the longest chain behind it as soon as
    it is free (ties by name, so the result is deterministic)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    nodes, ups, downs = _graph(durations, edges)
    tail = _tails(durations, nodes, ups, downs)
    waiting = {n: len(ups[n]) for n in nodes}
    ready = [(-tail[n], n) for n in nodes if waiting[n] == 0]
    heapq.heapify(ready)
    free = [(0.0, w) for w in range(workers)]  # (time free, worker)
    running: list[tuple[float, str]] = []
    out = Schedule(0.0)
    now = 0.0
    while ready or running:
        while ready and free and free[0][0] <= now:
            _, node = heapq.heappop(ready)
            _, w = heapq.heappop(free)
            out.start[node], out.worker[node] = now, w
            out.end[node] = now + durations[node]
            heapq.heappush(running, (out.end[node], node))
        done_at, node = heapq.heappop(running)
        now = max(now, done_at)
        heapq.heappush(free, (done_at, out.worker[node]))
        for down in downs[node]:
            waiting[down] -= 1
            if waiting[down] == 0:
                heapq.heappush(ready, (-tail[down], down))
    out.makespan = max(out.end.values(), default=0.0)
    return out


def run_graph(
    names: Iterable[str],
    edges: Iterable[tuple[str, str]],
    workers: int,
    task: Callable[[str, dict[str, Any]], Any],
) -> tuple[dict[str, Any], dict[str, tuple[float, float]]]:
    """Run `task(name, results of its upstream stages)` for every stage, `workers` at a time,
    in `list_schedule`'s priority order with unknown durations (the longest chain of stages
    behind first); returns each stage's result and its (start, end) wall-clock times. The
    first failure stops new starts and is raised once the running ones end."""
    nodes, ups, downs = _graph(names, edges)
    depth = _tails(dict.fromkeys(nodes, 1.0), nodes, ups, downs)
    waiting = {n: len(ups[n]) for n in nodes}
    ready = [(-depth[n], n) for n in nodes if waiting[n] == 0]
    heapq.heapify(ready)
    results: dict[str, Any] = {}
    spans: dict[str, tuple[float, float]] = {}
    lock = threading.Lock()

    def call(node: str) -> Any:
        started = time.time()
        try:
            return task(node, {u: results[u] for u in ups[node]})
        finally:
            with lock:
                spans[node] = (started, time.time())

    running: dict[Future[Any], str] = {}
    failure: BaseException | None = None
    with ThreadPoolExecutor(max_workers=workers) as pool:
        while (ready and failure is None) or running:
            while ready and failure is None and len(running) < workers:
                _, node = heapq.heappop(ready)
                running[pool.submit(call, node)] = node
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                node = running.pop(future)
                if future.exception() is not None:
                    failure = failure or future.exception()
                    continue
                results[node] = future.result()
                for down in downs[node]:
                    waiting[down] -= 1
                    if waiting[down] == 0:
                        heapq.heappush(ready, (-depth[down], down))
    if failure is not None:
        raise failure
    return results, spans
