"""Vectorised ranges over sorted edge arrays: many `[lo_i, hi_i)` at once, cut into blocks.

The temporal miner and rule application both expand paths by looking up each path's edges as
a range of a sorted array. On KGs whose facts repeat every year of their validity (YAGO) one
such expansion can reach hundreds of millions of rows, so callers walk it in blocks of bounded
size (`split_by_weight`) instead of materialising it at once.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ragged_ranges", "sorted_lookup", "split_by_weight"]


def ragged_ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All positions of the ranges [lo_i, hi_i) and, for each, the row i it came from."""
    counts = np.maximum(hi - lo, 0)
    owner = np.repeat(np.arange(len(lo)), counts)
    starts = np.cumsum(counts) - counts
    pos = np.arange(counts.sum()) - np.repeat(starts - lo, counts)
    return pos, owner


def split_by_weight(weights: np.ndarray, limit: int) -> list[slice]:
    """Consecutive slices of rows whose weights sum to at most `limit` (one row may exceed)."""
    if len(weights) == 0:
        return []
    cum = np.cumsum(weights)
    cuts = [0]
    while cuts[-1] < len(weights):
        base = cum[cuts[-1] - 1] if cuts[-1] else 0
        nxt = int(np.searchsorted(cum, base + limit, side="right"))
        cuts.append(max(nxt, cuts[-1] + 1))
    return [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def sorted_lookup(table: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of `values` sits in the sorted `table` and whether it is there: (positions,
    found), by binary search (np.isin sorts both sides on every call; the callers look a few
    values up in a large table, many times). A position is clipped into the table (0 for an
    empty one), so `table[pos]` and arrays aligned with it may be indexed where `found`."""
    if not len(table):
        return np.zeros(len(values), np.int64), np.zeros(len(values), dtype=bool)
    pos = np.minimum(np.searchsorted(table, values), len(table) - 1)
    return pos, table[pos] == values
