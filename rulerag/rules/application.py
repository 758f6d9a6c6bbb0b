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

This module is the driver (`apply_rules`); its parts, by job: the knobs (`settings`), rules in
TLogic's ids (`applied_rule`), the edge index (`edge_index`), closed rules' groundings
(`grounding`), rules with constants (`constant_firings`), the candidates' aggregation
(`aggregation`) and link forecasting's filtered ranks (`ranking`); it re-exports their public
names.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rulerag.rules.aggregation import (
    Candidates,
    noisy_or,
    noisy_or_exact,
    nrnoisy_or,
    shared_floats,
)
from rulerag.rules.applied_rule import AppliedRule, RulesByHead, applied_rules
from rulerag.rules.constant_firings import (
    CONSTANT_QUERY_CHUNK,
    ConstantRows,
    ReverseSets,
    constant_firings,
    merge_constant_rows,
)
from rulerag.rules.edge_index import EdgeIndex, edges_with_inverses
from rulerag.rules.grounding import bounded, explanation, groundings
from rulerag.rules.ranking import filtered_rank, filtered_rank_span, time_aware_filter
from rulerag.rules.rule import Rule
from rulerag.rules.rule_table import ConstantRules
from rulerag.rules.settings import (
    AGGREGATIONS,
    BASELINES,
    NOISY_OR_MODES,
    NRNOISY_TEMPORAL,
    Aggregation,
    ApplySettings,
    Baseline,
    ClusterLabels,
    NoisyOr,
    TieRank,
    check_discrimination_bound,
    check_noisy_or,
)

__all__ = [
    "AGGREGATIONS",
    "Aggregation",
    "BASELINES",
    "NOISY_OR_MODES",
    "Baseline",
    "NoisyOr",
    "NRNOISY_TEMPORAL",
    "AppliedRule",
    "RulesByHead",
    "ApplySettings",
    "Candidates",
    "ClusterLabels",
    "TieRank",
    "apply_rule_list",
    "apply_rules",
    "applied_rules",
    "check_discrimination_bound",
    "check_noisy_or",
    "EdgeIndex",
    "edges_with_inverses",
    "filtered_rank",
    "filtered_rank_span",
    "noisy_or",
    "noisy_or_exact",
    "nrnoisy_or",
    "time_aware_filter",
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


@dataclass
class _Scores:
    """What application gathers, per query key: the candidates (best rule, explanation; their
    final scores at the end), each candidate's scores, one per rule, descending ([0] is the
    best), and (nrnoisy_or, queries of a clustered head) each candidate's best score per
    cluster."""

    out: dict[int, Candidates]
    lists: dict[int, dict[int, list[float]]]
    maxima: dict[int, dict[int, dict[int, float]]] = field(default_factory=dict)
    #: whether each candidate's best rule and its explanation are kept (`apply_rules`)
    explain: bool = True

    @classmethod
    def of(cls, keys: pd.Series, explain: bool = True) -> _Scores:
        return cls(
            {int(k): Candidates() for k in keys}, {int(k): {} for k in keys}, explain=explain
        )


def apply_rules(
    queries: pd.DataFrame,
    rules: dict[int, list[AppliedRule]],
    edges: pd.DataFrame,
    settings: ApplySettings = ApplySettings(),
    *,
    clusters: ClusterLabels | None = None,
    record: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]] | None = None,
    progress: bool = True,
    explain: bool = True,
) -> dict[int, Candidates]:
    """Candidates for each query (columns key, sub, rel (TLogic id), ts; one row per key);
    `rules` as `applied_rules` gives them (a plain dict of lists works too).

    `explain=False` leaves each candidate's rule and explanation out (ranks do not read them:
    link prediction's evaluation asks for none, and on FB15k-237 with rules with constants
    they were a GB of each chunk of queries); scores and rank keys are the same.

    `clusters` (nrnoisy_or, required there): per head relation its rules' cluster labels
    (`rule_clusters.rule_clusters`). `record`, if given, receives for every rule applied its
    (head, position in the head's list, query keys, candidates, scores): what the clustering's
    threshold search re-aggregates (application order and stops do not depend on clusters).
    """
    from tqdm.auto import tqdm

    settings.applicable()
    nrnoisy = settings.aggregation == "nrnoisy_or"
    if nrnoisy and clusters is None:
        raise ValueError(
            "aggregation nrnoisy_or needs the rules' clusters (rulerag.rules.rule_clusters)"
        )
    if not isinstance(rules, RulesByHead):
        rules = RulesByHead(rules)
    graph = EdgeIndex.build(edges)
    found = _Scores.of(queries["key"], explain)
    groups = list(queries.groupby("rel", sort=False))
    total = sum(rules.count(int(rel)) for rel, _ in groups)
    bar = tqdm(total=total, desc="apply rules", unit="rule", disable=not progress)
    for rel, group in groups:
        head = rules.get(int(rel), [])
        key = group["key"].to_numpy(np.int64)
        sub = group["sub"].to_numpy(np.int64)
        tq = group["ts"].to_numpy(np.int64)
        labels = clusters.get(int(rel)) if nrnoisy and clusters is not None else None
        if labels is not None:
            if len(labels) != len(head):
                raise ValueError(
                    f"clusters for head relation {rel}: {len(labels)} labels for "
                    f"{len(head)} rules (computed for other rules?)"
                )
            found.maxima.update({int(k): {} for k in key})
        constant = rules.constant_rules(int(rel))
        if len(constant) and nrnoisy:
            raise ValueError(
                "aggregation nrnoisy_or does not take rules with constants "
                "(mine_rules.static.constants.kinds): choose max or noisy_or for them"
            )
        _apply_closed_rules(
            int(rel), head, (key, sub, tq), graph, settings, labels, found, record, bar
        )
        _apply_constant_rules(constant, (key, sub, tq), graph, settings, found)
        bar.update(len(constant))
    bar.close()
    _aggregate(found, settings)
    return found.out


