"""Link forecasting with applied rules, evaluated as TLogic evaluates it (`mycode/evaluate.py`).

On a static KG the same is link prediction: the rules are applied to the training facts only
(`history_splits`, the splits they were learned from), as AnyBURL and SAFRAN apply them (their
PATH_TRAINING; validation and test facts only filter), rules score by their confidence (no
recency) and answer subject queries read backwards, and the filter removes every known answer
(the standard filtered setting; time-aware filtering at a single time point). The validation
facts are not evidence: with them, FB15k-237's rules with constants gain 0.015 of MRR on every
test fact that the published systems' protocol does not give (docs/results.md, "The graph
static rules are applied to"). With `aggregation="max"` candidates rank by their score lists
(`Candidates.rank_keys`) instead of one noisy-or score; with `aggregation="nrnoisy_or"` (static
KGs) by SAFRAN's non-redundant noisy-or over the rules' clusters (`rule_clusters`: Jaccard on
the train split, thresholds searched on the valid split).

Every fact (s, r, o, t) of the evaluated split is two queries: (s, r, ?, t) for the object and
(o, r⁻¹, ?, t) for the subject. Candidates come from `application.apply_rules` (history: a
temporal KG's every split before t, a static KG's `history_splits`). A query no rule answers
falls back to TLogic's baseline: the objects of its relation in the training facts (inverses
included), scored by their frequency [`baseline.py`]. With `baseline="below_rules"` the same
frequencies also rank below the rules where rules answer: candidates the rules tie are ordered
by them, and every entity the rules do not reach ranks after the rules' candidates by them
(`below_rules`), instead of at |E| (docs/results.md, "The frequency baseline below the rules").
The rank is 1 + the candidates scored strictly higher than the answer after removing the other
objects true at the query time (time-aware filter, every split); an answer without a score
ranks |E|. MRR and Hits@1/3/10 average over all queries.

Ties: that rank puts the answer first among the candidates scored equal to it (TLogic's
`calculate_rank(setting="best")`, the protocol of its published figures). A static rule scores
every candidate it reaches with its confidence, so ties are large there and decide the figure;
the metrics therefore also carry `ties_average` (the mean of the answer's first and last place
among its ties, as SAFRAN's evaluation ranks, the protocol of the AnyBURL / SAFRAN figures) and
`ties_last` (the answer after every candidate it ties with), on the same candidates and filter.

TLogic's own baseline shares one frequency table between queries and removes filtered objects
from it for good (a side effect of `filter_candidates` popping from the shared dict); this
module copies the table per query.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rulerag.errors import InputError
from rulerag.rules.application import apply_rules
from rulerag.rules.applied_rule import RulesByHead, applied_rules
from rulerag.rules.edge_index import edges_with_inverses
from rulerag.rules.ranking import filtered_rank_span, time_aware_filter
from rulerag.rules.rule import Rule
from rulerag.rules.rule_clusters import rule_clusters
from rulerag.rules.settings import ApplySettings, ClusterLabels

__all__ = [
    "TIE_CONVENTIONS",
    "ForecastResult",
    "baseline_scores",
    "below_rules",
    "forecast",
    "forecast_metrics",
    "forecast_queries",
    "metrics_of_ranks",
    "rounded_metrics",
]

HITS = (1, 3, 10)
#: the other conventions' metrics, by name: the answer's rank among its ties from its first
#: place (`rank`) and last (`rank_last`)
TIE_CONVENTIONS = ("ties_average", "ties_last")
#: Distinct queries applied and ranked at once. A query's candidates are dropped once it is
#: ranked, so memory follows this many queries, not the split: with rules with constants a
#: FB15k-237 query keeps thousands of score lists, and every test query at once passed 24 GB.
#: Each query's candidates do not depend on the others', so the ranks are the same for any size
FORECAST_QUERY_CHUNK = 4096


@dataclass
class ForecastResult:
    """Per query (both directions): sub, rel (TLogic id), obj (the answer), ts, rank (first
    among its ties), rank_last (last among them), whether rules answered it; the metrics."""

    ranks: pd.DataFrame
    metrics: dict[str, float]


def forecast_queries(
    facts: pd.DataFrame,
    split: str,
    n_relations: int,
    max_facts: int | None = None,
    seed: int = 12,
) -> pd.DataFrame:
    """The split's facts (a seeded sample of `max_facts` of them; None = all) as object and
    subject queries: sub, rel, obj, ts, key (one key per distinct (sub, rel, ts), shared by
    facts that differ only in the answer)."""
    chosen = facts[facts["split"] == split]
    if max_facts is not None and max_facts < len(chosen):
        chosen = chosen.sample(n=max_facts, random_state=seed).sort_index()
    edges = edges_with_inverses(chosen, n_relations)
    keys = edges.groupby(["sub", "rel", "ts"], sort=False).ngroup()
    return edges.assign(key=keys.to_numpy(np.int64)).reset_index(drop=True)


def baseline_scores(facts: pd.DataFrame, n_relations: int) -> dict[int, dict[int, float]]:
    """Relation (TLogic id) -> object -> its frequency among the relation's training facts."""
    train = edges_with_inverses(facts[facts["split"] == "train"], n_relations)
    out: dict[int, dict[int, float]] = {}
    for rel, group in train.groupby("rel"):
        counts = group["obj"].value_counts(normalize=True)
        out[int(rel)] = {int(o): round(float(p), 6) for o, p in counts.items()}
    return out


