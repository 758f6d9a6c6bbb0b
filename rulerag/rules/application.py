"""Temporal rule application with TLogic's semantics: queries in, ranked explained candidates out.

TLogic (Liu et al., AAAI 2022; reference code `liu-yushan/TLogic`, `mycode/apply.py`,
`rule_application.py`, `score_functions.py`) answers a query (s, r, ?, t) with the rules whose
head is r, in order of confidence:

* History (`window`): with the paper's `-w 0`, every fact of every split (each with its inverse
  (o, r⁻¹, s, t)) with time strictly before t; `window > 0` keeps t - window <= time < t.
* Groundings [`match_body_relations`, `get_walks`]: body atom 1 leaves s, each next atom
  leaves the previous one's object, times non-decreasing along the body (ties allowed), all
  before t; the rule's variable constraints (positions bound to one entity) must hold; the
  last object is a candidate.
* Score [`score_12`, λ = 0.1, a = 0.5]: a · confidence + (1 - a) · exp(λ · (t_0 - t)), with
  t_0 the time of the first body fact of the latest such grounding (the largest t_0 among the
  groundings reaching the candidate), as float32.
* Aggregation: each candidate collects one score per rule that reaches it; its final score is
  their noisy-or 1 - Π(1 - s_i), in float32 as TLogic's code computes it, which rounds to
  1.0 once Π falls below 2^-24 and ties what many rules reach (`noisy_or="exact"` ranks by
  -Σ log(1 - s_i) in float64 instead: the same order without the rounding). Application
  stops for a query once its best `top_k` (20) candidates, ordered by their score lists,
  have pairwise different score lists.
* Only rules with confidence >= 0.01 and body support >= 2 [`filter_rules`], of the lengths
  asked.

A static KG (AMIE's rules, `temporal=False`) has no time order or recency: a candidate's score
from one rule is the rule's PCA confidence. Every rule is mirrored for subject queries (a path
read backwards holds as well as forwards without time), and AMIE's other closed shape, two
body atoms on the head's own pair (`r1(x, y) & r2(x, y) => r(x, y)`), is applied as the
intersection of its atoms' edges. Candidates aggregate by noisy-or, or by AnyBURL's default
`maxplus` (`aggregation="max"`; Meilicke et al., "Anytime Bottom-Up Rule Learning for
Knowledge Graph Completion", IJCAI 2019): ordered by their best rule's confidence, ties broken
by the next best, and so on, i.e. by the descending score lists TLogic's stop compares; or by
SAFRAN's non-redundant noisy-or (`aggregation="nrnoisy_or"`; Ott et al., AKBC 2021): the rules
of a head relation fall into clusters of rules whose predictions overlap (`rule_clusters`), a
candidate takes the maximum of its scores inside each cluster and the noisy-or across clusters,
so that redundant rules count once (static KGs only: see `rulerag.rules.rule_clusters`).

AnyBURL's rules with constants (`anyburl_miner`; temporal ones from `temporal_constants`, scored
as the next paragraph says) answer a query (e, r, ?) with their head constant c, scored by their
confidence: r(X, c) <= s(X, d) when s(e, d) holds, r(X, c) <=
s(X, A) when e has an s-fact with another entity, r(X, c) <= (no body) always, each only for
e != c (and e != d), as AnyBURL's `RuleAcyclic.computeTailResults` fires them. A rule with the
constant as the head's subject, r(c, X) <= ..., answers the subject query (e, r⁻¹, ?) the same
way; such rules are never mirrored. A static one with a body is also read backwards
(`AppliedRule.reversed`), as AnyBURL's `computeHeadResults` and SAFRAN's application read it:
r(X, c) <= s(X, d) answers r(?, c), the query (c, r⁻¹, ?), with every X != c, d such that
s(X, d) holds, r(X, c) <= s(X, A) with every X != c that has an s-fact to another entity; a
rule whose set has `discrimination_bound` members or more (AnyBURL's and SAFRAN's
DISCRIMINATION_BOUND, 1000 there) gives none. The same bound drops a closed static rule for a
query it reaches as many candidates for. They are applied in bulk after a relation's closed rules,
to every query of the relation (no stop: millions of them, and their equal confidences, e.g.
2 / (2 + 5) for every rule seen twice, tie score lists TLogic's stop waits to see differ):
rules sharing a body fire for the same queries, so each body is matched once, the ac1 rules
looked up by (body relation, d) from each query entity's own edges, and each candidate's
firings merge into its score list. `lengths` limits the rules with a body: zero-body rules
always apply (min_confidence still filters them; AnyBURL's weights put them at 0.01 times their
confidence, so apply them with a lower min_confidence).

Temporal rules with constants (`temporal_constants`) fire the same way, but only from body facts
strictly before the query time (and from t - window on), each scored with TLogic's score_12 of
the latest such fact; a zero-body rule, with no body fact, scores a · confidence. They are not
mirrored either (their subject-side variants are rules of their own).

Our rules store an inverse-head rule renamed to a forward head (`tlogic_io`); they are turned
back into TLogic's ids here (`rule_to_tlogic`), and every one-atom rule is mirrored under the
inverse head as TLogic learns it, so subject queries (o, r⁻¹, ?, t) find their rules.

The joins are vectorised over all queries of a head relation at once (pandas merges over
per-relation edge tables); the stopping test runs only for queries a rule touched.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import Literal, get_args

import numpy as np
import pandas as pd

from rulerag.rules.ranges import ragged_ranges, sorted_lookup, split_by_weight
from rulerag.rules.rule import Rule
from rulerag.rules.tlogic_io import rule_to_tlogic

__all__ = [
    "AGGREGATIONS",
    "BASELINES",
    "NOISY_OR_MODES",
    "Baseline",
    "NoisyOr",
    "NRNOISY_TEMPORAL",
    "AppliedRule",
    "ApplySettings",
    "Candidates",
    "ClusterLabels",
    "TieRank",
    "apply_rule_list",
    "apply_rules",
    "applied_rules",
    "check_discrimination_bound",
    "check_noisy_or",
    "edges_with_inverses",
    "filtered_rank",
    "filtered_rank_span",
    "noisy_or",
    "noisy_or_exact",
    "nrnoisy_or",
    "time_aware_filter",
]


#: how a candidate's per-rule scores combine into its rank
Aggregation = Literal["noisy_or", "max", "nrnoisy_or"]
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)

#: where an answer tied with other candidates ranks among them
TieRank = Literal["last", "first"]

#: how noisy-or is computed: float32 (TLogic's reference code: 1 - Π(1 - s) in float32 rounds
#: to 1.0 once Π falls below 2^-24, tying every candidate that many rules reach) or exact
#: (ranked by -Σ log(1 - s) in float64, the same order without the rounding)
NoisyOr = Literal["float32", "exact"]
NOISY_OR_MODES: tuple[str, ...] = get_args(NoisyOr)

#: where link forecasting's evaluation uses TLogic's baseline, the share of the query
#: relation's training facts with each object: for queries no rule answers (TLogic), or
#: also below the rules (ties among the rules' candidates broken by it, every entity the rules
#: do not reach ranked after theirs by it)
Baseline = Literal["unanswered", "below_rules"]
BASELINES: tuple[str, ...] = get_args(Baseline)

#: Per head relation (TLogic id) the cluster of each of its rules, in `applied_rules` order, or
#: None where SAFRAN's search chose its max approach (maxplus) for that head
ClusterLabels = Mapping[int, Sequence[int] | None]

#: Why nrnoisy_or is refused for temporal rules (ApplySettings and the params check say it)
NRNOISY_TEMPORAL = (
    "aggregation nrnoisy_or (SAFRAN) is defined for static rules only: it clusters rules by "
    "the Jaccard overlap of the triples they infer on the training graph, and a temporal "
    "rule's predictions and scores depend on the query time (TLogic's recency), so there is "
    "no time-free set of inferred triples to compare; use noisy_or or max"
)


def check_discrimination_bound(bound: int) -> None:
    """0 (no bound) or at least 2: with 1 every rule would predict nothing."""
    if bound < 0 or bound == 1:
        raise ValueError(
            "discrimination_bound must be 0 (no bound) or at least 2 (1 would drop every "
            f"prediction), not {bound}"
        )


def check_noisy_or(mode: str, aggregation: str) -> None:
    """noisy_or is float32 or exact, and exact only with aggregation noisy_or (with max or
    nrnoisy_or it would change nothing, which a user who set it did not mean)."""
    if mode not in NOISY_OR_MODES:
        raise ValueError(f"noisy_or must be one of {NOISY_OR_MODES}, not {mode!r}")
    if mode == "exact" and aggregation != "noisy_or":
        raise ValueError(
            f"noisy_or: exact computes aggregation noisy_or; with aggregation {aggregation} "
            "it would change nothing (leave noisy_or: float32)"
        )


@dataclass(frozen=True)
class ApplySettings:
    """TLogic's application knobs (`apply.py` defaults with the paper's ICEWS14 command)."""

    lengths: tuple[int, ...] = (1, 2, 3)
    window: int = 0  # 0: all history before t; n > 0: the last n time steps; TLogic's -w
    top_k: int = 20
    lmbda: float = 0.1
    a: float = 0.5
    min_confidence: float = 0.01
    min_body_support: float = 2.0
    #: False for a static KG: no time order or recency, a candidate's score from one rule is
    #: the rule's confidence (AMIE's PCA confidence)
    temporal: bool = True
    #: noisy_or (TLogic; AnyBURL's `noisyor`), max (AnyBURL's `maxplus`: the best rule's
    #: score, ties broken by the next best rules) or nrnoisy_or (SAFRAN's non-redundant
    #: noisy-or: max inside clusters of overlapping rules, noisy-or across; static only)
    aggregation: Aggregation = "noisy_or"
    #: nrnoisy_or: the Jaccard thresholds SAFRAN's grid search tries per head relation,
    #: i / cluster_resolution for i = 1..cluster_resolution (SAFRAN's RESOLUTION, 200)
    cluster_resolution: int = 200
    #: nrnoisy_or: the search scores a clustering by the validation MRR of the top this many
    #: candidates (SAFRAN's TOP_K_OUTPUT, 10)
    cluster_top_k: int = 10
    #: nrnoisy_or: the search's validation ranks put an answer tied with other candidates
    #: last among them (SAFRAN) or first (as `filtered_rank`, TLogic's rank, counts). Not a
    #: params.yaml knob: tuned with ties first, the search prefers clusterings that tie the
    #: answer with more candidates (FB15k-237: MRR 0.315 with ties first, 0.196 with ties
    #: last; docs/results.md), a gain of the rank's convention, not of the ranking
    cluster_ties: TieRank = "last"
    #: static rules only: a rule that predicts at least this many candidates for a query
    #: predicts none for it (AnyBURL's and SAFRAN's DISCRIMINATION_BOUND, 1000 in SAFRAN and in
    #: AnyBURL until 2021: so many candidates tell a top-k ranking nothing); 0: no bound.
    #: Temporal rules follow TLogic, which has none
    discrimination_bound: int = 0
    #: noisy_or in float32 as TLogic computes it, or exact (`NoisyOr`); aggregation noisy_or
    noisy_or: NoisyOr = "float32"
    #: where the evaluation (`forecasting.forecast`) ranks by TLogic's baseline (`Baseline`);
    #: RuleQA's explained candidates are the rules' own either way
    baseline: Baseline = "unanswered"

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, not {self.aggregation!r}")
        check_noisy_or(self.noisy_or, self.aggregation)
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {BASELINES}, not {self.baseline!r}")
        if self.aggregation == "nrnoisy_or" and self.temporal:
            raise ValueError(NRNOISY_TEMPORAL)
        if self.cluster_ties not in get_args(TieRank):
            raise ValueError(f"cluster_ties must be last or first, not {self.cluster_ties!r}")
        check_discrimination_bound(self.discrimination_bound)
        if self.cluster_resolution < 1 or self.cluster_top_k < 1:
            raise ValueError(
                "cluster_resolution and cluster_top_k must be at least 1, not "
                f"{self.cluster_resolution} and {self.cluster_top_k}"
            )


#: Rows one hop of a rule's groundings materialises at once (about 0.4 GB of path arrays); a
#: larger expansion runs in blocks. YAGO's facts repeat every year of their validity, so one
#: three-atom rule over 68 queries reaches 5.3e8 rows at its last hop.
MAX_EXPANSION_ROWS = 1 << 22
#: Queries whose constant-rule firings are gathered and merged at once: every candidate's score
#: list takes its firings in one merge, not one per body relation (ICEWS14's ac1 rules reach
#: thousands of firings a query)
CONSTANT_QUERY_CHUNK = 1024


@dataclass(frozen=True, slots=True)
class AppliedRule:
    """A rule in TLogic's ids: head and body relations (inverse r + n), constraints over the
    positions 0..len(body) of the path, confidence, and the rule it came from. A `pair` rule
    (static only) has every body relation from the query's entity to the candidate."""

    index: int  # position in the input rule list
    head: int
    body: tuple[int, ...]
    constraints: tuple[tuple[int, ...], ...]
    confidence: float
    pair: bool = False
    #: a static rule with constants: the head constant (the candidate it gives) and, for an
    #: ac1 rule, the body's constant (its one body relation leads from the query's entity to
    #: it); ac2 rules have a body relation and no body constant, zero-body rules no body
    constant: int | None = None
    body_constant: int | None = None
    #: a static rule with constants read backwards (`reversed`): it answers only the query
    #: whose entity is its head constant, with every X its body holds for
    reverse: bool = False

    def mirrored(self, n_relations: int) -> AppliedRule:
        """The rule for the inverse head: the body read backwards with each relation
        inverted, constraint positions reversed (for a one-atom rule TLogic learns the same
        rule under the inverse head; for static rules it holds without time order)."""

        def inv(rel: int) -> int:
            return (rel + n_relations) % (2 * n_relations)

        last = len(self.body)
        body = (
            tuple(inv(r) for r in self.body)
            if self.pair
            else tuple(inv(r) for r in reversed(self.body))
        )
        constraints = tuple(sorted(tuple(sorted(last - v for v in g)) for g in self.constraints))
        return AppliedRule(
            self.index, inv(self.head), body, constraints, self.confidence, self.pair
        )

    def reversed(self, n_relations: int) -> AppliedRule:
        """A static rule r(X, c) <= s(X, d | A) for the inverse head: the query (c, r⁻¹, ?),
        i.e. r(?, c), answered with every X the body holds for, as AnyBURL's
        `RuleAcyclic.computeHeadResults` (and SAFRAN's application) fires an X rule whose head
        constant is the query's entity (`r(c, X) <= ...` alike for r(c, ?))."""
        if self.constant is None or not self.body or self.reverse:
            raise ValueError("only a rule with constants and a body is read backwards")
        head = (self.head + n_relations) % (2 * n_relations)
        return replace(self, head=head, reverse=True)


