"""Temporal rule mining with TLogic's semantics, vectorised.

TLogic (Liu et al., AAAI 2022; reference code `liu-yushan/TLogic`, `mycode/temporal_walk.py`,
`rule_learning.py`, `learn.py`) learns cyclic temporal rules

    r_h(X0, Xl, T) <- b_1(X0, X1, T1), b_2(X1, X2, T2), ..., b_l(Xl-1, Xl, Tl),
    T1 <= T2 <= ... <= Tl < T

from temporal random walks, and estimates each rule's confidence from sampled bodies. This
module reproduces those semantics with NumPy array operations over all walks and all sampled
bodies at once (the reference code walks one edge at a time in Python; on ICEWS14 with lengths
1-3 and 200 walks per relation and length it takes about 750 s).

What is reproduced, step by step (TLogic's names in brackets):

* Inverse edges [`Grapher.add_inverses`]: every fact (s, r, o, t) also exists as
  (o, r + n, s, t). Facts do not carry them; they are built here. Walks start from every
  relation that has edges, inverse relations included [`learn.py`: `all_relations`].
* Walk [`Temporal_Walk.sample_walk`], for a rule of length l (a walk of l + 1 edges): a start
  edge (e1, r_h, e2, t) drawn uniformly from r_h's edges; then l steps backwards in time from e2.
  Step 1 takes an edge of the current node with time < t (strictly), later steps time <= the
  current time and never the inverse of the edge just used; the last step must end at e1.
  Among the allowed edges the next one is drawn uniformly (`unif`) or with weight
  exp(t_edge - t_current) (`exp`; if every weight underflows to 0, uniformly, as TLogic's
  `except ValueError` does).
* Rule [`Rule_Learner.create_rule`]: head relation r_h, body = the walk's later edges reversed
  in order and in direction (so the body runs forward in time from X0 = e1 to Xl = e2),
  `var_constraints` = groups of positions of X0..Xl bound to the same entity.
* Confidence [`estimate_confidence`, `sample_body`, `calculate_rule_support`]: draw
  `num_samples` bodies (first edge uniform among b_1's edges, each next edge uniform among b_k's
  edges leaving the current entity at a time >= the current one); a sample whose entity
  equality pattern differs from the rule's constraints is dropped (only when the rule has
  constraints: a constraint-free rule keeps every sample, as TLogic does); body support =
  number of distinct sampled bodies (entities and times); rule support = how many of them have
  a head fact r_h(X0, Xl, t) with t later than the body's last time; confidence = rule support /
  body support rounded to 6 decimals. Rules are kept when rule support > 0 [`if rule["conf"]`].

Deviations, all deliberate:

* Each distinct rule is estimated from its own `num_samples` bodies as in TLogic, but rules
  that share a body (same body relations; different heads or constraints) share the same
  sampled bodies, drawn once from a generator seeded by the body. Each rule's estimate has
  exactly TLogic's distribution; estimates of rules with a common body are correlated.
* Randomness: one NumPy generator per (relation, length) for walks and one per body for
  confidence samples, all derived from `seed`, so results do not depend on the order of work.
  The draws differ from TLogic's global `np.random` stream, so rules agree in distribution,
  not draw for draw.
* Duplicate facts (same head, relation, tail, time) are merged first; TLogic would sample them
  twice as often. The TLogic ICEWS14 files have none.
* `exact=True` (not in TLogic) replaces sampling by the full population the sampler draws from:
  body support = number of distinct body groundings (entity tuple and time tuple) with
  non-decreasing times that satisfy the rule's constraints (or any grounding for a
  constraint-free rule); rule support = how many of them have a later head fact between X0 and
  Xl. Confidence is then not rounded. The sampled confidence is *not* an unbiased estimate of
  this ratio for l >= 2 (TLogic's sampler is not uniform over groundings); for l = 1 it is.
* Rules learnt for an inverse head relation are renamed to a forward head (see `tlogic_io`);
  for l = 1 such a rule equals a forward-head rule, and the forward-head one is kept.
* Thresholds (`min_rule_support` default 1 = TLogic's `conf > 0`, `min_body_support`,
  `min_confidence`) are applied after estimation; TLogic has only the first at learning time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from rulerag.rules.ranges import ragged_ranges, split_by_weight
from rulerag.rules.rule import Rule
from rulerag.rules.settings import SEED, TemporalMinerSettings
from rulerag.rules.temporal_constants import mine_temporal_constant_rules
from rulerag.rules.temporal_facts import temporal_fact_arrays
from rulerag.rules.tlogic_io import rule_from_tlogic, sort_temporal_rules

#: a node whose edges span more time units than this is sampled exactly, edge by edge, for `exp`
#: (exp(-700) is still a normal float64, so prefix sums of exp(t - t_max) are exact below it)
EXP_SPAN_LIMIT = 700
#: rows (walk steps, sampled or enumerated bodies) handled at once; bounds peak memory
CHUNK_ROWS = 2_000_000
_SEED_WALK, _SEED_BODY = 0, 1


@dataclass
class TemporalGraph:
    """Train facts plus their inverses, indexed three ways for vectorised range look-ups.

    Edges are rows of the arrays `s, r, o, t` (inverse relation of r is r + n_relations).
    Each index is a permutation of the edges sorted by a composite int64 key, so "the edges of
    node v up to time t" or "edges of relation b leaving v from time t on" are contiguous
    ranges found with `np.searchsorted`:

    * A, by (subject, time): walk steps; `a_w`, `a_pincl`, `a_pexcl` hold exp(t - t_max) and
      its inclusive / exclusive prefix sums within each node's block (for `exp`).
    * B, by (subject, object, time): the walk's last step, which must reach the start entity.
    * C, by (relation, subject, time): body sampling and exact body enumeration.
    * PR, the latest time of each (subject, object, relation), by (subject, object, latest
      time): the relations whose head fact exists after a given time form a suffix of a block.
    """

    n_entities: int
    n_relations: int
    n_times: int
    s: np.ndarray
    r: np.ndarray
    o: np.ndarray
    t: np.ndarray
    tr: np.ndarray
    inv: np.ndarray
    a_perm: np.ndarray
    a_key: np.ndarray
    a_pos: np.ndarray
    a_start: np.ndarray
    a_w: np.ndarray
    a_pincl: np.ndarray
    a_pexcl: np.ndarray
    a_span_ok: np.ndarray
    b_perm: np.ndarray
    b_key: np.ndarray
    b_pos: np.ndarray
    b_w: np.ndarray
    b_pincl: np.ndarray
    b_pexcl: np.ndarray
    b_span_ok: np.ndarray
    c_perm: np.ndarray
    c_key: np.ndarray
    c_rel_start: np.ndarray
    pr_key: np.ndarray
    pr_rel: np.ndarray

    @property
    def n_edges(self) -> int:
        return len(self.s)

    def inverse_relation(self, rel: np.ndarray) -> np.ndarray:
        """TLogic's `inv_relation_id`: r <-> r + n."""
        return (rel + self.n_relations) % (2 * self.n_relations)

    def relation_edge_counts(self) -> np.ndarray:
        return np.diff(self.c_rel_start)


