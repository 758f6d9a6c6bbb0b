"""SAFRAN's rule clusters for the non-redundant noisy-or (`aggregation: nrnoisy_or`).

Noisy-or counts every rule that reaches a candidate as independent evidence, so ten rules that
say the same thing (same body read ten ways, near-identical groundings) outvote one good rule.
SAFRAN (Ott, Meilicke, Samwald, "SAFRAN: An interpretable, rule-based link prediction method
outperforming embedding models", AKBC 2021; reference code OpenBioLink/SAFRAN, actions
`calcjacc`, `learnnrnoisy`, `applynrnoisy`) clusters the rules of each head relation by how
much their predictions overlap and aggregates a candidate's scores by their maximum inside a
cluster and by noisy-or across clusters (`application.nrnoisy_or`).

As SAFRAN defines it:

* Redundancy of two rules with one head relation: the Jaccard index of the sets of triples they
  infer on the training graph (SAFRAN's default `CLUSTER_SET = train`): every grounding of the
  body from every entity, triples the graph already holds included.
* The clusters for a threshold t: the connected components of the graph that links two rules
  whose Jaccard index is strictly above t.
* Per head relation and direction (SAFRAN learns a "Head" and a "Tail" clustering per
  relation; here the head relation r answers object queries and its inverse r + n, which holds
  the mirrored rules, answers subject queries) a grid search on the validation split: first
  SAFRAN's max approach (all rules in one cluster, ranked by maxplus), then t = i / resolution
  for i = 1..resolution (t = 1 links nothing: plain noisy-or). A clustering replaces the best so
  far only if its validation MRR is strictly higher, from 0, so a head where everything scores
  0 keeps the max approach.
* The validation MRR: the rules grounded on the training graph, each candidate but the answer
  removed if the triple is known in any split, the answer's reciprocal rank if it is within the
  top `cluster_top_k` (SAFRAN's TOP_K_OUTPUT, 10) with ties ranked last, else 0
  (`ApplySettings.cluster_ties="first"` ranks ties first instead, as this project's
  `filtered_rank` and TLogic's evaluation do; the search then favours clusterings that tie the
  answer with more candidates, a gain of the rank's convention only: docs/results.md).

Where it differs:

* The Jaccard index is exact (overlap counts of the inferred triples, a sparse product), not
  SAFRAN's MinHash estimate with 200 hash functions; so SAFRAN's rule that two rules with
  different head constants never link holds by itself (their predictions are disjoint).
* The grid only (SAFRAN's default strategy): one threshold for every pair of rule kinds (the
  grid sets SAFRAN's six per-kind thresholds equal too); no random search.
* The candidates are our application's (`application.apply_rules`): TLogic's per-query stop
  applies as it does for noisy_or (SAFRAN applies every rule, and drops a rule's predictions
  for a query past DISCRIMINATION_BOUND), and the query's own entity stays a candidate, as our
  ranking keeps it (SAFRAN drops it).
* A head relation without validation facts keeps the max approach (SAFRAN writes no clustering
  for it, and its application then predicts nothing for that relation).
* Equal validation MRRs go to the first clustering in grid order (SAFRAN runs the grid in
  parallel threads: to whichever finishes first), products in float64, not 50-digit floats.

Temporal rules are refused (`application.NRNOISY_TEMPORAL`): a TLogic rule's predictions and
scores depend on the query time, so there is no time-free set of inferred triples to compare.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from rulerag.rules.application import apply_rules
from rulerag.rules.applied_rule import AppliedRule, applied_rules
from rulerag.rules.edge_index import EdgeIndex, edges_with_inverses
from rulerag.rules.grounding import rule_predictions
from rulerag.rules.ranges import sorted_lookup
from rulerag.rules.rule import Rule
from rulerag.rules.settings import NRNOISY_TEMPORAL, ApplySettings, TieRank

__all__ = [
    "RuleClusters",
    "clusters_above",
    "jaccard_matrix",
    "rule_clusters",
    "rule_predictions",
]


@dataclass(frozen=True)
class RuleClusters:
    """What the search chose per head relation (TLogic id): the cluster of each rule (in
    `applied_rules` order) or None for the max approach, the threshold (None: max), and the
    validation MRR it scored; the seconds it took."""

    labels: dict[int, tuple[int, ...] | None]
    thresholds: dict[int, float | None]
    validation_mrr: dict[int, float]
    seconds: float

    def summary(self) -> dict[str, Any]:
        """How many heads took each kind of clustering (max; every rule alone, i.e. plain
        noisy-or; some rules together), how many rules their clusters merged, the seconds."""
        chosen = [labels for labels in self.labels.values() if labels is not None]
        alone = sum(len(set(labels)) == len(labels) for labels in chosen)
        return {
            "heads": len(self.labels),
            "max": len(self.labels) - len(chosen),
            "noisy_or": alone,
            "clustered": len(chosen) - alone,
            "rules_merged": sum(len(labels) - len(set(labels)) for labels in chosen),
            "seconds": round(self.seconds, 1),
        }


def jaccard_matrix(predictions: Sequence[np.ndarray]) -> np.ndarray:
    """|A ∩ B| / |A ∪ B| for every two of the prediction sets (sorted unique codes); 0 where
    both are empty."""
    n = len(predictions)
    sizes = np.array([len(p) for p in predictions], dtype=np.float64)
    if not n or not sizes.sum():
        return np.zeros((n, n))
    codes = np.concatenate(predictions)
    owners = np.repeat(np.arange(n), [len(p) for p in predictions])
    _, column = np.unique(codes, return_inverse=True)
    incidence = csr_matrix(
        (np.ones(len(codes), np.int64), (owners, column)), shape=(n, int(column.max()) + 1)
    )
    overlap = (incidence @ incidence.T).toarray().astype(np.float64)
    union = sizes[:, None] + sizes[None, :] - overlap
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, overlap / np.where(union > 0, union, 1.0), 0.0)


def clusters_above(jaccard: np.ndarray, threshold: float) -> np.ndarray:
    """Cluster label per rule: the connected components of the rules linked where their
    Jaccard index is strictly above `threshold` (labels in order of each cluster's first
    rule)."""
    _, labels = connected_components(csr_matrix(jaccard > threshold), directed=False)
    return labels.astype(np.int64)


def rule_clusters(
    rules: Sequence[Rule],
    facts: pd.DataFrame,
    n_relations: int,
    settings: ApplySettings,
    *,
    progress: bool = False,
) -> RuleClusters:
    """SAFRAN's clustering of `rules` (as `applied_rules(rules, n_relations, settings)` lists
    them) per head relation: Jaccard on the facts of split train, thresholds searched on the
    facts of split valid (module docstring)."""
    if settings.temporal:
        raise ValueError(NRNOISY_TEMPORAL)
    from tqdm.auto import tqdm

    started = time.perf_counter()
    by_head = applied_rules(rules, n_relations, settings)
    train = edges_with_inverses(facts[facts["split"] == "train"], n_relations)
    valid = edges_with_inverses(facts[facts["split"] == "valid"], n_relations)
    valid = valid.assign(key=valid.groupby(["sub", "rel"], sort=False).ngroup().to_numpy())
    known = edges_with_inverses(facts, n_relations)
    n_entities = 1 + max(
        int(known[["sub", "obj"]].to_numpy().max()) if len(known) else 0,
        int(valid[["sub", "obj"]].to_numpy().max()) if len(valid) else 0,
    )
    known_codes = np.unique(
        (known["rel"].to_numpy(np.int64) * n_entities + known["sub"].to_numpy(np.int64))
        * n_entities
        + known["obj"].to_numpy(np.int64)
    )
    record: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]] = []
    # the contributions do not depend on the aggregation: rules apply in the same order and
    # every query stops at the same rule whatever aggregates the scores
    apply_rules(
        valid.drop_duplicates("key")[["key", "sub", "rel", "ts"]],
        by_head,
        train,
        replace(settings, aggregation="noisy_or"),
        record=record,
        progress=progress,
    )
    contributions: dict[int, list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]] = {}
    for head, position, keys, cands, scores in record:
        contributions.setdefault(head, []).append((position, keys, cands, scores))
    graph = EdgeIndex.build(train)
    cache: dict[tuple[int, bool], tuple[int, np.ndarray]] = {}
    resolution = settings.cluster_resolution
    labels: dict[int, tuple[int, ...] | None] = {}
    thresholds: dict[int, float | None] = {}
    scored: dict[int, float] = {}
    valid_by_head = dict(tuple(valid.groupby("rel", sort=False)))
    # a relation and its inverse one after the other: the cache of prediction sets (shared by
    # a rule and its mirror) holds one relation's at a time
    ordered = sorted(by_head, key=lambda h: (h % n_relations, h))
    for head in tqdm(ordered, desc="cluster rules", disable=not progress):
        if cache and next(iter(cache.values()))[0] != head % n_relations:
            cache.clear()
        head_rules = by_head[head]
        labels[head], thresholds[head], scored[head] = None, None, 0.0
        if len(head_rules) < 2 or head not in valid_by_head or head not in contributions:
            continue  # one rule, nothing to validate on, or no candidate: the max approach
        check = _Validation(
            contributions[head],
            valid_by_head[head],
            known_codes,
            n_entities,
            settings.cluster_top_k,
            settings.cluster_ties,
        )
        best = max(check.maxplus_mrr(), 0.0)
        jaccard = jaccard_matrix(
            [_predictions(rule, graph, n_relations, cache) for rule in head_rules]
        )
        tried: dict[bytes, float] = {}
        links, found = -1, np.empty(0, np.int64)
        for i in range(1, resolution + 1):
            threshold = i / resolution
            if (jaccard > threshold).sum() != links:  # else the same links, the same clusters
                links, found = int((jaccard > threshold).sum()), clusters_above(jaccard, threshold)
            mrr = tried.get(found.tobytes())
            if mrr is None:
                mrr = tried[found.tobytes()] = check.nrnoisy_mrr(found)
            if mrr > best:
                best, thresholds[head], labels[head] = mrr, threshold, tuple(found.tolist())
        scored[head] = best
    return RuleClusters(labels, thresholds, scored, time.perf_counter() - started)


def _predictions(
    rule: AppliedRule,
    graph: EdgeIndex,
    n_relations: int,
    cache: dict[tuple[int, bool], tuple[int, np.ndarray]],
) -> np.ndarray:
    """`rule_predictions`, shared between a static rule and its mirror under the inverse head
    (the same triples, each pair read backwards); `cache` holds (relation, predictions)."""
    forward = rule.head < n_relations
    if (rule.index, forward) not in cache:
        mirror = cache.get((rule.index, not forward))
        if mirror is not None:
            n, codes = graph.n_entities, mirror[1]
            predictions = np.sort((codes % n) * n + codes // n)
        else:
            predictions = rule_predictions(rule, graph)
        cache[(rule.index, forward)] = (rule.head % n_relations, predictions)
    return cache[(rule.index, forward)][1]


class _Validation:
    """One head relation's validation queries with every rule's contributions (rule position,
    query key, candidate, score), scoring a clustering by SAFRAN's validation MRR."""

    def __init__(
        self,
        contributions: Sequence[tuple[int, np.ndarray, np.ndarray, np.ndarray]],
        queries: pd.DataFrame,
        known_codes: np.ndarray,
        n_entities: int,
        top_k: int,
        ties: TieRank = "last",
    ) -> None:
        self.top_k = top_k
        self.ties: TieRank = ties
        positions = np.concatenate([np.full(len(k), p, np.int64) for p, k, _, _ in contributions])
        keys = np.concatenate([k for _, k, _, _ in contributions]).astype(np.int64)
        cands = np.concatenate([c for _, _, c, _ in contributions]).astype(np.int64)
        self.scores = np.concatenate([s for _, _, _, s in contributions]).astype(np.float64)
        self.positions = positions
        pair_codes, self.pair_of_row = np.unique(keys * n_entities + cands, return_inverse=True)
        self.n_pairs = len(pair_codes)
        self.pair_key = pair_codes // n_entities
        head = int(queries["rel"].iloc[0])
        sub_of_key = dict(zip(queries["key"].tolist(), queries["sub"].tolist(), strict=False))
        pair_sub = np.array([sub_of_key[k] for k in self.pair_key.tolist()], dtype=np.int64)
        triple = (head * n_entities + pair_sub) * n_entities + pair_codes % n_entities
        self.competes = ~sorted_lookup(known_codes, triple)[1]
        self.fact_key = queries["key"].to_numpy(np.int64)
        wanted = self.fact_key * n_entities + queries["obj"].to_numpy(np.int64)
        self.fact_pair, self.fact_found = sorted_lookup(pair_codes, wanted)

    def mrr(self, value: np.ndarray) -> float:
        """SAFRAN's validation MRR with each candidate pair's `value` (lower ranks higher)."""
        if not self.n_pairs:
            return 0.0
        _, level = np.unique(value, return_inverse=True)
        span = int(level.max()) + 2
        rivals = np.sort(self.pair_key[self.competes] * span + level[self.competes])
        answer = self.fact_key * span + level[self.fact_pair]
        side: Literal["left", "right"] = "right" if self.ties == "last" else "left"
        ahead = np.searchsorted(rivals, answer, side=side) - np.searchsorted(
            rivals, self.fact_key * span, side="left"
        )
        rank = 1 + ahead
        hit = self.fact_found & (rank <= self.top_k)
        return float(np.where(hit, 1.0 / rank, 0.0).mean())

    def nrnoisy_mrr(self, labels: np.ndarray) -> float:
        """The MRR with the rules clustered by `labels`: per pair, the product Π(1 - m) over its
        cluster maxima m, multiplied from the largest m down as `application.nrnoisy_or`."""
        cluster = labels[self.positions]
        order = np.lexsort((-self.scores, cluster, self.pair_of_row))
        pair, group, score = self.pair_of_row[order], cluster[order], self.scores[order]
        first = np.ones(len(pair), dtype=bool)
        first[1:] = (pair[1:] != pair[:-1]) | (group[1:] != group[:-1])
        pair, score = pair[first], score[first]
        order = np.lexsort((-score, pair))
        pair, score = pair[order], score[order]
        starts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]])
        step = np.arange(len(pair)) - np.repeat(starts, np.diff(np.r_[starts, len(pair)]))
        product = np.ones(self.n_pairs)
        by_step = np.argsort(step, kind="stable")
        cuts = np.searchsorted(step[by_step], np.arange(int(step.max()) + 2))
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            rows = by_step[lo:hi]
            product[pair[rows]] *= 1.0 - score[rows]
        return self.mrr(product)

    def maxplus_mrr(self) -> float:
        """The MRR of SAFRAN's max approach: pairs ranked by their descending score lists."""
        order = np.lexsort((-self.scores, self.pair_of_row))
        pair, score = self.pair_of_row[order], self.scores[order]
        cuts = np.flatnonzero(pair[1:] != pair[:-1]) + 1
        lists = [tuple(chunk) for chunk in np.split(score, cuts)]
        rank = {t: i for i, t in enumerate(sorted(set(lists), reverse=True))}
        return self.mrr(np.array([rank[t] for t in lists], dtype=np.float64))
