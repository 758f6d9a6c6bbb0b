"""How a candidate's scores from several rules become one: the `Candidates` of a query, and
noisy-or (TLogic's float32, or exact) and SAFRAN's non-redundant noisy-or."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "Candidates",
    "noisy_or",
    "noisy_or_exact",
    "nrnoisy_or",
    "shared_floats",
]


@dataclass
class Candidates:
    """One query's candidates: final (noisy-or) score, and for each the rule (index into the
    input rules) and the body facts [(sub, rel, obj, ts), ...] of its best-scoring grounding."""

    scores: dict[int, float] = field(default_factory=dict)
    rules: dict[int, int] = field(default_factory=dict)
    explanations: dict[int, list[tuple[int, int, int, int]]] = field(default_factory=dict)
    #: what candidates are ranked by, higher first: the score itself (noisy-or), with `max`
    #: the descending tuple of the candidate's per-rule scores, with `nrnoisy_or` -Π(1 - m)
    #: over its cluster maxima m (exact where 1 - Π rounds to 1.0)
    rank_keys: dict[int, float | tuple[float, ...]] = field(default_factory=dict)

    def ranked(self) -> list[tuple[int, float]]:
        """(candidate, score), best first; equal rank keys by candidate id."""
        keys = self.rank_keys or self.scores
        order = sorted(keys, key=lambda c: c)
        order.sort(key=lambda c: keys[c], reverse=True)  # stable: ties keep the id order
        return [(c, self.scores[c]) for c in order]


def noisy_or(scores: Sequence[float]) -> float:
    """1 - Π(1 - s), in float32 as TLogic computes it (ties are exact float comparisons)."""
    return float(1 - np.prod(1 - np.asarray(scores, np.float32), dtype=np.float32))


def noisy_or_exact(scores: Sequence[float]) -> tuple[float, float]:
    """Noisy-or without float32's rounding: (score, rank key) = (1 - Π(1 - s), -Σ log(1 - s))
    in float64. The key orders candidates as the exact 1 - Π does where the score itself
    rounds to 1.0 (a candidate reached by 30 rules of score 0.6 keeps its place above one
    reached by 25); a score of 1 gives an infinite key."""
    values = np.asarray(scores, np.float64)
    with np.errstate(divide="ignore"):
        key = float(-np.log1p(-values).sum())
    return float(-np.expm1(-key)), key


def nrnoisy_or(maxima: Iterable[float]) -> tuple[float, float]:
    """SAFRAN's non-redundant noisy-or of one candidate's cluster maxima m: (score, rank key)
    = (1 - P, -P) with P = Π(1 - m), multiplied one factor at a time in float64 from the
    largest m down, so that equal multisets give equal keys (SAFRAN multiplies in 50-digit
    floats; -P keeps the order where 1 - P rounds to 1.0)."""
    product = 1.0
    for m in sorted((float(x) for x in maxima), reverse=True):
        product *= 1.0 - m
    return 1.0 - product, -product


def shared_floats(values: np.ndarray) -> list[float]:
    """`values.tolist()` with one Python float per distinct value, shared by its repeats: a
    score list holds 8-byte references instead of a 32-byte float each (rules with constants
    give millions of scores per chunk of queries, most of them one rule confidence or
    another). Equal values only: the lists compare, sort and aggregate as before."""
    if not len(values):
        return []
    distinct, which = np.unique(values, return_inverse=True)
    objects = distinct.tolist()
    return [objects[i] for i in which.tolist()]