def applied_rules(
    rules: Sequence[Rule], n_relations: int, settings: ApplySettings = ApplySettings()
) -> dict[int, list[AppliedRule]]:
    """Head relation (TLogic id) -> its rules in application order (confidence descending,
    stable), filtered as `filter_rules`; one-atom rules (every static rule) mirrored under the
    inverse head."""
    n = n_relations
    by_head: dict[int, list[AppliedRule]] = {}
    seen: set[tuple] = set()
    for index, rule in enumerate(rules):
        if rule.temporal != settings.temporal:
            continue
        if rule.length not in settings.lengths and (rule.length or not rule.constants):
            continue
        confidence = float(rule.confidence or 0.0) if settings.temporal else rule.score
        if confidence < settings.min_confidence:
            continue
        if settings.temporal and (rule.body_support or 0.0) < settings.min_body_support:
            continue
        applied = _as_applied(rule, index, confidence, n)
        if applied is None:
            continue
        copies = [applied]
        if (rule.length == 1 or not settings.temporal) and applied.constant is None:
            copies.append(applied.mirrored(n))
        elif not settings.temporal and applied.body:
            copies.append(applied.reversed(n))
        for copy in copies:
            key = (
                copy.head, copy.body, copy.constraints, copy.pair, copy.constant,
                copy.body_constant, copy.reverse,
            )  # fmt: skip
            if key in seen:
                continue
            seen.add(key)
            by_head.setdefault(copy.head, []).append(copy)
    for head in by_head:
        by_head[head].sort(key=lambda r: -r.confidence)  # stable: ties keep the input order
    return by_head


