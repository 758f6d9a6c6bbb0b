"""Groundings of closed rules (paths, and static rules on the head's own pair) for many queries
at once, hop by hop over the `EdgeIndex`, in blocks of at most `MAX_EXPANSION_ROWS` rows; the
predictions SAFRAN's clustering compares; a grounding's body facts as its explanation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from rulerag.rules.applied_rule import AppliedRule
from rulerag.rules.edge_index import EdgeIndex, latest_per_group
from rulerag.rules.ranges import ragged_ranges, split_by_weight

__all__ = [
    "MAX_EXPANSION_ROWS",
    "Paths",
    "bounded",
    "explanation",
    "groundings",
    "rule_predictions",
]


#: Rows one hop of a rule's groundings materialises at once (about 0.4 GB of path arrays); a
#: larger expansion runs in blocks. YAGO's facts repeat every year of their validity, so one
#: three-atom rule over 68 queries reaches 5.3e8 rows at its last hop.
MAX_EXPANSION_ROWS = 1 << 22


@dataclass
class Paths:
    """Groundings under construction: the query each belongs to and the path so far."""

    key: np.ndarray
    tq: np.ndarray
    ents: list[np.ndarray]  # e0 (the query subject), e1, ...
    times: list[np.ndarray]  # t0, t1, ...

    def take(self, rows: np.ndarray) -> Paths:
        return Paths(
            self.key[rows],
            self.tq[rows],
            [e[rows] for e in self.ents],
            [t[rows] for t in self.times],
        )

    @classmethod
    def concat(cls, parts: Sequence[Paths]) -> Paths:
        """The rows of `parts`, in order."""
        return cls(
            np.concatenate([p.key for p in parts]),
            np.concatenate([p.tq for p in parts]),
            [np.concatenate(column) for column in zip(*(p.ents for p in parts), strict=True)],
            [np.concatenate(column) for column in zip(*(p.times for p in parts), strict=True)],
        )


def _best_per_candidate(paths: Paths, n_entities: int) -> Paths:
    """Of the groundings reaching one candidate for one query, the one with the latest first
    body fact: the only one the score (recency of t_0) and the explanation use."""
    pair = paths.key * n_entities + paths.ents[-1]
    return paths.take(latest_per_group([pair], paths.times[0]))


def _reduce_hop(
    found: Paths, rule: AppliedRule, hop: int, constrained: Sequence[int], n_entities: int
) -> Paths:
    """The paths worth extending after `hop`; after the last, the groundings that score."""
    if hop + 1 == len(rule.body):
        same = np.ones(len(found.key), dtype=bool)
        for group in rule.constraints:
            for position in group[1:]:
                same &= found.ents[position] == found.ents[group[0]]
        return _best_per_candidate(found.take(np.flatnonzero(same)), n_entities)
    if len(found.key) <= 1:
        return found
    # What the rest of the path and the score depend on: where it is, when, the constrained
    # entities it passed, and the latest first-hop time. Of the paths alike in the rest, the
    # one with the latest t0 is kept (with its entities, for the explanation), so hub entities
    # do not multiply paths hop after hop.
    alike = [found.key * n_entities + found.ents[-1], found.times[-1]]
    alike += [found.ents[v] for v in constrained if 0 < v <= hop]
    return found.take(latest_per_group(alike, found.times[0]))


def groundings(
    rule: AppliedRule,
    key: np.ndarray,
    sub: np.ndarray,
    tq: np.ndarray,
    edges: EdgeIndex,
    window: int,
    temporal: bool = True,
) -> Paths | None:
    """Every grounding of `rule` for the queries (key, sub, tq); None when there is none."""
    if rule.pair:
        return _pair_groundings(rule, key, sub, tq, edges)
    paths = Paths(key, tq, [sub], [])
    constrained = sorted({v for group in rule.constraints for v in group})
    unbounded = np.full(len(key), np.iinfo(np.int64).min // 4)
    for hop, relation in enumerate(rule.body):
        adjacency = edges.by_relation.get(relation)
        if adjacency is None or len(paths.key) == 0:
            return None
        if temporal:
            lo = paths.times[-1] if hop else unbounded[: len(paths.key)]
            if window > 0:
                lo = np.maximum(lo, paths.tq - window)
            hi = paths.tq  # strictly before the query
        else:
            lo = np.zeros(len(paths.key), np.int64) + edges.t_min
            hi = lo + edges.span
        start, counts = edges.ranges(adjacency, paths.ents[-1], lo, hi)

        # In blocks of at most MAX_EXPANSION_ROWS new rows, each reduced at once; the blocks'
        # survivors are reduced together whenever they add up to a block, and at the end.
        # That keeps exactly the rows one reduction of the whole would (per group the latest
        # t0, ties to the earliest row), since survivors keep their blocks' order.
        reduce = partial(
            _reduce_hop, rule=rule, hop=hop, constrained=constrained, n_entities=edges.n_entities
        )
        pending: list[Paths] = []
        for part in split_by_weight(counts, MAX_EXPANSION_ROWS):
            index, owner = ragged_ranges(start[part], start[part] + counts[part])
            block = paths.take(part.start + owner)
            block.ents.append(adjacency.obj[index])
            block.times.append(adjacency.ts[index])
            pending.append(reduce(block))
            if len(pending) > 1 and sum(len(p.key) for p in pending) > MAX_EXPANSION_ROWS:
                pending = [reduce(Paths.concat(pending))]
        paths = pending[0] if len(pending) == 1 else reduce(Paths.concat(pending))
    return paths if len(paths.key) else None


def bounded(found: Paths, bound: int) -> Paths | None:
    """The groundings of the queries for which the rule reaches fewer than `bound` candidates
    (AnyBURL's and SAFRAN's DISCRIMINATION_BOUND: a rule with as many or more predicts
    nothing)."""
    _, owner, counts = np.unique(found.key, return_inverse=True, return_counts=True)
    keep = np.flatnonzero(counts[owner] < bound)
    return found.take(keep) if len(keep) else None


def rule_predictions(rule: AppliedRule, graph: EdgeIndex) -> np.ndarray:
    """The pairs (x, y) the rule infers on `graph` (every grounding from every entity), as
    sorted unique codes x * graph.n_entities + y."""
    adjacency = graph.by_relation.get(rule.body[0])
    if adjacency is None:
        return np.empty(0, np.int64)
    subjects = np.unique(adjacency.code // graph.span)
    found = groundings(
        rule, subjects, subjects, np.zeros_like(subjects), graph, window=0, temporal=False
    )
    if found is None:
        return np.empty(0, np.int64)
    return np.unique(found.key * graph.n_entities + found.ents[-1])


def _pair_groundings(
    rule: AppliedRule, key: np.ndarray, sub: np.ndarray, tq: np.ndarray, edges: EdgeIndex
) -> Paths | None:
    """A static pair rule's groundings: the candidates every body relation links the query's
    entity to (the first atom's edges, kept where the others hold too)."""
    adjacency = edges.by_relation.get(rule.body[0])
    if adjacency is None or any(r not in edges.by_relation for r in rule.body[1:]):
        return None
    everything = np.full(len(key), edges.t_min)
    start, counts = edges.ranges(adjacency, sub, everything, everything + edges.span)
    index, rows = ragged_ranges(start, start + counts)
    x, y = sub[rows], adjacency.obj[index]
    keep = np.ones(len(rows), dtype=bool)
    for relation in rule.body[1:]:
        keep &= np.isin(x * edges.n_entities + y, edges.pairs(relation))
    rows, y = rows[keep], y[keep]
    if not len(rows):
        return None
    ts = adjacency.ts[index][keep]
    return _best_per_candidate(Paths(key[rows], tq[rows], [sub[rows], y], [ts]), edges.n_entities)


def explanation(rule: AppliedRule, found: Paths, row: int) -> list[tuple[int, int, int, int]]:
    """The body facts (sub, rel, obj, ts) of one grounding."""
    if rule.pair:
        x, y, ts = int(found.ents[0][row]), int(found.ents[1][row]), int(found.times[0][row])
        return [(x, relation, y, ts) for relation in rule.body]
    return [
        (
            int(found.ents[i][row]),
            rule.body[i],
            int(found.ents[i + 1][row]),
            int(found.times[i][row]),
        )
        for i in range(len(rule.body))
    ]
