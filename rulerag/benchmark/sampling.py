"""Seeded samples of benchmark queries, shared by retrieval (the F_G queries it searches) and
generation (the test queries every grid row answers), so both draw the same queries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["sample_queries"]


def sample_queries(
    records: Sequence[Mapping[str, Any]], n: int | None, seed: int
) -> list[Mapping[str, Any]]:
    """A seeded sample of n records in file order (all when n is None or large enough).

    Every configuration of the grid draws the same sample (same file, n and seed), so the rows
    of the result table are compared on the same queries.
    """
    if n is None or n >= len(records):
        return list(records)
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(len(records), size=int(n), replace=False))
    return [records[int(i)] for i in keep]
