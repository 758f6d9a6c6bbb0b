"""AnyBURL's rules with constants, counted exactly over the whole KG with NumPy.

AnyBURL (Meilicke et al., "Anytime Bottom-Up Rule Learning for Knowledge Graph Completion",
IJCAI 2019; reference code `de.unima.ki.anyburl`) learns, beside closed path rules, rules whose
head has a constant. With one body atom at most (its default `MAX_LENGTH_ACYCLIC = 1`; its
cyclic rules with a constant have length <= 1 too, `MAX_LENGTH_GROUNDED_CYCLIC = 1`, and are
not learned here), for every head relation r, read with the constant as its object or subject:

    ac1    r(X, c) <= s(X, d)    or s(d, X);  and r(c, X) <= s(X, d) / s(d, X)
    ac2    r(X, c) <= s(X, A)    or s(A, X);  A a "dangling" variable that occurs once
    zero   r(X, c) <=            a rule without body: fires for every query of r

Counting, as AnyBURL's `RuleAcyclic.computeScores` and `RuleZero.computeScores` define it:

- body groundings ("predicted"): the distinct X the body holds for, under AnyBURL's object
  identity (different terms bind different entities): for ac1 X is neither c nor d (d may equal
  c); for ac2 X is not c and A is not X. For a zero rule AnyBURL counts the facts of r.
- support ("correctly predicted"): those X with r(X, c) (r(c, X)) in the KG; for a zero rule
  the distinct X with r(X, c).
- confidence: AnyBURL's applied confidence, support / (body groundings + pc), with pc =
  `UNSEEN_NEGATIVE_EXAMPLES` (5 in every AnyBURL release), the Laplace-style guess of negative
  examples not seen; multiplied by AnyBURL's down-weighting of the weaker kinds in
  application (`RULE_ZERO_WEIGHT` = 0.01, `RULE_AC2_WEIGHT` = 0.1 in its current release);
  `std_confidence` keeps the plain support / body groundings.
- kept: support >= `min_support` (AnyBURL's `THRESHOLD_CORRECT_PREDICTIONS` = 2) and
  confidence >= `min_confidence` (its `THRESHOLD_CONFIDENCE` = 0.0001).

A body atom never is the head's own fact: AnyBURL's bottom-up paths start from a head triple and
never walk it back, so r(X, c) <= r(X, c) does not exist, and an ac2 body never uses the head's
relation in the head's direction (r(X, c) <= r(X, A) would only say "X has some r").

Exact, not sampled: AnyBURL samples (at most `SAMPLE_SIZE` = 2000 body groundings per rule, its
rules found by random paths within a time budget) because it learns longer rules over large
KGs. With one body atom the exact counts are joins over the edge table: the candidate ac1 rules
of a head relation are its facts r(X, c) joined with X's edges (X, s, d), one row per (X, c, s,
d), grouped by (c, s, d); the body count of (s, d) is d's in-degree in s, less X = c when
s(c, d) holds. The join runs in chunks of whole constants (a constant's rows are never split,
so each chunk's counts are final). The rules come as arrays (`ConstantRuleColumns`), never a
`Rule` object each unless asked for: on FB15k-237 all of it, 6.9 million rules, mined and
written as the rules frame in about two minutes and 6 GB (3 to 6 minutes and 11 to 13 GB as
objects, docs/results.md "Memory walls removed"). So every rule AnyBURL could sample is found
with its exact statistics, and the result depends on no seed or time budget.

Off by default (`kinds: []`), chosen by the measurement (docs/results.md "AnyBURL's rules with
constants"): with every kind and AnyBURL's confidence for all rules, max aggregation, filtered
MRR goes from 0.2926 (the default) to 0.3264 on FB15k-237 and from 0.4345 to 0.4460 on
NELL-995 (read forwards only, and with the validation facts as evidence: 0.2719 -> 0.3245 and
0.4332 -> 0.4409 read both ways on the training facts, docs/results.md "The graph static
rules are applied to"), but the rules go from thousands to millions (6.9 million on
FB15k-237) and mining plus applying from about a minute to a quarter of an hour and 14 GB
there, a cost every pipeline run would pay for a figure still below AnyBURL's published 0.355
(ties as docs/results.md quantifies them).

On application (AnyBURL's `RuleAcyclic.computeTailResults`): a query (e, r, ?) fires
r(X, c) <= s(X, d) when s(e, d) holds and e is neither c nor d, r(X, c) <= s(X, A) when e has
an s-fact with some other entity and e is not c, and every zero rule of r, each with the
candidate c.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from rulerag.rules.constant_columns import ConstantRuleColumns
from rulerag.rules.ranges import sorted_lookup
from rulerag.rules.rule import Rule
from rulerag.rules.settings import ConstantRuleSettings

#: expansion rows (head fact x body edge) counted at once; bounds memory (~0.3 GB)
_CHUNK_ROWS = 8_000_000


@dataclass(frozen=True)
class _Graph:
    """Distinct directed edges (both directions of every fact): code = 2 * relation + inverse,
    code 2r walking r(src, dst), code 2r + 1 walking r(dst, src); sorted by (src, code, dst)."""

    n: int
    n_codes: int
    src: np.ndarray
    code: np.ndarray
    dst: np.ndarray
    edge_key: np.ndarray  # (src * n_codes + code) * n + dst, sorted
    indptr: np.ndarray  # edges of entity a: [indptr[a], indptr[a + 1])
    #: (src * n_codes + code) of every src with a code-edge to another entity, sorted, and
    #: how many such edges it has
    out_key: np.ndarray
    out_count: np.ndarray

    @classmethod
    def build(cls, head: np.ndarray, relation: np.ndarray, tail: np.ndarray, n: int, n_rel: int):
        n_codes = 2 * n_rel
        src = np.concatenate([head, tail]).astype(np.int64)
        dst = np.concatenate([tail, head]).astype(np.int64)
        code = np.concatenate([2 * relation, 2 * relation + 1]).astype(np.int64)
        key = np.unique((src * n_codes + code) * n + dst)
        sc, dst = np.divmod(key, n)
        src, code = np.divmod(sc, n_codes)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
        proper = src != dst
        out_key, out_count = np.unique(sc[proper], return_counts=True)
        return cls(n, n_codes, src, code, dst, key, indptr, out_key, out_count)

    def has_edge(self, src: np.ndarray, code: np.ndarray, dst: np.ndarray) -> np.ndarray:
        key = (src * self.n_codes + code) * self.n + dst
        pos = np.searchsorted(self.edge_key, key)
        pos = np.minimum(pos, len(self.edge_key) - 1)
        return self.edge_key[pos] == key if len(self.edge_key) else np.zeros(len(key), bool)

    def out_degree(self, src: np.ndarray, code: np.ndarray) -> np.ndarray:
        """How many entities other than itself `src` reaches by `code`."""
        key = src * self.n_codes + code
        if not len(self.out_key):
            return np.zeros(len(key), np.int64)
        pos, found = sorted_lookup(self.out_key, key)
        return np.where(found, self.out_count[pos], 0)

    def code_pairs(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) of every edge with code c."""
        mask = self.code == c
        return self.src[mask], self.dst[mask]


