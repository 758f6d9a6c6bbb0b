"""TLogic's rules with constants: AnyBURL's acyclic shapes under TLogic's time order, counted
exactly over the train facts with NumPy.

TLogic (Liu et al., AAAI 2022) learns cyclic temporal rules only and names rules with constants
as future work; AnyBURL (`anyburl_miner`) learns, for static KGs, rules whose head has a
constant. This module joins the two: for every head relation h (TLogic's ids, so h = r + n is
r read backwards and `h(X, c, T)` is `r(c, X, T)`: the subject-side variant) and constant c,

    ac1    h(X, c, T) <= b(X, d, T'),  T' < T     (b any relation, either direction; d may be c)
    ac2    h(X, c, T) <= b(X, A, T'),  T' < T     (A a free variable, A != X)
    zero   h(X, c, T) <=                          (no body: fires for every query of h)

Counting, as TLogic counts its rules (`rule_learning.py`: body support = distinct body
groundings, entities and times; rule support = those followed by the head between the same
entities at a later time), over every grounding instead of TLogic's samples:

- body groundings (`body_support`): the facts b(X, d, t') (ac1) or b(X, A, t') (ac2) with X
  not c and X not d (A not X), AnyBURL's object identity; for a zero rule every fact of h.
- rule support (`support`): those body facts with a head fact h(X, c, t) at some t > t'; for a
  zero rule the facts h(X, c, t), X != c.
- confidence: weight * support / (body groundings + pc), pc = `unseen_negatives` (TLogic's own
  `score1` smoothing constant c, 0 in its runs; AnyBURL's `UNSEEN_NEGATIVE_EXAMPLES` is 5) and
  the weight AnyBURL gives the weaker kinds (`ac2_weight`, `zero_weight`).
- kept: support >= `min_support`, confidence >= `min_confidence`.

With `groundings: entities` a body grounding is the entity X instead of the fact (AnyBURL's
count, and what TR-Rules, Li et al., EMNLP Findings 2023, calls removing temporal redundancy:
an entity whose body holds at 50 times no longer counts 50 times): body groundings are the
distinct X the body holds for, support those whose first body fact a head fact follows; a zero
rule's support is the distinct X with h(X, c), its body the distinct X with an h-fact.

Unlike AnyBURL's static rules, a body may be the head's own relation and direction, even with
d = c: h(X, c, T) <= h(X, c, T') says that X's relation with c recurs, a different fact at an
earlier time (AnyBURL excludes the static r(X, c) <= r(X, c) because it is the head itself).

The join: every distinct head triple (X, h, c) with its latest time, against X's facts before
that time (the body facts a head follows), one row per (X, h, c, body fact), counted per (h, c,
b, d) for ac1 and (h, c, b) for ac2, in chunks of whole (h, c) so each chunk's counts are final.
On ICEWS14's train split that is 74,498 head triples and 20.6 million rows.

Application (`application.apply_rules`, temporal): a query (X, h, ?, t) fires an ac1 rule when
X has a body fact b(X, d, t') with t' < t (and t' >= t - window), an ac2 rule when it has
b(X, A, t') with A != X, each scored with TLogic's score_12 of the latest such t'; zero rules
fire for every query, scored a * confidence (no body fact, no recency term).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from rulerag.rules.anyburl_miner import chunks_by_constant
from rulerag.rules.constant_columns import ConstantRuleColumns
from rulerag.rules.ranges import ragged_ranges, sorted_lookup
from rulerag.rules.rule import Rule
from rulerag.rules.settings import TemporalConstantSettings
from rulerag.rules.temporal_facts import temporal_fact_arrays

__all__ = ["mine_temporal_constant_rules"]


@dataclass(frozen=True)
class _TimedEdges:
    """Distinct facts in both directions in TLogic's ids (code r, or r + n read backwards),
    sorted by (src, time); `indptr` bounds each entity's edges."""

    n: int  # entities
    n_codes: int  # 2 * relations
    src: np.ndarray
    code: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    indptr: np.ndarray

    @classmethod
    def build(cls, facts: pd.DataFrame, n_entities: int, n_relations: int) -> _TimedEdges:
        h, r, o, t = temporal_fact_arrays(
            facts, n_entities, n_relations, "mining temporal rules with constants"
        )
        n_codes = 2 * n_relations
        if (n_codes * n_entities) ** 2 >= 2**62:
            raise ValueError("KG too large for 64-bit rule keys ((2 relations * entities)^2)")
        src, dst = np.concatenate([h, o]), np.concatenate([o, h])
        code = np.concatenate([r, r + n_relations])
        t = np.concatenate([t, t])
        return cls._sorted(n_entities, n_codes, src, code, dst, t)

    @classmethod
    def _sorted(cls, n: int, n_codes: int, src, code, dst, t) -> _TimedEdges:
        order = np.lexsort((dst, code, t, src))
        src, code, dst, t = src[order], code[order], dst[order], t[order]
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
        return cls(n, n_codes, src, code, dst, t, indptr)

    def earliest(self, *, keep_dst: bool) -> _TimedEdges:
        """Each (src, code, dst) once (`keep_dst`), or each (src, code) of the edges to another
        entity once, at its earliest time: the edges whose groundings are entities, not facts
        (X counts once for a body however often it holds; it precedes a head when its first
        body fact does)."""
        keep = np.ones(len(self.src), bool) if keep_dst else self.src != self.dst
        src, code, dst, t = (a[keep] for a in (self.src, self.code, self.dst, self.t))
        key = src * self.n_codes + code
        if keep_dst:
            key = key * self.n + dst
        order = np.lexsort((t, key))
        first = order[np.r_[True, key[order][1:] != key[order][:-1]]] if len(order) else order
        return self._sorted(self.n, self.n_codes, src[first], code[first], dst[first], t[first])