def _as_applied(rule: Rule, index: int, confidence: float, n: int) -> AppliedRule | None:
    """The rule in TLogic's ids: a path, or (static) two or more atoms on the head's pair, or
    (static) an AnyBURL rule with a head constant; None for another shape."""
    if rule.constants:
        return _constant_applied(rule, index, confidence, n)
    try:
        head, body, groups = rule_to_tlogic(rule, n)
    except ValueError:
        pair = (rule.head.subject, rule.head.object)
        on_pair = all({a.subject, a.object} == set(pair) for a in rule.body)
        if rule.temporal or rule.length < 2 or not on_pair or pair[0] == pair[1]:
            return None
        body = [a.relation if a.subject == pair[0] else a.relation + n for a in rule.body]
        return AppliedRule(index, rule.head.relation, tuple(body), (), confidence, pair=True)
    constraints = tuple(tuple(g) for g in groups)
    return AppliedRule(index, head, tuple(body), constraints, confidence)


def _constant_applied(rule: Rule, index: int, confidence: float, n: int) -> AppliedRule | None:
    """An AnyBURL rule r(X, c) <= [s(X, d) | s(X, A)] (head r) or r(c, X) <= ... (head r + n,
    the subject query's), read from X, static or temporal (`temporal_constants`: the same
    shapes with the body before the head); None for another shape."""
    bound = rule.constant_of
    head = rule.head
    if rule.length > 1 or (head.subject in bound) == (head.object in bound):
        return None
    if head.subject in bound:
        relation, x, constant = head.relation + n, head.object, bound[head.subject]
    else:
        relation, x, constant = head.relation, head.subject, bound[head.object]
    if not rule.body:
        return AppliedRule(index, relation, (), (), confidence, constant=constant)
    (atom,) = rule.body
    if x not in (atom.subject, atom.object) or atom.subject == atom.object:
        return None
    body, other = (
        (atom.relation, atom.object) if atom.subject == x else (atom.relation + n, atom.subject)
    )
    if other not in bound and other in (head.subject, head.object):
        return None
    return AppliedRule(
        index, relation, (body,), (), confidence, constant=constant, body_constant=bound.get(other)
    )


