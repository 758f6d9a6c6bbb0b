"""benchmarks/bench_safran_apply.py: SAFRAN's prediction file read as its eval.py ranks it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks import bench_safran_apply as bench

ENTITIES = ["/m/a", "/m/b", "/m/c", "/m/d"]
RELATIONS = ["/r/x", "/r/y"]


def test_predictions_ranked_as_safran_eval_ranks_them(tmp_path: Path) -> None:
    path = tmp_path / "predictions.txt"
    path.write_text(
        "/m/a /r/x /m/b\n"
        "Heads: /m/c\t0.5\t/m/a\t0.5\t/m/d\t0.2\t\n"  # head /m/a tied with /m/c: rank 1.5
        "Tails: /m/d\t0.9\t/m/c\t0.4\t\n"  # tail /m/b not written: no rank
        "/m/c /r/y /m/d\n"
        "Heads: \n"
        "Tails: /m/d\t0.3\t\n",
        encoding="utf-8",
    )
    ranks = bench.safran_ranks(path, ENTITIES, RELATIONS)
    # subject query (tail, r + |R|, ?) answer head; object query (head, r, ?) answer tail
    assert ranks == {(1, 2, 0): 1.5, (2, 1, 3): 1.0}


def test_metrics_count_a_missing_rank_as_zero() -> None:
    rank = np.array([1.5, np.inf, 1.0, 12.0])
    got = bench.metrics(rank)
    assert got["mrr"] == pytest.approx(round((1 / 1.5 + 0 + 1 + 1 / 12) / 4, 4))
    assert (got["hits_at_1"], got["hits_at_3"], got["hits_at_10"]) == (0.25, 0.5, 0.5)
    paired = bench.paired(np.array([1.0, 0.5, 0.0]), np.array([0.5, 0.5, 1.0]))
    assert (paired["ours_better"], paired["safran_better"]) == (1, 1)