def _lookup(table: tuple[np.ndarray, np.ndarray], key: np.ndarray) -> np.ndarray:
    """The count of each key in `table` (np.unique's keys and counts; 0 when absent)."""
    keys, counts = table
    pos, found = sorted_lookup(keys, key)
    return np.where(found, counts[pos], 0) if len(keys) else np.zeros(len(key), np.int64)


def mine_temporal_constant_rules(
    facts: pd.DataFrame,
    n_entities: int,
    n_relations: int,
    settings: TemporalConstantSettings,
    *,
    inverse_heads: bool = True,
) -> list[Rule]:
    """Every temporal ac1, ac2 and zero rule of `settings.kinds` (module docstring) with its
    exact support, body support and confidence; heads r(X, c, T) and, with `inverse_heads`
    (TLogic learns for inverse relations too), r(c, X, T). `facts` are used whole (pass the
    train split)."""
    kinds = set(settings.kinds)
    if not kinds:
        return []
    g = _TimedEdges.build(facts, n_entities, n_relations)
    n, m = g.n, g.n_codes
    pc = settings.unseen_negatives
    weight = {"ac1": 1.0, "ac2": settings.ac2_weight, "zero": settings.zero_weight}
    proper = g.src != g.dst
    # head triples (X, h, c), X != c, each with its latest time: the body facts it follows
    frame = pd.DataFrame({"x": g.src[proper], "h": g.code[proper], "c": g.dst[proper]})
    latest = frame.assign(t=g.t[proper]).groupby(["h", "c", "x"], sort=True)["t"].max()
    hx = latest.index.get_level_values("x").to_numpy(np.int64)
    hh = latest.index.get_level_values("h").to_numpy(np.int64)
    hc = latest.index.get_level_values("c").to_numpy(np.int64)
    ht = latest.to_numpy(np.int64)
    if not inverse_heads:
        forward = hh < n_relations
        hx, hh, hc, ht = hx[forward], hh[forward], hc[forward], ht[forward]

    found: dict[str, tuple[np.ndarray, ...]] = {}  # kind -> (h, c, support, body, code, d)
    by_entity = settings.groundings == "entities"
    if "zero" in kinds:
        if by_entity:  # distinct X with h(X, c); distinct X with an h-fact to another entity
            head_key, support = np.unique(hh * n + hc, return_counts=True)
            body_per_code = np.bincount(g.earliest(keep_dst=False).code, minlength=m)
        else:  # facts h(X, c, t); every fact of h
            head_key, support = np.unique(g.code[proper] * n + g.dst[proper], return_counts=True)
            body_per_code = np.bincount(g.code, minlength=m)
        h, c = np.divmod(head_key, n)
        if not inverse_heads:
            head_key, support, h, c = (a[h < n_relations] for a in (head_key, support, h, c))
        found["zero"] = (h, c, support, body_per_code[h], None, None)
    with_body = kinds & {"ac1", "ac2"}
    if by_entity:  # each (X, b, d) / (X, b) once, at its earliest time
        for kind in sorted(with_body):
            table = g.earliest(keep_dst=kind == "ac1")
            found.update(_with_body(table, hx, hh, hc, ht, {kind}, settings.min_support))
    elif with_body:
        found.update(_with_body(g, hx, hh, hc, ht, with_body, settings.min_support))

    rules: list[Rule] = []
    for kind in ("zero", "ac2", "ac1"):
        if kind not in found:
            continue
        h, c, support, body, code, d = found[kind]
        confidence = weight[kind] * support / np.maximum(body + pc, 1)
        ok = (support >= settings.min_support) & (confidence >= settings.min_confidence)
        ok &= (confidence > 0) & (body > 0)
        for head in np.unique(h[ok]).tolist():
            sel = ok & (h == head)
            rules += ConstantRuleColumns.of(
                head % n_relations,
                head >= n_relations,
                c[sel],
                support[sel],
                body[sel],
                confidence[sel],
                pc,
                None if code is None else _anyburl_code(code[sel], n_relations),
                None if d is None else d[sel],
                temporal=True,
            ).rules()
    return rules