def edges_with_inverses(facts: pd.DataFrame, n_relations: int) -> pd.DataFrame:
    """Every fact as (sub, rel, obj, ts) plus its inverse (obj, rel + n, sub, ts); a static
    fact (no time) has ts 0."""
    forward = pd.DataFrame(
        {
            "sub": facts["head"].to_numpy(np.int64),
            "rel": facts["relation"].to_numpy(np.int64),
            "obj": facts["tail"].to_numpy(np.int64),
            "ts": pd.array(facts["time"], dtype="Int64").fillna(0).to_numpy(np.int64),
        }
    )
    inverse = forward.rename(columns={"sub": "obj", "obj": "sub"}).assign(
        rel=forward["rel"] + n_relations
    )
    return pd.concat([forward, inverse[forward.columns]], ignore_index=True).drop_duplicates()


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


@dataclass(frozen=True)
class _Adjacency:
    """One relation's edges sorted by (subject, time): `code` = sub * span + (ts - t_min), so
    the edges of an entity within a time range are one `searchsorted` away."""

    code: np.ndarray
    obj: np.ndarray
    ts: np.ndarray


@dataclass(frozen=True)
class EdgeIndex:
    """A KG's edges per relation, sorted by (subject, time) for `searchsorted` lookups: what
    rules are grounded on (`apply_rules`, and `rule_predictions` for SAFRAN's clustering)."""

    by_relation: dict[int, _Adjacency]
    t_min: int
    span: int
    n_entities: int  # above every entity id (codes key * n_entities + entity)
    _pairs: dict[int, np.ndarray] = field(default_factory=dict)
    _by_object: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def pairs(self, relation: int) -> np.ndarray:
        """The relation's (sub, obj) pairs as codes sub * n_entities + obj (cached)."""
        if relation not in self._pairs:
            adjacency = self.by_relation[relation]
            sub = adjacency.code // self.span
            self._pairs[relation] = np.unique(sub * self.n_entities + adjacency.obj)
        return self._pairs[relation]

    def by_object(self, relation: int) -> tuple[np.ndarray, np.ndarray]:
        """The relation's (objects, subjects), sorted by object (stable): who reaches a given
        entity, one `searchsorted` away (cached: every head relation's backward-read rules
        look their body relations up here)."""
        if relation not in self._by_object:
            adjacency = self.by_relation[relation]
            order = np.argsort(adjacency.obj, kind="stable")
            self._by_object[relation] = (adjacency.obj[order], adjacency.code[order] // self.span)
        return self._by_object[relation]

    @classmethod
    def build(cls, edges: pd.DataFrame) -> EdgeIndex:
        ts = edges["ts"].to_numpy(np.int64)
        t_min = int(ts.min()) if len(ts) else 0
        span = (int(ts.max()) - t_min + 1) if len(ts) else 1
        code = edges["sub"].to_numpy(np.int64) * span + (ts - t_min)
        rel = edges["rel"].to_numpy(np.int64)
        order = np.lexsort((code, rel))
        rel, code = rel[order], code[order]
        obj, ts = edges["obj"].to_numpy(np.int64)[order], ts[order]
        cuts = np.flatnonzero(np.diff(rel)) + 1
        by_relation = {}
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(rel)], strict=True):
            if hi > lo:
                by_relation[int(rel[lo])] = _Adjacency(code[lo:hi], obj[lo:hi], ts[lo:hi])
        top = max(int(edges["sub"].max()), int(edges["obj"].max())) + 1 if len(edges) else 1
        return cls(by_relation, t_min, span, top)

    def ranges(
        self, adjacency: _Adjacency, ents: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """[start, end) of each entity's edges with lo <= time < hi."""
        base = ents * self.span
        first = np.clip(lo - self.t_min, 0, self.span)
        stop = np.clip(hi - self.t_min, 0, self.span)
        start = np.searchsorted(adjacency.code, base + first, side="left")
        end = np.searchsorted(adjacency.code, base + stop, side="left")
        return start, np.maximum(end - start, 0)


def _latest_per_group(columns: Sequence[np.ndarray], t0: np.ndarray) -> np.ndarray:
    """Row indices keeping, of the rows equal in `columns`, the one with the largest t0."""
    order = np.lexsort((-t0, *columns[::-1]))
    keep = np.ones(len(order), dtype=bool)
    if len(order) > 1:
        same = np.ones(len(order) - 1, dtype=bool)
        for column in columns:
            ordered = column[order]
            same &= ordered[1:] == ordered[:-1]
        keep[1:] = ~same
    return order[keep]


@dataclass
class _Paths:
    """Groundings under construction: the query each belongs to and the path so far."""

    key: np.ndarray
    tq: np.ndarray
    ents: list[np.ndarray]  # e0 (the query subject), e1, ...
    times: list[np.ndarray]  # t0, t1, ...

    def take(self, rows: np.ndarray) -> _Paths:
        return _Paths(
            self.key[rows],
            self.tq[rows],
            [e[rows] for e in self.ents],
            [t[rows] for t in self.times],
        )

    @classmethod
    def concat(cls, parts: Sequence[_Paths]) -> _Paths:
        """The rows of `parts`, in order."""
        return cls(
            np.concatenate([p.key for p in parts]),
            np.concatenate([p.tq for p in parts]),
            [np.concatenate(column) for column in zip(*(p.ents for p in parts), strict=True)],
            [np.concatenate(column) for column in zip(*(p.times for p in parts), strict=True)],
        )


def _best_per_candidate(paths: _Paths, n_entities: int) -> _Paths:
    """Of the groundings reaching one candidate for one query, the one with the latest first
    body fact: the only one the score (recency of t_0) and the explanation use."""
    pair = paths.key * n_entities + paths.ents[-1]
    return paths.take(_latest_per_group([pair], paths.times[0]))


def _reduce_hop(
    found: _Paths, rule: AppliedRule, hop: int, constrained: Sequence[int], n_entities: int
) -> _Paths:
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
    return found.take(_latest_per_group(alike, found.times[0]))


def _groundings(
    rule: AppliedRule,
    key: np.ndarray,
    sub: np.ndarray,
    tq: np.ndarray,
    edges: EdgeIndex,
    window: int,
    temporal: bool = True,
) -> _Paths | None:
    """Every grounding of `rule` for the queries (key, sub, tq); None when there is none."""
    if rule.pair:
        return _pair_groundings(rule, key, sub, tq, edges)
    paths = _Paths(key, tq, [sub], [])
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
        pending: list[_Paths] = []
        for part in split_by_weight(counts, MAX_EXPANSION_ROWS):
            index, owner = ragged_ranges(start[part], start[part] + counts[part])
            block = paths.take(part.start + owner)
            block.ents.append(adjacency.obj[index])
            block.times.append(adjacency.ts[index])
            pending.append(reduce(block))
            if len(pending) > 1 and sum(len(p.key) for p in pending) > MAX_EXPANSION_ROWS:
                pending = [reduce(_Paths.concat(pending))]
        paths = pending[0] if len(pending) == 1 else reduce(_Paths.concat(pending))
    return paths if len(paths.key) else None


def _bounded(found: _Paths, bound: int) -> _Paths | None:
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
    found = _groundings(
        rule, subjects, subjects, np.zeros_like(subjects), graph, window=0, temporal=False
    )
    if found is None:
        return np.empty(0, np.int64)
    return np.unique(found.key * graph.n_entities + found.ents[-1])


def _pair_groundings(
    rule: AppliedRule, key: np.ndarray, sub: np.ndarray, tq: np.ndarray, edges: EdgeIndex
) -> _Paths | None:
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
    return _best_per_candidate(_Paths(key[rows], tq[rows], [sub[rows], y], [ts]), edges.n_entities)


@dataclass
class _ConstantRows:
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
    def concat(cls, parts: Sequence[_ConstantRows]) -> _ConstantRows:
        """The rows of `parts`, in order (no part: no row)."""
        names = [f.name for f in fields(cls)]
        if not parts:
            return cls(*(np.zeros(0, np.float32 if n == "score" else np.int64) for n in names))
        return cls(*(np.concatenate([getattr(p, n) for p in parts]) for n in names))


def _constant_firings(
    constant: Sequence[AppliedRule],
    key: np.ndarray,
    sub: np.ndarray,
    tq: np.ndarray,
    edges: EdgeIndex,
    settings: ApplySettings,
) -> Iterable[_ConstantRows]:
    """Every firing of the constant rules of one head relation for the queries (key, sub, tq),
    as AnyBURL fires them (module docstring), in blocks: the zero-body rules, then per body
    relation the ac2 and the ac1 rules. Rules sharing a body fire for the same queries, so
    each body is matched once: ac1 rules are looked up by (body relation, d) from the query
    entities' own edges. Temporal rules (`temporal_constants`) see the body facts before the
    query time (within `window`) only and score TLogic's score_12 of the latest such fact; a
    zero-body rule, with no body fact, a * confidence."""
    n = edges.n_entities
    temporal = settings.temporal
    const = np.array([r.constant for r in constant], np.int64)
    conf = np.array([r.confidence for r in constant], np.float64 if temporal else np.float32)
    body = np.array([r.body[0] if r.body else -1 for r in constant], np.int64)
    # a reversed rule (`_ReverseSets`) takes no part here: no body relation matches it
    body[np.array([r.reverse for r in constant], bool)] = -2
    d = np.array([_or_none(r.body_constant) for r in constant], np.int64)

    def block(
        q: np.ndarray, i: np.ndarray, middle: np.ndarray, ts: np.ndarray | None = None
    ) -> _ConstantRows:
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
        return _ConstantRows(key[q], sub[q], const[i], score, i, middle, ts)

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
class _ReverseSets:
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
        cls, rules: Sequence[AppliedRule], queried: np.ndarray, edges: EdgeIndex, bound: int
    ) -> _ReverseSets:
        """The rows of the reversed rules among `rules` (positions in that list) whose head
        constant is one of the `queried` entities. As AnyBURL fires them
        (`RuleAcyclic.computeValuesReversed`): r(X, c) <= s(X, d) gives every X with s(X, d),
        r(X, c) <= s(X, A) every X with an s-fact to another entity, each X != c (and != d);
        a rule with `bound` or more such X (bound > 0) gives none."""
        index = np.array([i for i, r in enumerate(rules) if r.reverse], np.int64)
        const = np.array([rules[i].constant for i in index], np.int64)
        asked = np.isin(const, queried)
        index, const = index[asked], const[asked]
        body = np.array([rules[i].body[0] for i in index], np.int64)
        d = np.array([_or_none(rules[i].body_constant) for i in index], np.int64)
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
        score = np.array([rules[i].confidence for i in index], np.float32)
        return cls(const[rows], index[rows], x, middle, score[rows])

    def firings(self, key: np.ndarray, sub: np.ndarray) -> _ConstantRows:
        """The rows fired by the queries (key, sub): those whose constant is the query's
        entity, each X a candidate explained by its own body fact (X, s, middle)."""
        lo = np.searchsorted(self.constant, sub, side="left")
        hi = np.searchsorted(self.constant, sub, side="right")
        pos, q = ragged_ranges(lo, hi)
        x = self.x[pos]
        return _ConstantRows(
            key[q], x, x, self.score[pos], self.rule[pos], self.middle[pos], np.zeros_like(x)
        )


