"""AnyBURL's rules with constants fired in bulk for every query of a head relation (forwards,
and static ones read backwards: `ReverseSets`), and their firings merged into each candidate's
score list (`rulerag.rules.application`'s docstring gives the semantics)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

import numpy as np

from rulerag.rules.aggregation import Candidates, shared_floats
from rulerag.rules.edge_index import Adjacency, EdgeIndex, latest_per_group
from rulerag.rules.ranges import ragged_ranges, sorted_lookup
from rulerag.rules.rule_table import ConstantRules
from rulerag.rules.settings import ApplySettings

__all__ = [
    "CONSTANT_QUERY_CHUNK",
    "ConstantRows",
    "ReverseSets",
    "constant_firings",
    "merge_constant_rows",
]


#: Queries whose constant-rule firings are gathered and merged at once: every candidate's score
#: list takes its firings in one merge, not one per body relation (ICEWS14's ac1 rules reach
#: thousands of firings a query)
CONSTANT_QUERY_CHUNK = 1024


@dataclass
class ConstantRows:
    """Firings of constant rules: per row the query, the candidate (the rule's head constant),
    the score (static: the rule's confidence; temporal: TLogic's score_12 of the body fact),
    the rule (position in the head's list), the body's other entity (d, one A, or -1 for a
    zero-body rule) and the body fact's time (0 for a static or zero-body rule)."""

    key: np.ndarray
    sub: np.ndarray
    cand: np.ndarray
    score: np.ndarray
    rule: np.ndarray
    middle: np.ndarray
    ts: np.ndarray

    @classmethod
    def concat(cls, parts: Sequence[ConstantRows]) -> ConstantRows:
        """The rows of `parts`, in order (no part: no row)."""
        names = [f.name for f in fields(cls)]
        if not parts:
            return cls(*(np.zeros(0, np.float32 if n == "score" else np.int64) for n in names))
        return cls(*(np.concatenate([getattr(p, n) for p in parts]) for n in names))


def constant_firings(
    constant: ConstantRules,
    key: np.ndarray,
    sub: np.ndarray,
    tq: np.ndarray,
    edges: EdgeIndex,
    settings: ApplySettings,
) -> Iterable[ConstantRows]:
    """Every firing of the constant rules of one head relation for the queries (key, sub, tq),
    as AnyBURL fires them (module docstring), in blocks: the zero-body rules, then per body
    relation the ac2 and the ac1 rules. Rules sharing a body fire for the same queries, so
    each body is matched once: ac1 rules are looked up by (body relation, d) from the query
    entities' own edges. Temporal rules (`temporal_constants`) see the body facts before the
    query time (within `window`) only and score TLogic's score_12 of the latest such fact; a
    zero-body rule, with no body fact, a * confidence."""
    n = edges.n_entities
    temporal = settings.temporal
    const = constant.constant
    conf = constant.confidence.astype(np.float64 if temporal else np.float32)
    body = constant.body.copy()
    # a reversed rule (`ReverseSets`) takes no part here: no body relation matches it
    body[constant.reverse] = -2
    d = constant.body_constant

    def block(
        q: np.ndarray, i: np.ndarray, middle: np.ndarray, ts: np.ndarray | None = None
    ) -> ConstantRows:
        """The firings of rules i for queries q, body facts (middle, ts); ts None: a zero-body
        rule's (static rules' scores do not use it)."""
        keep = (sub[q] != const[i]) & ((d[i] < 0) | (sub[q] != d[i]))
        q, i, middle = q[keep], i[keep], middle[keep]
        if not temporal:
            score = conf[i]
        elif ts is None:  # no body fact: no recency term
            score = (settings.a * conf[i]).astype(np.float32)
        else:
            recency = np.exp(settings.lmbda * (ts[keep] - tq[q]))
            score = (settings.a * conf[i] + (1 - settings.a) * recency).astype(np.float32)
        ts = np.zeros(len(q), np.int64) if ts is None else ts[keep]
        return ConstantRows(key[q], sub[q], const[i], score, i, middle, ts)

    zero = np.flatnonzero(body == -1)  # zero-body rules (never reversed)
    if len(zero):
        q = np.repeat(np.arange(len(key)), len(zero))
        i = np.tile(zero, len(key))
        yield block(q, i, np.full(len(q), -1))
    if temporal:  # strictly before the query, from t - window on
        lo = tq - settings.window if settings.window > 0 else np.full(len(key), edges.t_min)
        hi = tq
    else:
        lo = np.full(len(key), edges.t_min)
        hi = lo + edges.span
    for relation in np.unique(body[body >= 0]).tolist():
        adjacency = edges.by_relation.get(relation)
        if adjacency is None:
            continue
        start, counts = edges.ranges(adjacency, sub, lo, hi)
        ac2 = np.flatnonzero((body == relation) & (d < 0))
        if len(ac2) and temporal:
            fires, other, ts = _latest_other(adjacency, sub, start, counts)
            q = np.repeat(fires, len(ac2))
            rows = np.tile(ac2, len(fires))
            yield block(q, rows, np.repeat(other, len(ac2)), np.repeat(ts, len(ac2)))
        elif len(ac2):
            loop = sorted_lookup(edges.pairs(relation), sub * n + sub)[1]  # s(e, e) gives no A
            fires = np.flatnonzero(counts > loop)
            first = adjacency.obj[start[fires]]
            second = adjacency.obj[np.minimum(start[fires] + 1, len(adjacency.obj) - 1)]
            other = np.where(first == sub[fires], second, first)  # one A other than e
            q = np.repeat(fires, len(ac2))
            yield block(q, np.tile(ac2, len(fires)), np.repeat(other, len(ac2)))
        ac1 = np.flatnonzero((body == relation) & (d >= 0))
        if len(ac1):
            ac1 = ac1[np.argsort(d[ac1], kind="stable")]
            index, q = ragged_ranges(start, start + counts)  # the query entities' s-edges
            if temporal:  # per query and d, its latest fact: the one score_12 uses
                index, q = _latest_of(index, q, adjacency)
            obj = adjacency.obj[index]
            lo_d = np.searchsorted(d[ac1], obj, side="left")
            hi_d = np.searchsorted(d[ac1], obj, side="right")
            pos, owner = ragged_ranges(lo_d, hi_d)
            yield block(q[owner], ac1[pos], obj[owner], adjacency.ts[index][owner])


@dataclass(frozen=True)
class ReverseSets:
    """What the reversed rules of one head relation (`AppliedRule.reversed`) predict, one row
    per (rule, X), sorted by head constant: a query fires the rows whose constant is its
    entity. `middle` is the body's other entity of X's fact: d, or one A != X."""

    constant: np.ndarray
    rule: np.ndarray
    x: np.ndarray
    middle: np.ndarray
    score: np.ndarray

    @classmethod
    def build(
        cls, rules: ConstantRules, queried: np.ndarray, edges: EdgeIndex, bound: int
    ) -> ReverseSets:
        """The rows of the reversed rules among `rules` (positions in that list) whose head
        constant is one of the `queried` entities. As AnyBURL fires them
        (`RuleAcyclic.computeValuesReversed`): r(X, c) <= s(X, d) gives every X with s(X, d),
        r(X, c) <= s(X, A) every X with an s-fact to another entity, each X != c (and != d);
        a rule with `bound` or more such X (bound > 0) gives none."""
        index = np.flatnonzero(rules.reverse)
        const = rules.constant[index]
        asked = np.isin(const, queried)
        index, const = index[asked], const[asked]
        body, d = rules.body[index], rules.body_constant[index]
        parts: list[tuple[np.ndarray, ...]] = []
        for relation in np.unique(body).tolist():
            adjacency = edges.by_relation.get(relation)
            if adjacency is None:
                continue
            subject = adjacency.code // edges.span
            mine = body == relation
            ac1 = np.flatnonzero(mine & (d >= 0))
            if len(ac1):  # X with s(X, d): the relation's facts sorted by object
                objects, subjects = edges.by_object(relation)
                lo = np.searchsorted(objects, d[ac1], side="left")
                hi = np.searchsorted(objects, d[ac1], side="right")
                if bound:  # X != c and X != d remove at most two
                    small = hi - lo - 2 < bound
                    ac1, lo, hi = ac1[small], lo[small], hi[small]
                pos, owner = ragged_ranges(lo, hi)
                rows, x = ac1[owner], subjects[pos]
                keep = (x != const[rows]) & (x != d[rows])
                parts.append((rows[keep], x[keep], d[rows[keep]]))
            ac2 = np.flatnonzero(mine & (d < 0))
            if len(ac2):  # X with s(X, A), A != X: the same set for every rule
                other = adjacency.obj != subject
                xs, first = np.unique(subject[other], return_index=True)
                if bound:
                    size = len(xs) - np.isin(const[ac2], xs)
                    ac2 = ac2[size < bound]
                rows = np.repeat(ac2, len(xs))
                x = np.tile(xs, len(ac2))
                keep = x != const[rows]
                middle = np.tile(adjacency.obj[other][first], len(ac2))
                parts.append((rows[keep], x[keep], middle[keep]))
        rows, x, middle = (
            (np.concatenate(c) for c in zip(*parts, strict=True))
            if parts
            else (np.zeros(0, np.int64) for _ in range(3))
        )
        if bound and len(rows):  # exactly: X != c (and != d) are out
            sizes = np.bincount(rows, minlength=len(index))
            keep = sizes[rows] < bound
            rows, x, middle = rows[keep], x[keep], middle[keep]
        order = np.lexsort((x, rows, const[rows]))
        rows, x, middle = rows[order], x[order], middle[order]
        score = rules.confidence[index].astype(np.float32)
        return cls(const[rows], index[rows], x, middle, score[rows])

    def firings(self, key: np.ndarray, sub: np.ndarray) -> ConstantRows:
        """The rows fired by the queries (key, sub): those whose constant is the query's
        entity, each X a candidate explained by its own body fact (X, s, middle)."""
        lo = np.searchsorted(self.constant, sub, side="left")
        hi = np.searchsorted(self.constant, sub, side="right")
        pos, q = ragged_ranges(lo, hi)
        x = self.x[pos]
        return ConstantRows(
            key[q], x, x, self.score[pos], self.rule[pos], self.middle[pos], np.zeros_like(x)
        )


def _latest_of(
    index: np.ndarray, q: np.ndarray, adjacency: Adjacency
) -> tuple[np.ndarray, np.ndarray]:
    """Of the edges `index` of the queries `q`, the latest per (query, object)."""
    keep = latest_per_group([q, adjacency.obj[index]], adjacency.ts[index])
    return index[keep], q[keep]


def _latest_other(
    adjacency: Adjacency, sub: np.ndarray, start: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The queries whose entity has an edge in [start, start + counts) to another entity,
    with the latest such edge's object and time (ties: the first in the range)."""
    index, q = ragged_ranges(start, start + counts)
    other = adjacency.obj[index] != sub[q]
    index, q = index[other], q[other]
    keep = latest_per_group([q], adjacency.ts[index])
    keep = keep[np.argsort(q[keep], kind="stable")]
    return q[keep], adjacency.obj[index[keep]], adjacency.ts[index[keep]]


def merge_constant_rows(
    rows: ConstantRows,
    constant: ConstantRules,
    lists: dict[int, dict[int, list[float]]],
    out: dict[int, Candidates] | None,
) -> None:
    """Add the firings to each candidate's descending score list; a firing that beats the
    candidate's best score so far becomes its rule and explanation (ties keep the earlier:
    the closed rule, else the first constant rule in the head's list). `out` None: no rule
    or explanation kept (`apply_rules`'s `explain`)."""
    if not len(rows.key):
        return
    order = np.lexsort((rows.rule, -rows.score, rows.cand, rows.key))
    k, c = rows.key[order], rows.cand[order]
    cuts = np.flatnonzero((k[1:] != k[:-1]) | (c[1:] != c[:-1])) + 1
    starts = np.r_[0, cuts]
    ends = np.r_[cuts, len(order)].tolist()
    scores = shared_floats(rows.score[order])
    firsts = order[starts]
    position = rows.rule[firsts]
    best = zip(
        constant.index[position].tolist(),
        constant.body[position].tolist(),
        rows.sub[firsts].tolist(),
        rows.middle[firsts].tolist(),
        rows.ts[firsts].tolist(),
        strict=True,
    )
    for a, b, kk, cc, (index, body, sub, middle, ts) in zip(
        starts.tolist(), ends, k[starts].tolist(), c[starts].tolist(), best, strict=True
    ):
        new = scores[a:b]
        ranked = lists[kk].get(cc)
        if ranked is None:
            lists[kk][cc] = new
        else:  # two descending runs: one merge (timsort)
            lists[kk][cc] = sorted(ranked + new, reverse=True)
            if not new[0] > ranked[0]:
                continue
        if out is None:
            continue
        out[kk].rules[cc] = index
        out[kk].explanations[cc] = [] if middle < 0 else [(sub, body, middle, ts)]
