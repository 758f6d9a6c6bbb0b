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
  their noisy-or 1 - Π(1 - s_i). Application stops for a query once its best `top_k` (20)
  candidates, ordered by their score lists, have pairwise different score lists.
* Only rules with confidence >= 0.01 and body support >= 2 [`filter_rules`], of the lengths
  asked.

Our rules store an inverse-head rule renamed to a forward head (`tlogic_io`); they are turned
back into TLogic's ids here (`rule_to_tlogic`), and every one-atom rule is mirrored under the
inverse head as TLogic learns it, so subject queries (o, r⁻¹, ?, t) find their rules.

The joins are vectorised over all queries of a head relation at once (pandas merges over
per-relation edge tables); the stopping test runs only for queries a rule touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rulerag.rules.rule import Rule
from rulerag.rules.tlogic_io import rule_to_tlogic

__all__ = [
    "AppliedRule",
    "ApplySettings",
    "Candidates",
    "apply_rules",
    "applied_rules",
    "edges_with_inverses",
    "filtered_rank",
    "noisy_or",
    "time_aware_filter",
]


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
    #: the rule's confidence (AMIE's PCA confidence), aggregated by noisy-or as AnyBURL can
    temporal: bool = True


@dataclass(frozen=True)
class AppliedRule:
    """A rule in TLogic's ids: head and body relations (inverse r + n), constraints over the
    positions 0..len(body) of the path, confidence, and the rule it came from."""

    index: int  # position in the input rule list
    head: int
    body: tuple[int, ...]
    constraints: tuple[tuple[int, ...], ...]
    confidence: float


def applied_rules(
    rules: Sequence[Rule], n_relations: int, settings: ApplySettings = ApplySettings()
) -> dict[int, list[AppliedRule]]:
    """Head relation (TLogic id) -> its rules in application order (confidence descending,
    stable), one-atom rules mirrored under the inverse head, filtered as `filter_rules`."""
    n = n_relations
    by_head: dict[int, list[AppliedRule]] = {}
    seen: set[tuple] = set()
    for index, rule in enumerate(rules):
        if rule.length not in settings.lengths or rule.temporal != settings.temporal:
            continue
        confidence = float(rule.confidence or 0.0) if settings.temporal else rule.score
        if confidence < settings.min_confidence:
            continue
        if settings.temporal and (rule.body_support or 0.0) < settings.min_body_support:
            continue
        try:
            head, body, groups = rule_to_tlogic(rule, n)
        except ValueError:  # not a path (AMIE's two atoms on the head's pair): not applied
            continue
        copies = [(head, tuple(body))]
        if rule.length == 1:
            copies.append(((head + n) % (2 * n), ((body[0] + n) % (2 * n),)))
        for h, b in copies:
            constraints = tuple(tuple(g) for g in groups)
            key = (h, b, constraints)
            if key in seen:
                continue
            seen.add(key)
            by_head.setdefault(h, []).append(AppliedRule(index, h, b, constraints, confidence))
    for head in by_head:
        by_head[head].sort(key=lambda r: -r.confidence)  # stable: ties keep the input order
    return by_head


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

    def ranked(self) -> list[tuple[int, float]]:
        return sorted(self.scores.items(), key=lambda kv: (-kv[1], kv[0]))


def _groundings(
    rule: AppliedRule,
    queries: pd.DataFrame,
    edges: dict[int, pd.DataFrame],
    window: int,
    temporal: bool = True,
) -> pd.DataFrame:
    """Every grounding of `rule` for `queries` (columns key, sub, ts): key, e0..eL, t0..tL-1."""
    frame = queries.rename(columns={"sub": "e0", "ts": "tq"})
    constrained = {v for group in rule.constraints for v in group}
    last = len(rule.body)
    for hop, relation in enumerate(rule.body):
        table = edges.get(relation)
        if table is None or frame.empty:
            return pd.DataFrame()
        step = table.rename(columns={"sub": f"e{hop}", "obj": f"e{hop + 1}", "ts": f"t{hop}"})
        frame = frame.merge(step, on=f"e{hop}", how="inner")
        if temporal:
            times = frame[f"t{hop}"]
            keep = times < frame["tq"]
            if window > 0:
                keep &= times >= frame["tq"] - window
            if hop:
                keep &= times >= frame[f"t{hop - 1}"]
            frame = frame[keep]
        if hop + 1 < last and len(frame) > 1:
            # What the rest of the path and the score depend on: where it is, when, the
            # constrained entities it passed, and the latest first-hop time. Of the paths
            # alike in the rest, the one with the latest t0 is kept (with its entities, for
            # the explanation), so hub entities do not multiply paths hop after hop.
            alike = ["key", f"e{hop + 1}", f"t{hop}"]
            alike += [f"e{v}" for v in sorted(constrained) if 0 < v <= hop]
            frame = frame.loc[frame.groupby(alike, sort=False)["t0"].idxmax()]
    for group in rule.constraints:
        anchor = frame[f"e{group[0]}"]
        same = np.ones(len(frame), dtype=bool)
        for position in group[1:]:
            same &= (frame[f"e{position}"] == anchor).to_numpy()
        frame = frame[same]
    return frame.rename(columns={f"e{last}": "cand"})