def _block_weights(
    times: np.ndarray, block: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """exp(t - block max), its prefix sums within each block, and whether the block's time span
    keeps every weight a normal float. `times` is sorted ascending within each block."""
    if len(times) == 0:
        empty = np.zeros(0)
        return empty, empty, empty, np.zeros(0, dtype=bool)
    frame = pd.DataFrame({"b": block, "t": times})
    grouped = frame.groupby("b", sort=False)["t"]
    t_max = grouped.transform("max").to_numpy()
    t_min = grouped.transform("min").to_numpy()
    w = np.exp((times - t_max).astype(np.float64))
    pincl = pd.Series(w).groupby(block, sort=False).cumsum().to_numpy()
    return w, pincl, pincl - w, (t_max - t_min) <= EXP_SPAN_LIMIT


def build_temporal_graph(facts: pd.DataFrame, n_entities: int, n_relations: int) -> TemporalGraph:
    """Index the train facts (with inverses) for walking and sampling.

    Raises ValueError for facts without a time or ids outside the declared ranges.
    """
    s0, r0, o0, t0 = temporal_fact_arrays(facts, n_entities, n_relations, "temporal mining")
    n, m, nf = n_entities, n_relations, len(s0)
    s = np.concatenate([s0, o0])
    r = np.concatenate([r0, r0 + m])
    o = np.concatenate([o0, s0])
    t = np.concatenate([t0, t0])
    inv = np.concatenate([np.arange(nf) + nf, np.arange(nf)]).astype(np.int64)
    times = np.unique(t)
    tr = np.searchsorted(times, t).astype(np.int64)
    nt = len(times) + 1  # one spare rank: keys (block + 1) * nt bound a block from above
    if max(n, 2 * m) * n * nt >= 2**62:
        raise ValueError("KG too large for 64-bit composite keys (entities^2 * times)")
    ids = np.arange(len(s))

    a_perm = np.lexsort((o, r, tr, s))
    a_key = (s * nt + tr)[a_perm]
    a_pos = np.empty_like(a_perm)
    a_pos[a_perm] = ids
    a_start = np.searchsorted(a_key, np.arange(n + 1) * nt)
    a_w, a_pincl, a_pexcl, a_ok = _block_weights(t[a_perm], s[a_perm])
    a_span_ok = np.ones(n, dtype=bool)
    a_span_ok[s[a_perm]] = a_ok

    b_perm = np.lexsort((r, tr, o, s))
    b_pair = (s * n + o)[b_perm]
    b_key = b_pair * nt + tr[b_perm]
    b_pos = np.empty_like(b_perm)
    b_pos[b_perm] = ids
    b_w, b_pincl, b_pexcl, b_span_ok = _block_weights(t[b_perm], b_pair)

    c_perm = np.lexsort((o, tr, s, r))
    c_key = ((r * n + s) * nt + tr)[c_perm]
    c_rel_start = np.searchsorted(c_key, np.arange(2 * m + 1) * n * nt)

    latest = (
        pd.DataFrame({"s": s, "o": o, "r": r, "tr": tr})
        .groupby(["s", "o", "r"], sort=False)["tr"]
        .max()
        .reset_index()
    )
    pr_key = (latest["s"].to_numpy() * n + latest["o"].to_numpy()) * nt + latest["tr"].to_numpy()
    order = np.argsort(pr_key, kind="stable")
    return TemporalGraph(
        n_entities=n,
        n_relations=m,
        n_times=nt,
        s=s,
        r=r,
        o=o,
        t=t,
        tr=tr,
        inv=inv,
        a_perm=a_perm,
        a_key=a_key,
        a_pos=a_pos,
        a_start=a_start,
        a_w=a_w,
        a_pincl=a_pincl,
        a_pexcl=a_pexcl,
        a_span_ok=a_span_ok,
        b_perm=b_perm,
        b_key=b_key,
        b_pos=b_pos,
        b_w=b_w,
        b_pincl=b_pincl,
        b_pexcl=b_pexcl,
        b_span_ok=b_span_ok,
        c_perm=c_perm,
        c_key=c_key,
        c_rel_start=c_rel_start,
        pr_key=pr_key[order],
        pr_rel=latest["r"].to_numpy()[order],
    )


# ---------------------------------------------------------------------------------------------
# small vectorised helpers


def _first_occurrence(ents: np.ndarray) -> np.ndarray:
    """For each row, the index of the first column holding the same entity (its pattern)."""
    cols = ents.shape[1]
    first = np.tile(np.arange(cols), (len(ents), 1))
    for i in range(1, cols):
        for j in range(i - 1, -1, -1):
            same = ents[:, j] == ents[:, i]
            first[same, i] = j
    return first


def _pattern_codes(ents: np.ndarray) -> np.ndarray:
    """Encode each row's entity equality pattern as one int (equal codes = equal constraints)."""
    cols = ents.shape[1]
    return _first_occurrence(ents) @ (cols ** np.arange(cols, dtype=np.int64))


def _identity_code(cols: int) -> int:
    return int(np.arange(cols) @ (cols ** np.arange(cols, dtype=np.int64)))


def _constraints_of(code: int, cols: int) -> list[list[int]]:
    """TLogic's `define_var_constraints` for a pattern code: groups of >1 equal positions."""
    first = [(code // cols**i) % cols for i in range(cols)]
    groups: dict[int, list[int]] = {}
    for i, f in enumerate(first):
        groups.setdefault(f, []).append(i)
    return sorted(g for g in groups.values() if len(g) > 1)


def _count_lookup(keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """How often each query value occurs in `keys`."""
    uniq, counts = np.unique(keys, return_counts=True)
    if len(uniq) == 0:
        return np.zeros(len(query), dtype=np.int64)
    at = np.minimum(np.searchsorted(uniq, query), len(uniq) - 1)
    return np.where(uniq[at] == query, counts[at], 0)


def _unique_rows(mat: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct row."""
    if len(mat) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(mat.T[::-1])
    srt = mat[order]
    new = np.ones(len(mat), dtype=bool)
    new[1:] = (srt[1:] != srt[:-1]).any(axis=1)
    return order[new]


def _bisect_right(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per row, the first index i in [lo, hi) with values[i] > x (hi if none): a vectorised
    binary search over segments that are sorted on their own but not globally."""
    lo, hi = lo.copy(), hi.copy()
    active = lo < hi
    while active.any():
        idx = np.flatnonzero(active)
        mid = (lo[idx] + hi[idx]) // 2
        right = values[mid] <= x[idx]
        lo[idx[right]] = mid[right] + 1
        hi[idx[~right]] = mid[~right]
        active[idx] = lo[idx] < hi[idx]
    return lo


# ---------------------------------------------------------------------------------------------
# walks


def _choose_exp_exact(
    g: TemporalGraph,
    perm: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    x: np.ndarray,
    cur_t: np.ndarray,
    u: np.ndarray,
) -> np.ndarray:
    """TLogic's `exp` draw edge by edge: weights exp(t - t_cur), the excluded edge at position
    x (or -1) removed, uniform when all weights underflow. For nodes with long time spans."""
    out = np.empty(len(lo), dtype=np.int64)
    lengths = hi - lo
    for part in split_by_weight(lengths, CHUNK_ROWS):
        plo, phi, px = lo[part], hi[part], x[part]
        pos, owner = ragged_ranges(plo, phi)
        w = np.exp((g.t[perm[pos]] - cur_t[part][owner]).astype(np.float64))
        w[pos == px[owner]] = 0.0
        seg_start = np.cumsum(phi - plo) - (phi - plo)
        seg_max = np.maximum.reduceat(w, seg_start) if len(w) else np.zeros(0)
        underflow = seg_max[owner] == 0.0
        w = np.where(underflow, 1.0, w / np.where(underflow, 1.0, seg_max[owner]))
        w[pos == px[owner]] = 0.0
        cum = np.cumsum(w)
        total = np.add.reduceat(w, seg_start)
        before = cum[seg_start] - w[seg_start]
        target = before + u[part] * total
        pick = np.searchsorted(cum, target, side="right")
        pick = np.clip(pick, seg_start, seg_start + (phi - plo) - 1)
        # never the excluded edge (only reachable through rounding)
        bad = pos[pick] == px
        pick[bad] = np.where(pick[bad] > seg_start[bad], pick[bad] - 1, pick[bad] + 1)
        out[part] = pos[pick]
    return out


def _choose(
    g: TemporalGraph,
    order: str,
    lo: np.ndarray,
    hi: np.ndarray,
    x: np.ndarray,
    cur_t: np.ndarray,
    u: np.ndarray,
    transition: str,
) -> np.ndarray:
    """Draw one position in each range [lo, hi) (which starts at its block start), skipping the
    excluded position x (-1 = none), uniformly or with TLogic's exp(t - t_cur) weights."""
    has_x = x >= 0
    n_c = hi - lo - has_x
    if transition == "unif":
        pos = lo + np.minimum((u * n_c).astype(np.int64), n_c - 1)
        return pos + (has_x & (pos >= x))
    if order == "a":
        perm, w, pincl, pexcl = g.a_perm, g.a_w, g.a_pincl, g.a_pexcl
        span_ok = g.a_span_ok[g.s[perm[lo]]]
    else:
        perm, w, pincl, pexcl = g.b_perm, g.b_w, g.b_pincl, g.b_pexcl
        span_ok = g.b_span_ok[lo]
    pos = np.empty(len(lo), dtype=np.int64)
    fast = np.flatnonzero(span_ok)
    if len(fast):
        flo, fhi, fx, fu = lo[fast], hi[fast], x[fast], u[fast]
        fhas = fx >= 0
        xs = np.where(fhas, fx, 0)
        total = np.where(
            fhas, pexcl[xs] + (pincl[fhi - 1] - pincl[xs]), pincl[fhi - 1]
        )  # no cancellation: the edges after x share x's time, hence its weight scale
        target = fu * total
        shift = fhas & (target >= pexcl[xs])
        target = np.where(shift, target + w[xs], target)
        p = np.minimum(_bisect_right(pincl, flo, fhi, target), fhi - 1)
        bad = fhas & (p == fx)
        p[bad] = np.where(p[bad] + 1 < fhi[bad], p[bad] + 1, p[bad] - 1)
        pos[fast] = p
    slow = np.flatnonzero(~span_ok)
    if len(slow):
        pos[slow] = _choose_exp_exact(g, perm, lo[slow], hi[slow], x[slow], cur_t[slow], u[slow])
    return pos


def sample_walks(
    g: TemporalGraph, head_rels: np.ndarray, length: int, u: np.ndarray, transition: str
) -> tuple[np.ndarray, np.ndarray]:
    """Cyclic temporal random walks, one per entry of `head_rels` (TLogic's `sample_walk` with
    L = length + 1), driven by the uniforms `u` of shape (walks, length + 1).

    Returns (ok, edges): `edges[i, k]` is the k-th edge of walk i (0 = the head edge, then
    backwards in time), -1 after a failed step; `ok[i]` says the walk closed its cycle.
    """
    n_walks = len(head_rels)
    edges = np.full((n_walks, length + 1), -1, dtype=np.int64)
    counts = g.relation_edge_counts()[head_rels]
    if n_walks == 0:
        return np.zeros(0, dtype=bool), edges
    if (counts == 0).any():
        raise ValueError("a walk's head relation has no edges")
    pick = g.c_rel_start[head_rels] + np.minimum((u[:, 0] * counts).astype(np.int64), counts - 1)
    first = g.c_perm[pick]
    edges[:, 0] = first
    alive = np.arange(n_walks)
    start, prev = g.s[first], first
    for step in range(1, length + 1):
        cur, cur_tr, cur_t = g.o[prev], g.tr[prev], g.t[prev]
        side = "left" if step == 1 else "right"  # step 1: strictly earlier, later: <=
        if step < length:
            order, perm = "a", g.a_perm
            lo = g.a_start[cur]
            hi = np.searchsorted(g.a_key, cur * g.n_times + cur_tr, side=side)
            x = g.a_pos[g.inv[prev]] if step > 1 else np.full(len(prev), -1)
        else:
            order, perm = "b", g.b_perm
            pair = cur * g.n_entities + start
            lo = np.searchsorted(g.b_key, pair * g.n_times, side="left")
            hi = np.searchsorted(g.b_key, pair * g.n_times + cur_tr, side=side)
            back_to_start = g.s[prev] == start
            x = np.where(back_to_start & (step > 1), g.b_pos[g.inv[prev]], -1)
        has = (hi - lo - (x >= 0)) > 0
        alive, lo, hi, x = alive[has], lo[has], hi[has], x[has]
        start, prev, cur_t = start[has], prev[has], cur_t[has]
        if len(alive) == 0:
            break
        pos = _choose(g, order, lo, hi, x, cur_t, u[alive, step], transition)
        prev = perm[pos]
        edges[alive, step] = prev
    ok = np.zeros(n_walks, dtype=bool)
    ok[alive] = True
    return ok, edges


def enumerate_length1(
    g: TemporalGraph, heads: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every one-atom rule some walk could find, without walking: (head, body (m, 1), pattern)
    for each head relation h in `heads` and relation b (TLogic ids, inverses included) with
    facts h(x, y, t) and b(x, y, t') for t' < t on one pair x != y. A walk of length 1 from
    h(x, y, t) steps back from y to x along an edge before t, which is exactly such a fact
    read backwards; pairs x == y (a constrained rule) are left to the walks."""
    frame = pd.DataFrame({"s": g.s, "r": g.r, "o": g.o, "t": g.t})
    frame = frame[frame["s"] != frame["o"]]
    spans = frame.groupby(["s", "o", "r"], sort=False)["t"].agg(["min", "max"]).reset_index()
    heads_only = spans[spans["r"].isin(heads)][["s", "o", "r", "max"]]
    pairs = heads_only.merge(spans[["s", "o", "r", "min"]], on=["s", "o"], suffixes=("", "_b"))
    found = pairs.loc[pairs["min"] < pairs["max"], ["r", "r_b"]].drop_duplicates()
    head = found["r"].to_numpy(np.int64)
    body = found["r_b"].to_numpy(np.int64).reshape(-1, 1)
    pat = np.full(len(head), _identity_code(2), dtype=np.int64)
    return head, body, pat


def walk_rules(g: TemporalGraph, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TLogic's `create_rule` for successful walks: (head rel, body rels (W, l), pattern code).

    Body atom i is the walk's edge l - i, inverted, so it runs from Xi to Xi+1 forward in time;
    X_i is the object of walk edge l - i (X0 = the walk's start, Xl = the head's object).
    """
    length = edges.shape[1] - 1
    head = g.r[edges[:, 0]]
    rev = edges[:, :0:-1]  # walk edges l, l-1, ..., 1
    body = g.inverse_relation(g.r[rev])
    ents = g.o[edges[:, ::-1]]  # X0 = o(edge l) = start, ..., Xl = o(edge 0)
    return head, body.reshape(len(edges), length), _pattern_codes(ents)


# ---------------------------------------------------------------------------------------------
# bodies and supports


def _sample_bodies(
    g: TemporalGraph, bodies: np.ndarray, u: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TLogic's `sample_body` for each row of `u` (samples, length): row i samples body
    `bodies[i]`. Returns the successful rows' indices, entities (k, l + 1) and time ranks (k, l).
    """
    length = bodies.shape[1]
    rel = bodies[:, 0]
    lo, cnt = g.c_rel_start[rel], np.diff(g.c_rel_start)[rel]
    e = g.c_perm[lo + np.minimum((u[:, 0] * cnt).astype(np.int64), cnt - 1)]
    rows = np.arange(len(bodies))
    ents, trs = [g.s[e], g.o[e]], [g.tr[e]]
    for k in range(1, length):
        b, cur, cur_tr = bodies[rows, k], ents[-1], trs[-1]
        block = (b * g.n_entities + cur) * g.n_times
        lo = np.searchsorted(g.c_key, block + cur_tr, side="left")
        hi = np.searchsorted(g.c_key, block + g.n_times, side="left")
        ok = hi > lo
        rows, lo, hi = rows[ok], lo[ok], hi[ok]
        ents, trs = [a[ok] for a in ents], [a[ok] for a in trs]
        n_c = hi - lo
        e = g.c_perm[lo + np.minimum((u[rows, k] * n_c).astype(np.int64), n_c - 1)]
        ents.append(g.o[e])
        trs.append(g.tr[e])
    return rows, np.stack(ents, axis=1), np.stack(trs, axis=1)


def _enumerate_bodies(
    g: TemporalGraph, bodies: np.ndarray, limit: int = CHUNK_ROWS
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every grounding of each body (rows of `bodies`), in chunks of at most ~`limit` rows:
    (body row, entities (k, l + 1), time ranks (k, l)). Edges are distinct facts, so groundings
    (entity tuple, time tuple) come out distinct without deduplication."""
    length = bodies.shape[1]

    def extend(
        step: int, grp: np.ndarray, ents: list[np.ndarray], trs: list[np.ndarray]
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        if step == length:
            yield grp, np.stack(ents, axis=1), np.stack(trs, axis=1)
            return
        b = bodies[grp, step]
        block = (b * g.n_entities + ents[-1]) * g.n_times
        lo = np.searchsorted(g.c_key, block + trs[-1], side="left")
        hi = np.searchsorted(g.c_key, block + g.n_times, side="left")
        for part in split_by_weight(hi - lo, limit):
            pos, owner = ragged_ranges(lo[part], hi[part])
            e = g.c_perm[pos]
            sub = [a[part][owner] for a in ents]
            yield from extend(
                step + 1,
                grp[part][owner],
                [*sub, g.o[e]],
                [*(a[part][owner] for a in trs), g.tr[e]],
            )

    rel = bodies[:, 0]
    lo, hi = g.c_rel_start[rel], g.c_rel_start[rel + 1]
    for part in split_by_weight(hi - lo, limit):
        pos, owner = ragged_ranges(lo[part], hi[part])
        e = g.c_perm[pos]
        grp = np.arange(len(bodies))[part][owner]
        yield from extend(1, grp, [g.s[e], g.o[e]], [g.tr[e]])


def _supports(
    g: TemporalGraph,
    n_groups: int,
    body_grp: np.ndarray,
    ents: np.ndarray,
    trs: np.ndarray,
    rule_grp: np.ndarray,
    rule_head: np.ndarray,
    rule_pat: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Body and rule support of each rule from distinct body groundings of its group (body).

    A rule with constraints counts only groundings with exactly its equality pattern; a
    constraint-free rule counts all (TLogic checks constraints only when a rule has some).
    Rule support: groundings with a head fact (X0, head, Xl) later than the last body time.
    """
    cols = ents.shape[1]
    n_pat = cols**cols
    identity = rule_pat == _identity_code(cols)
    pat = _pattern_codes(ents)
    per_group = np.bincount(body_grp, minlength=n_groups)
    body_supp = np.where(
        identity,
        per_group[rule_grp],
        _count_lookup(body_grp * n_pat + pat, rule_grp * n_pat + rule_pat),
    )
    pair = ents[:, 0] * g.n_entities + ents[:, -1]
    lo = np.searchsorted(g.pr_key, pair * g.n_times + trs[:, -1], side="right")
    hi = np.searchsorted(g.pr_key, (pair + 1) * g.n_times, side="left")
    rel_count = 2 * g.n_relations
    rule_gh = rule_grp * rel_count + rule_head
    rule_supp = np.zeros(len(rule_grp), dtype=np.int64)
    for part in split_by_weight(hi - lo, CHUNK_ROWS):
        pos, owner = ragged_ranges(lo[part], hi[part])
        hit_gh = body_grp[part][owner] * rel_count + g.pr_rel[pos]
        rule_supp += np.where(
            identity,
            _count_lookup(hit_gh, rule_gh),
            _count_lookup(hit_gh * n_pat + pat[part][owner], rule_gh * n_pat + rule_pat),
        )
    return body_supp, rule_supp


def _body_uniforms(seed: int, bodies: np.ndarray, num_samples: int, n_relations: int) -> np.ndarray:
    """(groups * num_samples, length) uniforms, one generator per body so order is irrelevant."""
    length = bodies.shape[1]
    out = np.empty((len(bodies), num_samples, length))
    for i, body in enumerate(bodies.tolist()):
        rng = np.random.default_rng([seed, _SEED_BODY, *_stable_ids(body, n_relations)])
        out[i] = rng.random((num_samples, length))
    return out.reshape(-1, length)


def _confidences(
    g: TemporalGraph,
    groups: np.ndarray,
    rule_grp: np.ndarray,
    rule_head: np.ndarray,
    rule_pat: np.ndarray,
    *,
    exact: bool,
    num_samples: int,
    seed: int,
    bar: tqdm,
) -> tuple[np.ndarray, np.ndarray]:
    """Body and rule support for every rule (rules of one length, grouped by body)."""
    body_supp = np.zeros(len(rule_grp), dtype=np.int64)
    rule_supp = np.zeros(len(rule_grp), dtype=np.int64)
    order = np.argsort(rule_grp, kind="stable")
    bounds = np.searchsorted(rule_grp[order], np.arange(len(groups) + 1))
    length = groups.shape[1]
    # sampled: about CHUNK_ROWS samples per chunk; exact: enumeration splits itself by size,
    # so chunks only set how often the progress bar moves
    per_chunk = 64 if exact else max(1, CHUNK_ROWS // max(1, num_samples * length))
    for start in range(0, len(groups), per_chunk):
        stop = min(start + per_chunk, len(groups))
        chunk = groups[start:stop]
        sel = order[bounds[start] : bounds[stop]]
        if exact:
            sources = _enumerate_bodies(g, chunk)
        else:
            u = _body_uniforms(seed, chunk, num_samples, g.n_relations)
            rows, ents, trs = _sample_bodies(g, np.repeat(chunk, num_samples, axis=0), u)
            grp = rows // num_samples
            keep = _unique_rows(np.column_stack([grp, ents, trs]))
            sources = iter([(grp[keep], ents[keep], trs[keep])])
        for grp, ents, trs in sources:
            b, r = _supports(
                g,
                len(chunk),
                grp,
                ents,
                trs,
                rule_grp[sel] - start,
                rule_head[sel],
                rule_pat[sel],
            )
            body_supp[sel] += b
            rule_supp[sel] += r
        bar.update(stop - start)
    return body_supp, rule_supp


# ---------------------------------------------------------------------------------------------
# the miner


def _stable_ids(rels: np.ndarray | list[int], n_relations: int) -> list[int]:
    """Relation ids for seeding that do not depend on n_relations: 2 r (+1 if inverse)."""
    return [2 * (int(r) % n_relations) + int(r >= n_relations) for r in rels]


def walk_uniforms(seed: int, rel: int, length: int, walks: int, n_relations: int) -> np.ndarray:
    """The (walks, length + 1) uniforms that drive relation `rel`'s walks of one length."""
    key = [seed, _SEED_WALK, length, *_stable_ids([rel], n_relations)]
    return np.random.default_rng(key).random((walks, length + 1))


_DEFAULT = TemporalMinerSettings()


def mine_temporal(
    facts: pd.DataFrame,
    n_entities: int,
    n_relations: int,
    settings: TemporalMinerSettings = _DEFAULT,
    *,
    seed: int = SEED,
    inverse_heads: bool = True,
    progress: bool = True,
) -> list[Rule]:
    """Learn TLogic rules from temporal train facts (head, relation, tail, time as integers),
    with params.yaml `mine_rules.temporal`'s knobs (`settings`).

    `lengths`: body lengths to learn; `walks_per_relation`: walks per (relation, length), for
    every relation with facts and, with `inverse_heads` (TLogic's behaviour), every inverse
    relation too; `transition`: "exp" or "unif"; `num_samples`: bodies sampled per rule for
    its confidence; `exact`: count all groundings instead (enumerates them: ICEWS14 lengths
    1-2 take ~20 s, length 3 does not finish in 10 minutes because hub entities multiply the
    paths; meant for small KGs, short rules and checks). Rules are kept when rule support >=
    `min_rule_support` (1 = TLogic's conf > 0), body support >= `min_body_support` and
    confidence >= `min_confidence`. `facts` are used whole (pass the train split only).

    With `constants.kinds`, rules with constants of those kinds are added, counted exactly
    (`temporal_constants`); the other rules do not change.

    Returns temporal `Rule`s with support = rule support, body_support, confidence, sorted by
    head relation, confidence (descending) and structure; an empty list is a valid result.
    """
    s = settings
    if s.transition not in ("exp", "unif"):
        raise ValueError(f"transition must be 'exp' or 'unif', not {s.transition!r}")
    if s.length1 not in ("walks", "exact"):
        raise ValueError(f"length1 must be 'walks' or 'exact', not {s.length1!r}")
    if any(int(k) < 1 for k in s.lengths):
        raise ValueError(f"rule lengths must be >= 1, got {list(s.lengths)}")
    if s.num_samples < 1 and not s.exact:
        raise ValueError("num_samples must be >= 1")
    g = build_temporal_graph(facts, n_entities, n_relations)
    counts = g.relation_edge_counts()
    heads = np.flatnonzero(counts[: 2 * n_relations if inverse_heads else n_relations] > 0)
    rules: dict[tuple, Rule] = {}
    for length in sorted({int(k) for k in s.lengths}):
        if len(heads) == 0 or s.walks_per_relation < 1:
            break
        u = np.concatenate(
            [
                walk_uniforms(seed, int(rel), length, s.walks_per_relation, n_relations)
                for rel in heads
            ]
        )
        ok, edges = sample_walks(g, np.repeat(heads, s.walks_per_relation), length, u, s.transition)
        head, body, pat = walk_rules(g, edges[ok])
        counted_exactly = s.exact or (length == 1 and s.length1 == "exact")
        if length == 1 and s.length1 == "exact":
            extra_head, extra_body, extra_pat = enumerate_length1(g, heads)
            head = np.concatenate([head, extra_head])
            body = np.concatenate([body, extra_body])
            pat = np.concatenate([pat, extra_pat])
        uniq = _unique_rows(np.column_stack([head, body, pat]))
        head, body, pat = head[uniq], body[uniq], pat[uniq]
        groups, rule_grp = np.unique(body, axis=0, return_inverse=True)
        rule_grp = rule_grp.reshape(-1)
        with tqdm(
            total=len(groups), desc=f"TLogic rules, length {length}", disable=not progress
        ) as bar:
            body_supp, rule_supp = _confidences(
                g, groups, rule_grp, head, pat,
                exact=counted_exactly, num_samples=s.num_samples, seed=seed, bar=bar,
            )  # fmt: skip
        conf = np.where(body_supp > 0, rule_supp / np.maximum(body_supp, 1), 0.0)
        if not counted_exactly:
            conf = np.round(conf, 6)
        keep = (
            (rule_supp >= s.min_rule_support)
            & (body_supp >= s.min_body_support)
            & (conf >= s.min_confidence)
        )
        cache: dict[int, list[list[int]]] = {}
        for i in np.flatnonzero(keep):
            code = int(pat[i])
            if code not in cache:
                cache[code] = _constraints_of(code, length + 1)
            rule = rule_from_tlogic(
                int(head[i]),
                body[i].tolist(),
                cache[code],
                n_relations,
                conf=float(conf[i]),
                rule_supp=int(rule_supp[i]),
                body_supp=int(body_supp[i]),
            )
            previous = rules.get(rule.key)
            if previous is None or (
                head[i] < n_relations and previous.extra.get("inverse_head", False)
            ):
                rules[rule.key] = _mark(rule, bool(head[i] >= n_relations))
    found = mine_temporal_constant_rules(
        facts, n_entities, n_relations, s.constants, inverse_heads=inverse_heads
    )
    return sort_temporal_rules([*rules.values(), *found])


def _mark(rule: Rule, inverse_head: bool) -> Rule:
    """Remember (outside the rule's identity) whether TLogic learnt it for an inverse head."""
    if not inverse_head:
        return rule
    return dataclasses.replace(rule, extra={"inverse_head": True})