def _or_none(value: int | None) -> int:
    """An optional entity id as an array value: -1 for none (no ac1 body constant)."""
    return -1 if value is None else value


def _latest_of(
    index: np.ndarray, q: np.ndarray, adjacency: _Adjacency
) -> tuple[np.ndarray, np.ndarray]:
    """Of the edges `index` of the queries `q`, the latest per (query, object)."""
    keep = _latest_per_group([q, adjacency.obj[index]], adjacency.ts[index])
    return index[keep], q[keep]


def _latest_other(
    adjacency: _Adjacency, sub: np.ndarray, start: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The queries whose entity has an edge in [start, start + counts) to another entity,
    with the latest such edge's object and time (ties: the first in the range)."""
    index, q = ragged_ranges(start, start + counts)
    other = adjacency.obj[index] != sub[q]
    index, q = index[other], q[other]
    keep = _latest_per_group([q], adjacency.ts[index])
    keep = keep[np.argsort(q[keep], kind="stable")]
    return q[keep], adjacency.obj[index[keep]], adjacency.ts[index[keep]]


def _merge_constant_rows(
    rows: _ConstantRows,
    constant: Sequence[AppliedRule],
    lists: dict[int, dict[int, list[float]]],
    out: dict[int, Candidates],
) -> None:
    """Add the firings to each candidate's descending score list; a firing that beats the
    candidate's best score so far becomes its rule and explanation (ties keep the earlier:
    the closed rule, else the first constant rule in the head's list)."""
    if not len(rows.key):
        return
    order = np.lexsort((rows.rule, -rows.score, rows.cand, rows.key))
    k, c = rows.key[order], rows.cand[order]
    cuts = np.flatnonzero((k[1:] != k[:-1]) | (c[1:] != c[:-1])) + 1
    starts = np.r_[0, cuts]
    ends = np.r_[cuts, len(order)].tolist()
    scores = rows.score[order].tolist()
    firsts = order[starts]
    best = zip(
        rows.rule[firsts].tolist(),
        rows.sub[firsts].tolist(),
        rows.middle[firsts].tolist(),
        rows.ts[firsts].tolist(),
        strict=True,
    )
    for a, b, kk, cc, (position, sub, middle, ts) in zip(
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
        rule = constant[position]
        out[kk].rules[cc] = rule.index
        out[kk].explanations[cc] = [] if middle < 0 else [(sub, rule.body[0], middle, ts)]


def _explanation(rule: AppliedRule, found: _Paths, row: int) -> list[tuple[int, int, int, int]]:
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


def _descending(score: float) -> float:
    return -score


def _done(scores: dict[int, list[float]], top_k: int) -> bool:
    """TLogic's stop: with each candidate's scores sorted descending, the best top_k
    candidates (by those lists, compared as Python compares lists, so a list ranks above its
    own prefix) have pairwise different lists. `scores` keeps every list sorted descending
    on insert."""
    if len(scores) < top_k:
        return False
    best = heapq.nlargest(top_k, scores.values())
    return len({tuple(x) for x in best}) >= top_k


def apply_rules(
    queries: pd.DataFrame,
    rules: dict[int, list[AppliedRule]],
    edges: pd.DataFrame,
    settings: ApplySettings = ApplySettings(),
    *,
    clusters: ClusterLabels | None = None,
    record: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]] | None = None,
    progress: bool = True,
) -> dict[int, Candidates]:
    """Candidates for each query (columns key, sub, rel (TLogic id), ts; one row per key).

    `clusters` (nrnoisy_or, required there): per head relation its rules' cluster labels
    (`rule_clusters.rule_clusters`). `record`, if given, receives for every rule applied its
    (head, position in the head's list, query keys, candidates, scores): what the clustering's
    threshold search re-aggregates (application order and stops do not depend on clusters).
    """
    from tqdm.auto import tqdm

    nrnoisy = settings.aggregation == "nrnoisy_or"
    if nrnoisy and clusters is None:
        raise ValueError(
            "aggregation nrnoisy_or needs the rules' clusters (rulerag.rules.rule_clusters)"
        )
    graph = EdgeIndex.build(edges)
    out: dict[int, Candidates] = {int(k): Candidates() for k in queries["key"]}
    # per query and candidate its scores, one per rule, descending: [0] is the best
    lists: dict[int, dict[int, list[float]]] = {int(k): {} for k in queries["key"]}
    # nrnoisy_or: per query of a clustered head and candidate, the best score of each cluster
    maxima: dict[int, dict[int, dict[int, float]]] = {}
    groups = list(queries.groupby("rel", sort=False))
    total = sum(len(rules.get(int(rel), [])) for rel, _ in groups)
    bar = tqdm(total=total, desc="apply rules", unit="rule", disable=not progress)
    for rel, group in groups:
        key = group["key"].to_numpy(np.int64)
        sub = group["sub"].to_numpy(np.int64)
        tq = group["ts"].to_numpy(np.int64)
        labels = clusters.get(int(rel)) if nrnoisy and clusters is not None else None
        if labels is not None:
            if len(labels) != len(rules.get(int(rel), [])):
                raise ValueError(
                    f"clusters for head relation {rel}: {len(labels)} labels for "
                    f"{len(rules.get(int(rel), []))} rules (computed for other rules?)"
                )
            maxima.update({int(k): {} for k in key})
        constant = [r for r in rules.get(int(rel), []) if r.constant is not None]
        if constant and nrnoisy:
            raise ValueError(
                "aggregation nrnoisy_or does not take rules with constants "
                "(mine_rules.static.constants.kinds): choose max or noisy_or for them"
            )
        every_key, every_sub, every_tq = key, sub, tq
        for position, rule in enumerate(rules.get(int(rel), [])):
            if rule.constant is not None:
                continue
            bar.update(1)
            if len(key) == 0:
                continue
            found = _groundings(rule, key, sub, tq, graph, settings.window, settings.temporal)
            if found is not None and settings.discrimination_bound and not settings.temporal:
                found = _bounded(found, settings.discrimination_bound)
            if found is None:
                continue
            if settings.temporal:
                recency = np.exp(settings.lmbda * (found.times[0] - found.tq))
                scores = settings.a * rule.confidence + (1 - settings.a) * recency
            else:
                scores = np.full(len(found.key), rule.confidence)
            if record is not None:
                record.append(
                    (int(rel), position, found.key, found.ents[-1], scores.astype(np.float32))
                )
            scores = scores.astype(np.float32).tolist()
            keys, cands = found.key.tolist(), found.ents[-1].tolist()
            for row, (k, cand, score) in enumerate(zip(keys, cands, scores, strict=True)):
                ranked = lists[k].setdefault(cand, [])
                better = not ranked or score > ranked[0]
                bisect.insort(ranked, score, key=_descending)
                if better:
                    out[k].rules[cand] = rule.index
                    out[k].explanations[cand] = _explanation(rule, found, row)
                if labels is not None:
                    best = maxima[k].setdefault(cand, {})
                    cluster = labels[position]
                    if score > best.get(cluster, -1.0):
                        best[cluster] = score
            finished = [k for k in set(keys) if _done(lists[k], settings.top_k)]
            if finished:
                active = ~np.isin(key, finished)
                key, sub, tq = key[active], sub[active], tq[active]
        # rules with constants: every firing at once, for every query of the relation (TLogic's
        # stop compares score lists that these rules' equal confidences often tie), in chunks
        # of queries whose firings merge into each candidate's list once
        reverse = (
            _ReverseSets.build(constant, every_sub, graph, settings.discrimination_bound)
            if constant and not settings.temporal
            else None
        )
        for part in range(0, len(every_key) if constant else 0, CONSTANT_QUERY_CHUNK):
            chunk = slice(part, part + CONSTANT_QUERY_CHUNK)
            firings = list(
                _constant_firings(
                    constant, every_key[chunk], every_sub[chunk], every_tq[chunk], graph, settings
                )
            )
            if reverse is not None:
                firings.append(reverse.firings(every_key[chunk], every_sub[chunk]))
            _merge_constant_rows(_ConstantRows.concat(firings), constant, lists, out)
        bar.update(len(constant))
    bar.close()
    for k, candidates in lists.items():
        if settings.aggregation == "max" or (nrnoisy and k not in maxima):
            # nrnoisy_or: a head whose search chose SAFRAN's max approach ranks by maxplus
            out[k].scores = {c: s[0] for c, s in candidates.items()}
            out[k].rank_keys = {c: tuple(s) for c, s in candidates.items()}
        elif nrnoisy or settings.noisy_or == "exact":
            # (score, rank key) per candidate: a key that keeps the order the score rounds off
            aggregated = (
                {c: nrnoisy_or(m.values()) for c, m in maxima[k].items()}
                if nrnoisy
                else {c: noisy_or_exact(s) for c, s in candidates.items()}
            )
            out[k].scores = {c: score for c, (score, _) in aggregated.items()}
            out[k].rank_keys = {c: rank_key for c, (_, rank_key) in aggregated.items()}
        else:
            out[k].scores = {c: noisy_or(s) for c, s in candidates.items()}
    return out


def apply_rule_list(
    queries: pd.DataFrame,
    rules: Sequence[Rule],
    history: pd.DataFrame,
    n_relations: int,
    settings: ApplySettings,
    *,
    clusters: ClusterLabels | None = None,
    progress: bool = True,
) -> dict[int, Candidates]:
    """`apply_rules` from mined rules and history facts (the KG's own frames); `clusters`
    (nrnoisy_or) as `rule_clusters.rule_clusters` computed them for the same rules."""
    return apply_rules(
        queries,
        applied_rules(rules, n_relations, settings),
        edges_with_inverses(history, n_relations),
        settings,
        clusters=clusters,
        progress=progress,
    )


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