def _done(score_lists: dict[int, list[float]], top_k: int) -> bool:
    """TLogic's stop: the best top_k candidates (by score list) have distinct score lists."""
    if len(score_lists) < top_k:
        return False
    best = sorted(score_lists.values(), reverse=True)[:top_k]
    return len({tuple(x) for x in best}) >= top_k


def apply_rules(
    queries: pd.DataFrame,
    rules: dict[int, list[AppliedRule]],
    edges: pd.DataFrame,
    settings: ApplySettings = ApplySettings(),
    *,
    progress: bool = True,
) -> dict[int, Candidates]:
    """Candidates for each query (columns key, sub, rel (TLogic id), ts; one row per key)."""
    from tqdm.auto import tqdm

    tables = {int(r): g[["sub", "obj", "ts"]] for r, g in edges.groupby("rel", sort=False)}
    out: dict[int, Candidates] = {int(k): Candidates() for k in queries["key"]}
    lists: dict[int, dict[int, list[float]]] = {int(k): {} for k in queries["key"]}
    best: dict[tuple[int, int], float] = {}
    groups = list(queries.groupby("rel", sort=False))
    total = sum(len(rules.get(int(rel), [])) for rel, _ in groups)
    bar = tqdm(total=total, desc="apply rules", unit="rule", disable=not progress)
    for rel, group in groups:
        active = group[["key", "sub", "ts"]]
        for rule in rules.get(int(rel), []):
            bar.update(1)
            if active.empty:
                continue
            found = _groundings(rule, active, tables, settings.window, settings.temporal)
            if found.empty:
                continue
            latest = found.loc[found.groupby(["key", "cand"], sort=False)["t0"].idxmax()]
            if settings.temporal:
                recency = np.exp(settings.lmbda * (latest["t0"] - latest["tq"]).to_numpy())
                scores = settings.a * rule.confidence + (1 - settings.a) * recency
            else:
                scores = np.full(len(latest), rule.confidence)
            scores = scores.astype(np.float32)
            last = len(rule.body)
            for row, score in zip(latest.itertuples(index=False), scores.tolist(), strict=True):
                key, cand = int(row.key), int(row.cand)
                lists[key].setdefault(cand, []).append(score)
                if score > best.get((key, cand), -1.0):
                    best[(key, cand)] = score
                    path = [
                        (
                            int(getattr(row, f"e{i}")),
                            rule.body[i],
                            int(row.cand) if i + 1 == last else int(getattr(row, f"e{i + 1}")),
                            int(getattr(row, f"t{i}")),
                        )
                        for i in range(last)
                    ]
                    out[key].rules[cand] = rule.index
                    out[key].explanations[cand] = path
            touched = set(latest["key"].astype(int))
            finished = {k for k in touched if _done(lists[k], settings.top_k)}
            if finished:
                active = active[~active["key"].isin(finished)]
    bar.close()
    for key, candidates in lists.items():
        out[key].scores = {c: noisy_or(s) for c, s in candidates.items()}
    return out


def noisy_or(scores: Sequence[float]) -> float:
    """1 - Π(1 - s), in float32 as TLogic computes it (ties are exact float comparisons)."""
    return float(1 - np.prod(1 - np.asarray(scores, np.float32), dtype=np.float32))


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
    scores: dict[int, float], answer: int, others: Iterable[int], n_entities: int
) -> int:
    """TLogic's rank: 1 + the candidates scored strictly higher than the answer, other true
    answers at the query time removed; an answer without a score ranks n_entities."""
    if answer not in scores:
        return n_entities
    mine = scores[answer]
    skip = set(others) - {answer}
    return 1 + sum(1 for c, s in scores.items() if s > mine and c not in skip)
