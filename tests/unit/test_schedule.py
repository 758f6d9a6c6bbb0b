"""Critical path and list scheduling of the stage graph against brute force and Graham's bound;
the threaded executor keeps dependencies and the worker limit."""

from __future__ import annotations

import itertools
import random
import threading
import time

import pytest

from rulerag.orchestration.schedule import critical_path, list_schedule, run_graph


def random_dag(seed: int, n: int = 9) -> tuple[dict[str, float], list[tuple[str, str]]]:
    rng = random.Random(seed)
    names = [f"s{i}" for i in range(n)]
    durations = {s: float(rng.randint(1, 20)) for s in names}
    edges = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :] if rng.random() < 0.25]
    return durations, edges


def brute_longest_chain(durations: dict[str, float], edges: list[tuple[str, str]]) -> float:
    best = 0.0
    downs = {n: [b for a, b in edges if a == n] for n in durations}

    def walk(node: str, total: float) -> None:
        nonlocal best
        best = max(best, total)
        for d in downs[node]:
            walk(d, total + durations[d])

    for node in durations:
        walk(node, durations[node])
    return best


@pytest.mark.parametrize("seed", range(12))
def test_schedules_keep_dependencies_and_graham_bound(seed: int) -> None:
    durations, edges = random_dag(seed)
    length, path = critical_path(durations, edges)
    assert length == brute_longest_chain(durations, edges)
    assert sum(durations[n] for n in path) == length
    assert all((a, b) in edges for a, b in itertools.pairwise(path))
    total = sum(durations.values())
    for workers in (1, 2, 3, 8):
        plan = list_schedule(durations, edges, workers)
        for up, down in edges:
            assert plan.start[down] >= plan.end[up]
        for w in range(workers):  # a worker runs one stage at a time
            spans = sorted((plan.start[n], plan.end[n]) for n in durations if plan.worker[n] == w)
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
        lower = max(length, total / workers)
        assert lower <= plan.makespan <= total / workers + (1 - 1 / workers) * length + 1e-9
    assert list_schedule(durations, edges, 1).makespan == total
    assert list_schedule(durations, edges, len(durations)).makespan == length


def test_two_independent_chains_on_two_workers() -> None:
    durations = {"a1": 5.0, "a2": 5.0, "b1": 3.0, "b2": 3.0, "report": 1.0}
    edges = [("a1", "a2"), ("b1", "b2"), ("a2", "report"), ("b2", "report")]
    assert critical_path(durations, edges) == (11.0, ["a1", "a2", "report"])
    assert list_schedule(durations, edges, 2).makespan == 11.0
    assert list_schedule(durations, edges, 1).makespan == 17.0
    with pytest.raises(ValueError, match="cycle"):
        critical_path({"x": 1.0, "y": 1.0}, [("x", "y"), ("y", "x")])


def test_run_graph_runs_at_most_n_at_once_after_their_dependencies() -> None:
    edges = [("a", "c"), ("b", "c"), ("c", "d")]
    names = ["a", "b", "c", "d", "e"]
    active, peak, lock = [0], [0], threading.Lock()

    def task(name: str, upstream: dict[str, str]) -> str:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.2)
        with lock:
            active[0] -= 1
        return name + "".join(sorted(upstream.values()))

    results, spans = run_graph(names, edges, 2, task)
    assert results["c"] == "cab" and results["d"] == "dcab"
    assert peak[0] == 2
    for up, down in edges:
        assert spans[down][0] >= spans[up][1]

    def failing(name: str, upstream: dict[str, str]) -> str:
        if name == "c":
            raise RuntimeError("stage c failed")
        return name

    with pytest.raises(RuntimeError, match="stage c failed"):
        run_graph(names, edges, 2, failing)