def _anyburl_code(code: np.ndarray, n_relations: int) -> np.ndarray:
    """TLogic's body ids (r, or r + n backwards) as `ConstantRuleColumns`' codes, 2 r (+ 1)."""
    return 2 * (code % n_relations) + (code >= n_relations)


def _with_body(
    g: _TimedEdges,
    hx: np.ndarray,
    hh: np.ndarray,
    hc: np.ndarray,
    ht: np.ndarray,
    kinds: set[str],
    min_support: int,
) -> dict[str, tuple[np.ndarray, ...]]:
    """ac1 and ac2 candidates with their support and body groundings: head triples joined with
    the body facts of X before the triple's latest time (module docstring)."""
    n, m = g.n, g.n_codes
    # X's edges before time T: [indptr[X], first edge of X at time >= T)
    t0 = g.t.min() if len(g.t) else 0
    span = (g.t.max() - t0 + 1) if len(g.t) else 1
    stop = np.searchsorted(g.src * span + (g.t - t0), hx * span + (ht - t0), side="left")
    start = g.indptr[hx]
    group = hh * n + hc
    ac1_parts, ac2_parts = [], []
    for part in chunks_by_constant(group, stop - start):
        pos, owner = ragged_ranges(start[part], stop[part])
        row = part[owner]
        x, code, d = hx[row], g.code[pos], g.dst[pos]
        body_ok = d != x
        gh, code, d = group[row][body_ok], code[body_ok], d[body_ok]
        if "ac2" in kinds:
            ac2_parts.append(np.unique(gh * m + code, return_counts=True))
        if "ac1" in kinds:
            key, support = np.unique((gh * m + code) * n + d, return_counts=True)
            frequent = support >= min_support  # most candidates: dropped before any lookup
            ac1_parts.append((key[frequent], support[frequent]))
    out: dict[str, tuple[np.ndarray, ...]] = {}
    proper = g.src != g.dst
    if "ac2" in kinds:
        key = np.concatenate([k for k, _ in ac2_parts]) if ac2_parts else np.zeros(0, np.int64)
        support = np.concatenate([s for _, s in ac2_parts]) if ac2_parts else key
        group, code = np.divmod(key, m)
        h, c = np.divmod(group, n)
        # b(X, A, t'), A != X: every proper b-edge, less those of X = c
        per_code = np.bincount(g.code[proper], minlength=m)
        of_c = np.unique(g.src[proper] * m + g.code[proper], return_counts=True)
        body = per_code[code] - _lookup(of_c, c * m + code)
        out["ac2"] = (h, c, support, body, code, None)
    if "ac1" in kinds:
        key = np.concatenate([k for k, _ in ac1_parts]) if ac1_parts else np.zeros(0, np.int64)
        support = np.concatenate([s for _, s in ac1_parts]) if ac1_parts else key
        group_code, d = np.divmod(key, n)
        group, code = np.divmod(group_code, m)
        h, c = np.divmod(group, n)
        # b(X, d, t'), X != d: d's proper edges backwards, less those of X = c
        into_d = np.unique(g.code[proper] * n + g.dst[proper], return_counts=True)
        from_c = np.unique((g.src * m + g.code) * n + g.dst, return_counts=True)
        body = _lookup(into_d, code * n + d) - np.where(
            c != d, _lookup(from_c, (c * m + code) * n + d), 0
        )
        out["ac1"] = (h, c, support, body, code, d)
    return out