def chunks_by_constant(
    constant: np.ndarray, rows: np.ndarray, limit: int = _CHUNK_ROWS
) -> Iterator[np.ndarray]:
    """Index arrays over head pairs sorted by constant, each of whole constants and at most
    about `limit` expansion rows (a single larger constant is one chunk), so counts grouped
    by constant are final within a chunk (the temporal constant miner chunks the same way)."""
    order = np.argsort(constant, kind="stable")
    cum = np.cumsum(rows[order])
    starts = np.r_[0, np.flatnonzero(np.diff(constant[order])) + 1]  # first row of each constant
    begin = 0
    while begin < len(order):
        budget = (cum[begin - 1] if begin else 0) + limit
        end = int(np.searchsorted(cum, budget, side="right"))
        # cut at a constant's start at or before `end`, but take at least one constant
        cut = starts[np.searchsorted(starts, end, side="right") - 1] if end < len(order) else end
        if cut <= begin:
            nxt = np.searchsorted(starts, begin, side="right")
            cut = int(starts[nxt]) if nxt < len(starts) else len(order)
        yield order[begin:cut]
        begin = int(cut)


def mine_constant_columns(
    head: np.ndarray,
    relation: np.ndarray,
    tail: np.ndarray,
    n_entities: int,
    n_relations: int,
    settings: ConstantRuleSettings,
    heads: Sequence[int] | None = None,
) -> ConstantRuleColumns:
    """Every AC1, AC2 and zero-body rule of `settings.kinds` (see the module docstring) with
    its exact support, body groundings (`body_support`), `std_confidence` and AnyBURL's
    applied `confidence`; `heads` limits the head relations (default: all). As columns, no
    `Rule` object each (`.rules()` builds them)."""
    kinds = set(settings.kinds)
    pc = settings.unseen_negatives
    if not kinds:
        return ConstantRuleColumns.concat([])
    g = _Graph.build(head, relation, tail, n_entities, n_relations)
    weight = {"ac1": 1.0, "ac2": settings.ac2_weight, "zero": settings.zero_weight}
    rules: list[ConstantRuleColumns] = []

    def keep(kind: str, support: np.ndarray, body: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        confidence = weight[kind] * support / (body + pc)
        ok = (support >= settings.min_support) & (confidence >= settings.min_confidence)
        ok &= confidence > 0
        return ok, confidence

    for r in heads if heads is not None else range(n_relations):
        n_facts = int(np.count_nonzero(g.code == 2 * r))
        for inverse in (False, True):
            hc = 2 * r + int(inverse)  # X -hc-> c: r(X, c), or r(c, X) when inverse
            xs, cs = g.code_pairs(hc)
            proper = xs != cs
            xs, cs = xs[proper], cs[proper]
            if not len(xs):
                continue

            if "zero" in kinds:
                const, support = np.unique(cs, return_counts=True)
                body = np.full(len(const), n_facts)
                ok, conf = keep("zero", support, body)
                of = (const[ok], support[ok], body[ok], conf[ok])
                rules.append(ConstantRuleColumns.of(r, inverse, *of, pc))
            if "ac2" in kinds:
                rules.append(_ac2(g, r, inverse, hc, xs, cs, keep, pc))
            if "ac1" in kinds:
                rules.extend(
                    _ac1(
                        g,
                        r,
                        inverse,
                        hc,
                        xs,
                        cs,
                        keep,
                        pc,
                        settings.min_support,
                        settings.min_body_constant_groundings,
                    )
                )
    return ConstantRuleColumns.concat(rules)


def closed_rules_confidence(rules: Sequence[Rule], settings: ConstantRuleSettings) -> list[Rule]:
    """The closed rules with `confidence` set as `settings.closed_confidence` says (`anyburl`:
    support / (body_support + pc); `pca`: unchanged, their score stays the PCA confidence)."""
    if settings.closed_confidence == "pca":
        return list(rules)
    pc = settings.unseen_negatives
    out = []
    for rule in rules:
        if rule.support is not None and rule.body_support is not None:
            confidence = rule.support / (rule.body_support + pc) if rule.body_support + pc else 0.0
            rule = dataclasses.replace(rule, confidence=float(confidence))
        out.append(rule)
    return out


def _ac2(g: _Graph, r: int, inverse: bool, hc: int, xs, cs, keep, pc) -> ConstantRuleColumns:
    """r(X, c) <= s(X, A): for each head pair, the codes X has to another entity."""
    lo = np.searchsorted(g.out_key, xs * g.n_codes)
    hi = np.searchsorted(g.out_key, (xs + 1) * g.n_codes)
    counts = hi - lo
    owner = np.repeat(np.arange(len(xs)), counts)
    pos = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    pos += np.repeat(lo, counts)
    code = g.out_key[pos] % g.n_codes
    c = cs[owner]
    mask = code != hc  # not the head's own relation and direction
    key, support = np.unique(c[mask] * g.n_codes + code[mask], return_counts=True)
    const, code = np.divmod(key, g.n_codes)
    n_src = np.bincount(g.out_key % g.n_codes, minlength=g.n_codes)  # X with a code-edge
    body = n_src[code] - (g.out_degree(const, code) > 0)
    ok, conf = keep("ac2", support, body)
    return ConstantRuleColumns.of(
        r, inverse, const[ok], support[ok], body[ok], conf[ok], pc, code[ok]
    )


def _ac1(
    g: _Graph,
    r: int,
    inverse: bool,
    hc: int,
    xs: np.ndarray,
    cs: np.ndarray,
    keep,
    pc: int,
    min_support: int,
    min_groundings: int,
) -> list[ConstantRuleColumns]:
    """r(X, c) <= s(X, d): head pairs joined with X's edges, counted per constant chunk."""
    deg = np.diff(g.indptr)
    out = []
    for part in chunks_by_constant(cs, deg[xs]):
        x, c = xs[part], cs[part]
        counts = deg[x]
        owner = np.repeat(np.arange(len(x)), counts)
        pos = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        pos += np.repeat(g.indptr[x], counts)
        code, d = g.code[pos], g.dst[pos]
        cc = c[owner]
        mask = (d != x[owner]) & ~((code == hc) & (d == cc))  # X != d; not the head fact
        key, support = np.unique(
            (cc[mask] * g.n_codes + code[mask]) * g.n + d[mask], return_counts=True
        )
        frequent = support >= min_support  # most candidates: drop before any lookup
        key, support = key[frequent], support[frequent]
        cc_code, d = np.divmod(key, g.n)
        const, code = np.divmod(cc_code, g.n_codes)
        # X with s(X, d), X != d: d's proper out-degree in the inverse code; less X = c
        groundings = g.out_degree(d, code ^ 1)
        body = groundings - ((const != d) & g.has_edge(const, code, d))
        ok, conf = keep("ac1", support, body)
        ok &= groundings >= min_groundings
        out.append(
            ConstantRuleColumns.of(
                r, inverse, const[ok], support[ok], body[ok], conf[ok], pc, code[ok], d[ok]
            )
        )
    return out
