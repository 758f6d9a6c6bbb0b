"""Link forecasting's ranks: TLogic's time-aware filter and filtered rank (the answer first, or
last, among the candidates it ties with)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from rulerag.rules.edge_index import edges_with_inverses
from rulerag.rules.settings import TieRank

__all__ = [
    "filtered_rank",
    "filtered_rank_span",
    "time_aware_filter",
]


def time_aware_filter(
    facts: pd.DataFrame, n_relations: int
) -> dict[tuple[int, int, int], set[int]]:
    """(sub, rel, ts) -> every object true at that time in any split, both directions (TLogic
    ids): the answers a time-aware filtered rank must not count against a query."""
    edges = edges_with_inverses(facts, n_relations)
    known: dict[tuple[int, int, int], set[int]] = {}
    for s, r, o, t in edges[["sub", "rel", "obj", "ts"]].itertuples(index=False):
        known.setdefault((int(s), int(r), int(t)), set()).add(int(o))
    return known


def filtered_rank(
    scores: Mapping[int, float | tuple[float, ...]],
    answer: int,
    others: Iterable[int],
    n_entities: int,
    ties: TieRank = "first",
) -> int:
    """TLogic's rank: 1 + the candidates scored strictly higher than the answer, other true
    answers at the query time removed; an answer without a score ranks n_entities. Scores
    may be rank keys (tuples, compared as tuples). `ties="last"` also counts the candidates
    scored equal (the answer last among its ties, as SAFRAN's and AnyBURL's top-k lists may
    put it)."""
    first, last = filtered_rank_span(scores, answer, others, n_entities)
    return last if ties == "last" else first


def filtered_rank_span(
    scores: Mapping[int, float | tuple[float, ...]],
    answer: int,
    others: Iterable[int],
    n_entities: int,
) -> tuple[int, int]:
    """`filtered_rank` with the answer first and last among the candidates it ties with, in
    one pass over the candidates (an answer without a score: n_entities for both)."""
    if answer not in scores:
        return n_entities, n_entities
    mine = scores[answer]
    skip = set(others)
    skip.add(answer)
    higher = tied = 0
    for candidate, score in scores.items():
        if candidate in skip:
            continue
        if score > mine:
            higher += 1
        elif score == mine:
            tied += 1
    return 1 + higher, 1 + higher + tied