def below_rules(
    keys: Mapping[int, float | tuple[float, ...]], prior: Mapping[int, float]
) -> dict[int, tuple[Any, ...]]:
    """A query's rank keys with TLogic's baseline below the rules: (1, the rules' key,
    frequency) for each rule candidate, (0, 0.0, frequency) for each other entity of the
    relation's training objects; an entity in neither has no key (ranks |E|)."""
    ranked: dict[int, tuple[Any, ...]] = {c: (0, 0.0, f) for c, f in prior.items()}
    ranked.update({c: (1, key, prior.get(c, 0.0)) for c, key in keys.items()})
    return ranked


def forecast(
    facts: pd.DataFrame,
    rules: Sequence[Rule],
    n_relations: int,
    n_entities: int,
    settings: ApplySettings | None = None,
    *,
    split: str = "test",
    max_facts: int | None = None,
    seed: int = 12,
    clusters: ClusterLabels | None = None,
    progress: bool = True,
    query_chunk: int = FORECAST_QUERY_CHUNK,
    history_splits: Sequence[str] = ("train",),
    applied: RulesByHead | None = None,
) -> ForecastResult:
    """Apply `rules` to every fact of `split` (a seeded sample of `max_facts`; both
    directions) and rank the answers; the filter is every fact, the history every fact
    before the query time (temporal) or the facts of `history_splits` (static: the splits the
    rules were learned from, `mine_rules.splits`). `clusters` (nrnoisy_or):
    `rule_clusters(...).labels` for these rules, computed here if None. The queries are
    applied and ranked `query_chunk` distinct queries at a time. `applied`: the rules as
    `applied_rules(rules, n_relations, settings)` made them, when the caller has them."""
    settings = (settings or ApplySettings()).applicable()
    if settings.aggregation == "nrnoisy_or" and clusters is None:
        clusters = rule_clusters(rules, facts, n_relations, settings, progress=progress).labels
    queries = forecast_queries(facts, split, n_relations, max_facts, seed)
    unique = queries.drop_duplicates("key")[["key", "sub", "rel", "ts"]]
    # a temporal KG's history is every fact before the query time (its own split included);
    # a static KG's the facts the rules were learned from (AnyBURL's and SAFRAN's graph)
    if settings.temporal:
        history = facts
    else:
        if split in history_splits or not facts["split"].isin(history_splits).any():
            raise InputError(
                f"static link prediction on split {split!r}: history_splits "
                f"{list(history_splits)} must name splits of the KG other than it "
                f"(it has {sorted(facts['split'].unique())})"
            )
        history = facts[facts["split"].isin(history_splits)]
    if applied is None:
        applied = applied_rules(rules, n_relations, settings)
    edges = edges_with_inverses(history, n_relations)
    known = time_aware_filter(facts, n_relations)
    baseline = baseline_scores(facts, n_relations)
    rows_of = queries.groupby("key", sort=False).indices
    firsts = np.zeros(len(queries), np.int64)
    lasts = np.zeros(len(queries), np.int64)
    answered = np.zeros(len(queries), dtype=bool)
    sub, rel = queries["sub"].to_numpy(), queries["rel"].to_numpy()
    obj, ts = queries["obj"].to_numpy(), queries["ts"].to_numpy()
    for part in range(0, len(unique), query_chunk):
        chunk = unique.iloc[part : part + query_chunk]
        candidates = apply_rules(  # ranks read scores only: no explanations kept
            chunk, applied, edges, settings, clusters=clusters, progress=progress, explain=False
        )
        for key, found in candidates.items():
            scores = found.rank_keys or found.scores
            # a key's rows share (sub, rel, ts): one relation, one ranking for all of them
            prior = baseline.get(int(rel[rows_of[key][0]]), {})
            if scores and settings.baseline == "below_rules":
                ranked: Mapping[int, Any] = below_rules(scores, prior)
            else:
                ranked = scores or prior
            for row in rows_of[key]:
                answered[row] = bool(scores)
                others = known.get((int(sub[row]), int(rel[row]), int(ts[row])), set())
                firsts[row], lasts[row] = filtered_rank_span(
                    ranked, int(obj[row]), others, n_entities
                )
        del candidates
    table = queries.assign(rank=firsts, rank_last=lasts, by_rules=answered)
    return ForecastResult(table, forecast_metrics(table))


def metrics_of_ranks(rank: np.ndarray) -> dict[str, float]:
    """MRR and Hits@1/3/10 of one rank per query (float; an infinite rank, an answer not
    ranked at all, adds 0 to each)."""
    metrics = {"mrr": float(np.mean(1 / rank))}
    metrics.update({f"hits_at_{k}": float(np.mean(rank <= k)) for k in HITS})
    return metrics


def forecast_metrics(ranks: pd.DataFrame) -> dict[str, float | dict[str, float]]:
    """MRR and Hits@1/3/10 over all queries (both directions) with the answer first among its
    ties, the share rules answered, and (with a `rank_last` column) the same figures with ties
    averaged and with the answer last (`ties_average`, `ties_last`)."""
    first = ranks["rank"].to_numpy(np.float64)
    metrics: dict[str, float | dict[str, float]] = {"queries": float(len(first))}
    metrics.update(metrics_of_ranks(first))
    metrics["answered_by_rules"] = float(ranks["by_rules"].mean())
    if "rank_last" in ranks:
        last = ranks["rank_last"].to_numpy(np.float64)
        metrics["ties_average"] = metrics_of_ranks((first + last) / 2)
        metrics["ties_last"] = metrics_of_ranks(last)
    return metrics


def rounded_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """`forecast_metrics` to 4 decimals, the tie conventions' sections too (what metrics.json
    and the benchmark report)."""
    return {
        k: rounded_metrics(v) if isinstance(v, Mapping) else round(v, 4) for k, v in metrics.items()
    }