def _apply_closed_rules(
    rel: int,
    head: Sequence[AppliedRule],
    queries: tuple[np.ndarray, np.ndarray, np.ndarray],
    graph: EdgeIndex,
    settings: ApplySettings,
    labels: Sequence[int] | None,
    found: _Scores,
    record: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]] | None,
    bar: Any,
) -> None:
    """The closed rules of head relation `rel`, in order, for its queries (key, sub, tq),
    each query dropped once TLogic's stop says its top_k are settled."""
    key, sub, tq = queries
    lists, out, maxima, explain = found.lists, found.out, found.maxima, found.explain
    for position, rule in enumerate(head):
        if rule.constant is not None:
            continue
        bar.update(1)
        if len(key) == 0:
            continue
        paths = groundings(rule, key, sub, tq, graph, settings.window, settings.temporal)
        if paths is not None and settings.discrimination_bound and not settings.temporal:
            paths = bounded(paths, settings.discrimination_bound)
        if paths is None:
            continue
        if settings.temporal:
            recency = np.exp(settings.lmbda * (paths.times[0] - paths.tq))
            scores = settings.a * rule.confidence + (1 - settings.a) * recency
        else:
            scores = np.full(len(paths.key), rule.confidence)
        if record is not None:
            record.append((rel, position, paths.key, paths.ents[-1], scores.astype(np.float32)))
        scores = shared_floats(scores.astype(np.float32))
        keys, cands = paths.key.tolist(), paths.ents[-1].tolist()
        for row, (k, cand, score) in enumerate(zip(keys, cands, scores, strict=True)):
            ranked = lists[k].setdefault(cand, [])
            better = explain and (not ranked or score > ranked[0])
            bisect.insort(ranked, score, key=_descending)
            if better:
                out[k].rules[cand] = rule.index
                out[k].explanations[cand] = explanation(rule, paths, row)
            if labels is not None:
                best = maxima[k].setdefault(cand, {})
                cluster = labels[position]
                if score > best.get(cluster, -1.0):
                    best[cluster] = score
        finished = [k for k in set(keys) if _done(lists[k], settings.top_k)]
        if finished:
            active = ~np.isin(key, finished)
            key, sub, tq = key[active], sub[active], tq[active]


def _apply_constant_rules(
    constant: ConstantRules,
    queries: tuple[np.ndarray, np.ndarray, np.ndarray],
    graph: EdgeIndex,
    settings: ApplySettings,
    found: _Scores,
) -> None:
    """Rules with constants: every firing at once, for every query of the relation (TLogic's
    stop compares score lists that these rules' equal confidences often tie), in chunks of
    queries whose firings merge into each candidate's list once."""
    if not len(constant):
        return
    key, sub, tq = queries
    reverse = (
        ReverseSets.build(constant, sub, graph, settings.discrimination_bound)
        if not settings.temporal
        else None
    )
    for part in range(0, len(key), CONSTANT_QUERY_CHUNK):
        chunk = slice(part, part + CONSTANT_QUERY_CHUNK)
        firings = list(
            constant_firings(constant, key[chunk], sub[chunk], tq[chunk], graph, settings)
        )
        if reverse is not None:
            firings.append(reverse.firings(key[chunk], sub[chunk]))
        merge_constant_rows(
            ConstantRows.concat(firings),
            constant,
            found.lists,
            found.out if found.explain else None,
        )


def _aggregate(found: _Scores, settings: ApplySettings) -> None:
    """Each candidate's final score and rank key from its score list (`settings.aggregation`)."""
    nrnoisy = settings.aggregation == "nrnoisy_or"
    out, maxima = found.out, found.maxima
    while found.lists:  # each query's lists dropped once its keys are made: one copy at a time
        k, candidates = found.lists.popitem()
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
