"""Temporal rule application (TLogic's semantics) against hand-built KGs and brute force."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from rulerag.rules import grounding
from rulerag.rules.application import (
    ApplySettings,
    applied_rules,
    apply_rules,
    edges_with_inverses,
    filtered_rank,
    filtered_rank_span,
    noisy_or,
    time_aware_filter,
)
from rulerag.rules.forecasting import TIE_CONVENTIONS, forecast_metrics
from rulerag.rules.ranges import ragged_ranges, sorted_lookup, split_by_weight
from rulerag.rules.rule import Atom, Rule

N_REL = 4  # 0 body, 1 head, 2 a, 3 b
BODY, HEAD, A, B = range(4)


def facts(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["head", "relation", "tail", "time"]).assign(split="train")


def one_atom(confidence=0.8, inverse=False) -> Rule:
    return Rule.path(HEAD, [(BODY, inverse)], temporal=True, confidence=confidence,
                     body_support=10.0)  # fmt: skip


def queries(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["key", "sub", "rel", "ts"])


def test_the_planted_rule_predicts_its_head_first_with_its_explanation() -> None:
    kg = facts([(1, BODY, 2, 5), (1, BODY, 3, 2), (7, A, 8, 1)])
    rules = applied_rules([one_atom()], N_REL)
    out = apply_rules(queries([(0, 1, HEAD, 9)]), rules, edges_with_inverses(kg, N_REL),
                      progress=False)[0]  # fmt: skip
    ranked = out.ranked()
    assert [c for c, _ in ranked] == [2, 3]  # the more recent grounding scores higher
    assert ranked[0][1] == pytest.approx(0.5 * 0.8 + 0.5 * np.exp(0.1 * (5 - 9)), rel=1e-6)
    assert out.rules[2] == 0 and out.explanations[2] == [(1, BODY, 2, 5)]


def test_no_body_fact_at_or_after_the_query_time_is_used() -> None:
    kg = facts([(1, BODY, 2, 5), (1, BODY, 3, 9), (1, BODY, 4, 12), (2, A, 5, 3), (2, A, 6, 9)])
    rules = applied_rules(
        [one_atom(), Rule.path(HEAD, [(BODY, False), (A, False)], temporal=True,
                               confidence=0.5, body_support=5.0)],
        N_REL,
    )  # fmt: skip
    out = apply_rules(queries([(0, 1, HEAD, 9)]), rules, edges_with_inverses(kg, N_REL),
                      progress=False)[0]  # fmt: skip
    # 3 (t = 9) and 4 (t = 12) are not history at t = 9; 5 needs A at 3 < BODY at 5: out of
    # time order; 6 needs A at 9: not before the query
    assert set(out.scores) == {2}
    window = ApplySettings(window=3)  # only times 6..8 visible: nothing
    assert not apply_rules(queries([(0, 1, HEAD, 9)]), rules, edges_with_inverses(kg, N_REL),
                           window, progress=False)[0].scores  # fmt: skip


def test_two_hop_groundings_allow_equal_times_and_check_constraints() -> None:
    kg = facts([(1, A, 2, 4), (2, B, 3, 4), (2, B, 1, 6), (2, B, 9, 3)])
    chain = Rule.path(HEAD, [(A, False), (B, False)], temporal=True, confidence=0.6,
                      body_support=4.0)  # fmt: skip
    looped = Rule(chain.head, chain.body, True, ((0, 2),), confidence=0.7, body_support=4.0)
    out = apply_rules(queries([(0, 1, HEAD, 8)]), applied_rules([chain], N_REL),
                      edges_with_inverses(kg, N_REL), progress=False)[0]  # fmt: skip
    assert set(out.scores) == {3, 1}  # 9 is reached at 3 < 4: out of order
    assert out.explanations[3] == [(1, A, 2, 4), (2, B, 3, 4)]
    constrained = apply_rules(queries([(0, 1, HEAD, 8)]), applied_rules([looped], N_REL),
                              edges_with_inverses(kg, N_REL), progress=False)[0]  # fmt: skip
    assert set(constrained.scores) == {1}  # the path must return to the subject


def test_subject_queries_use_the_mirrored_and_inverse_head_rules() -> None:
    kg = facts([(1, BODY, 2, 5)])
    rules = applied_rules([one_atom()], N_REL)
    assert set(rules) == {HEAD, HEAD + N_REL} and rules[HEAD + N_REL][0].body == (BODY + N_REL,)
    # (?, HEAD, 2, 9) is the query (2, HEAD^-1, ?, 9): the body fact read backwards gives 1
    out = apply_rules(queries([(0, 2, HEAD + N_REL, 9)]), rules, edges_with_inverses(kg, N_REL),
                      progress=False)[0]  # fmt: skip
    assert set(out.scores) == {1}


def test_rules_are_filtered_and_ordered_as_tlogic_applies_them() -> None:
    weak = Rule.path(HEAD, [(A, False)], temporal=True, confidence=0.005, body_support=50.0)
    rare = Rule.path(HEAD, [(B, False)], temporal=True, confidence=0.9, body_support=1.0)
    long = Rule.path(HEAD, [(A, False), (B, False)], temporal=True, confidence=0.3,
                     body_support=9.0)  # fmt: skip
    kept = applied_rules([weak, rare, long, one_atom(0.4)], N_REL)
    assert [r.index for r in kept[HEAD]] == [3, 2]  # confidence descending
    assert [r.index for r in applied_rules([long, one_atom(0.4)], N_REL,
                                           ApplySettings(lengths=(1,)))[HEAD]] == [1]  # fmt: skip


def test_application_stops_once_the_top_k_are_distinct() -> None:
    kg = facts([(1, BODY, c, t) for c, t in zip(range(10, 13), (3, 4, 5), strict=True)]
               + [(1, A, 99, 5)])  # fmt: skip
    second = Rule.path(HEAD, [(A, False)], temporal=True, confidence=0.5, body_support=9.0)
    rules = applied_rules([one_atom(), second], N_REL)
    q = queries([(0, 1, HEAD, 8)])
    edges = edges_with_inverses(kg, N_REL)
    assert 99 in apply_rules(q, rules, edges, ApplySettings(top_k=4), progress=False)[0].scores
    stopped = apply_rules(q, rules, edges, ApplySettings(top_k=3), progress=False)[0]
    assert set(stopped.scores) == {10, 11, 12}  # three distinct lists after the first rule


def test_time_aware_filtered_ranks_equal_a_brute_force_filter() -> None:
    rng = np.random.default_rng(3)
    rows = [(int(s), int(r), int(o), int(t)) for s, r, o, t in zip(
        rng.integers(0, 12, 300), rng.integers(0, 3, 300), rng.integers(0, 12, 300),
        rng.integers(0, 20, 300), strict=True)]  # fmt: skip
    kg = facts(rows)
    known = time_aware_filter(kg, 3)
    truth = {(s, r, o, t) for s, r, o, t in rows} | {(o, r + 3, s, t) for s, r, o, t in rows}
    for s, r, o, t in rows[:60]:
        scores = {int(e): float(x) for e, x in enumerate(rng.random(12).round(1))}
        rank = filtered_rank(scores, o, known[(s, r, t)], 12)
        brute = 1 + sum(
            1 for e in range(12)
            if e != o and scores[e] > scores[o] and (s, r, e, t) not in truth
        )  # fmt: skip
        assert rank == brute
        tied = sum(
            1 for e in range(12)
            if e != o and scores[e] == scores[o] and (s, r, e, t) not in truth
        )  # fmt: skip
        assert filtered_rank_span(scores, o, known[(s, r, t)], 12) == (brute, brute + tied)
        assert filtered_rank(scores, o, known[(s, r, t)], 12, ties="last") == brute + tied
    assert filtered_rank({1: 0.5}, 2, set(), 12) == 12  # no score: ranked last
    assert filtered_rank_span({1: 0.5}, 2, set(), 12) == (12, 12)


def test_forecast_metrics_average_and_last_among_ties_by_hand() -> None:
    ranks = pd.DataFrame({"rank": [1, 2, 5], "rank_last": [3, 2, 5], "by_rules": [1, 1, 0]})
    metrics = forecast_metrics(ranks)
    assert metrics["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 5) / 3)
    assert metrics["ties_average"]["mrr"] == pytest.approx((1 / 2 + 1 / 2 + 1 / 5) / 3)
    assert metrics["ties_last"]["mrr"] == pytest.approx((1 / 3 + 1 / 2 + 1 / 5) / 3)
    assert metrics["hits_at_1"] == pytest.approx(1 / 3)
    assert metrics["ties_average"]["hits_at_1"] == 0 and metrics["ties_last"]["hits_at_3"] == 2 / 3
    assert "ties_last" not in forecast_metrics(ranks.drop(columns="rank_last"))


def test_noisy_or() -> None:
    assert noisy_or([0.5, 0.5]) == pytest.approx(0.75)
    assert noisy_or([0.3]) == pytest.approx(0.3)


def brute_force_scores(rows, rule, query, n_rel, settings):
    """Every grounding by nested loops over the facts (inverses added), TLogic's score."""
    from itertools import product

    from rulerag.rules.tlogic_io import rule_to_tlogic

    head, body, groups = rule_to_tlogic(rule, n_rel)
    edges = [(s, r, o, t) for s, r, o, t in rows] + [(o, r + n_rel, s, t) for s, r, o, t in rows]
    sub, tq = query
    best: dict[int, int] = {}
    for path in product(edges, repeat=len(body)):
        if any(e[1] != b for e, b in zip(path, body, strict=True)) or path[0][0] != sub:
            continue
        if any(path[i][0] != path[i - 1][2] for i in range(1, len(path))):
            continue
        times = [e[3] for e in path]
        if any(t >= tq for t in times) or times != sorted(times):
            continue
        ents = [sub] + [e[2] for e in path]
        if any(len({ents[v] for v in g}) > 1 for g in groups):
            continue
        best[ents[-1]] = max(best.get(ents[-1], -1), times[0])
    a, lmbda = settings.a, settings.lmbda
    return {
        c: float(np.float32(a * rule.confidence + (1 - a) * np.exp(lmbda * (t0 - tq))))
        for c, t0 in best.items()
    }


def random_rows(seed: int, entities: int, n: int, times: int) -> list[tuple[int, int, int, int]]:
    """n seeded facts (s, r, o, t) over `entities`, relations 0-2 and `times` steps."""
    rng = np.random.default_rng(seed)
    return [(int(s), int(r), int(o), int(t)) for s, r, o, t in zip(
        rng.integers(0, entities, n), rng.integers(0, 3, n), rng.integers(0, entities, n),
        rng.integers(0, times, n), strict=True)]  # fmt: skip


#: two- and three-atom path rules with head relation 0 over relations 1 and 2
PATH_RULES = (
    Rule.path(0, [(1, False), (2, True)], temporal=True, confidence=0.6, body_support=9.0),
    Rule.path(
        0, [(2, False), (1, False), (1, True)], temporal=True, confidence=0.4, body_support=9.0
    ),
)


@pytest.mark.parametrize("limit", [None, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_multi_hop_scores_equal_a_brute_force_enumeration(seed, limit, monkeypatch) -> None:
    if limit is not None:  # every hop's expansion in blocks of about 3 rows
        monkeypatch.setattr(grounding, "MAX_EXPANSION_ROWS", limit)
    rows = random_rows(seed, entities=6, n=40, times=8)
    kg = facts(rows)
    rules = [
        *PATH_RULES,
        Rule(
            Atom(0, 0, 2),
            (Atom(1, 0, 1), Atom(2, 1, 2)),
            True,
            ((0, 2),),
            confidence=0.5,
            body_support=9.0,
        ),  # fmt: skip
    ]
    settings = ApplySettings(top_k=10_000)
    edges = edges_with_inverses(kg, 3)
    for rule in rules:
        applied = applied_rules([rule], 3, settings)
        for sub in range(6):
            got = apply_rules(queries([(0, sub, 0, 8)]), applied, edges, settings,
                              progress=False)[0].scores  # fmt: skip
            assert got == pytest.approx(brute_force_scores(rows, rule, (sub, 8), 3, settings))


def test_static_rules_score_by_confidence_without_time() -> None:
    kg = facts([(1, BODY, 2, 0), (1, A, 3, 0), (3, B, 4, 0)]).assign(time=pd.NA)
    one = Rule.path(HEAD, [(BODY, False)], pca_confidence=0.6)
    two = Rule.path(HEAD, [(A, False), (B, False)], pca_confidence=0.3)
    settings = ApplySettings(temporal=False, min_body_support=0)
    rules = applied_rules([one, two], N_REL, settings)
    out = apply_rules(queries([(0, 1, HEAD, 0)]), rules, edges_with_inverses(kg, N_REL),
                      settings, progress=False)[0]  # fmt: skip
    assert out.scores == pytest.approx({2: 0.6, 4: 0.3})
    assert out.explanations[4] == [(1, A, 3, 0), (3, B, 4, 0)]
    assert not applied_rules([one], N_REL)  # a temporal application ignores static rules


def test_mined_rules_predict_the_planted_heads_first_with_their_explanation() -> None:
    """Mine a planted temporal KG, then apply what was mined to the planted head facts: each
    head's object is the top candidate, explained by the planted rule's own body facts."""
    from rulerag.rules.temporal_miner import mine_temporal
    from tests.support.planted_temporal import (
        R_A,
        R_B,
        R_BODY,
        R_HEAD,
        R_HEAD2,
        planted_temporal_kg,
    )

    kg = planted_temporal_kg(seed=3, n_groundings=120)
    facts = kg.facts
    rules = mine_temporal(facts, kg.n_entities, kg.n_relations, progress=False)
    applied = applied_rules(rules, kg.n_relations)
    heads = pd.concat([facts[facts["relation"] == r].head(20) for r in (R_HEAD, R_HEAD2)])
    q = pd.DataFrame(
        {
            "key": range(len(heads)),
            "sub": heads["head"].to_numpy(),
            "rel": heads["relation"].to_numpy(),
            "ts": heads["time"].to_numpy(),
        }
    )
    out = apply_rules(q, applied, edges_with_inverses(facts, kg.n_relations), progress=False)
    for key, row in enumerate(heads.itertuples(index=False)):
        ranked = out[key].ranked()
        assert ranked and ranked[0][0] == row.tail, (row, ranked[:3])
        explanation = out[key].explanations[row.tail]
        wanted = [R_BODY] if row.relation == R_HEAD else [R_A, R_B]
        assert [fact[1] for fact in explanation] == wanted
        assert explanation[0][0] == row.head and explanation[-1][2] == row.tail
        assert all(fact[3] < row.time for fact in explanation)


def test_the_stop_ranks_a_score_list_above_its_own_prefix() -> None:
    """TLogic sorts candidates by their descending score lists as Python compares lists: a
    candidate with one more rule's score ranks above one whose list is its prefix."""
    from rulerag.rules.application import _done

    lists = {1: [0.9, 0.5], 2: [0.9], 3: [0.9]}
    assert _done(lists, 2)  # best two: [0.9, 0.5] and [0.9], different
    assert not _done(lists, 3)  # [0.9] twice among the best three


def test_static_pair_rules_intersect_their_atoms_and_every_static_rule_is_mirrored() -> None:
    """AMIE's `a(x, y) & b(y, x) => head(x, y)` keeps the candidates both atoms link to the
    query's entity; static rules also answer subject queries, read backwards."""
    kg = facts([(1, A, 2, 0), (2, B, 1, 0), (1, A, 3, 0), (3, A, 1, 0), (5, A, 6, 0),
                (6, BODY, 7, 0)]).assign(time=pd.NA)  # fmt: skip
    pair = Rule(Atom(HEAD, 0, 1), (Atom(A, 0, 1), Atom(B, 1, 0)), pca_confidence=0.7)
    path = Rule.path(HEAD, [(A, False), (BODY, False)], pca_confidence=0.4)
    settings = ApplySettings(temporal=False)
    rules = applied_rules([pair, path], N_REL, settings)
    assert {len(v) for v in rules.values()} == {2}  # each rule under HEAD and its inverse
    edges = edges_with_inverses(kg, N_REL)
    q = queries([(0, 1, HEAD, 0), (1, 2, HEAD + N_REL, 0), (2, 7, HEAD + N_REL, 0)])
    out = apply_rules(q, rules, edges, settings, progress=False)
    assert out[0].scores == pytest.approx({2: 0.7})  # 3 is linked by A only
    assert out[0].explanations[2] == [(1, A, 2, 0), (1, B + N_REL, 2, 0)]
    assert out[1].scores == pytest.approx({1: 0.7})  # subject query: who has head(?, 2)
    assert out[2].scores == pytest.approx({5: 0.4})  # the path backwards from 7
    assert out[2].explanations[5] == [(7, BODY + N_REL, 6, 0), (6, A + N_REL, 5, 0)]
    temporal = Rule(Atom(HEAD, 0, 1), (Atom(A, 0, 1), Atom(B, 1, 0)), temporal=True,
                    confidence=0.7, body_support=9.0)  # fmt: skip
    assert not applied_rules([temporal], N_REL)  # TLogic has no pair rules


def test_max_aggregation_ranks_by_the_best_rule_then_the_next() -> None:
    """AnyBURL's maxplus: 2 and 3 share the best confidence, 3 has a second rule and wins;
    4 has two weaker rules whose noisy-or would beat both."""
    kg = facts([(1, A, 2, 0), (1, A, 3, 0), (1, B, 3, 0), (1, B, 4, 0), (1, BODY, 4, 0)])
    kg = kg.assign(time=pd.NA)
    rules = [
        Rule.path(HEAD, [(A, False)], pca_confidence=0.8),
        Rule.path(HEAD, [(B, False)], pca_confidence=0.2),
        Rule.path(HEAD, [(BODY, False)], pca_confidence=0.78),
    ]
    edges = edges_with_inverses(kg, N_REL)
    q = queries([(0, 1, HEAD, 0)])
    best = ApplySettings(temporal=False, aggregation="max")
    out = apply_rules(q, applied_rules(rules, N_REL, best), edges, best, progress=False)[0]
    assert [c for c, _ in out.ranked()] == [3, 2, 4]
    assert out.scores == pytest.approx({2: 0.8, 3: 0.8, 4: 0.78})
    assert filtered_rank(out.rank_keys, 2, set(), 9) == 2
    assert filtered_rank(out.rank_keys, 2, {3}, 9) == 1  # the other true answer is filtered
    noisy = ApplySettings(temporal=False)
    out = apply_rules(q, applied_rules(rules, N_REL, noisy), edges, noisy, progress=False)[0]
    assert [c for c, _ in out.ranked()] == [3, 4, 2]  # noisy-or: 0.84, 0.824, 0.8
    with pytest.raises(ValueError, match="aggregation"):
        ApplySettings(aggregation="sum")


def test_the_discrimination_bound_drops_a_rule_with_as_many_candidates_or_more() -> None:
    """AnyBURL's DISCRIMINATION_BOUND, per rule and query: BODY reaches 3 candidates from 1
    and one from 5; with bound 3 it predicts nothing for 1 and still 6 for 5; A's two stay."""
    kg = facts([(1, BODY, 2, 0), (1, BODY, 3, 0), (1, BODY, 4, 0), (5, BODY, 6, 0),
                (1, A, 7, 0), (1, A, 8, 0)]).assign(time=pd.NA)  # fmt: skip
    rules = [Rule.path(HEAD, [(BODY, False)], pca_confidence=0.8),
             Rule.path(HEAD, [(A, False)], pca_confidence=0.2)]  # fmt: skip
    edges = edges_with_inverses(kg, N_REL)
    q = queries([(0, 1, HEAD, 0), (1, 5, HEAD, 0)])
    scores = {}
    for bound in (0, 3, 4):
        settings = ApplySettings(temporal=False, discrimination_bound=bound)
        out = apply_rules(q, applied_rules(rules, N_REL, settings), edges, settings,
                          progress=False)  # fmt: skip
        scores[bound] = (set(out[0].scores), set(out[1].scores))
    assert scores[0] == scores[4] == ({2, 3, 4, 7, 8}, {6})
    assert scores[3] == ({7, 8}, {6})
    temporal = ApplySettings(discrimination_bound=3, lengths=(1,), min_body_support=0)
    timed = facts([(1, BODY, e, 0) for e in (2, 3, 4)])
    out = apply_rules(queries([(0, 1, HEAD, 5)]),
                      applied_rules([one_atom()], N_REL, temporal),
                      edges_with_inverses(timed, N_REL), temporal, progress=False)  # fmt: skip
    assert set(out[0].scores) == {2, 3, 4}  # temporal rules (TLogic) have no bound
    for bad in (-1, 1):
        with pytest.raises(ValueError, match="discrimination_bound"):
            ApplySettings(discrimination_bound=bad)


@pytest.mark.parametrize("seed", [0, 1])
def test_blocked_expansion_keeps_every_score_rule_and_explanation(seed, monkeypatch) -> None:
    """Hops expanded in blocks (as on YAGO, whose three-atom rules reach 5e8 rows) give the
    same candidates, scores, best rules and explanations as one expansion of the whole."""
    rules = [
        *PATH_RULES,
        Rule(
            Atom(0, 0, 3),
            (Atom(1, 0, 1), Atom(2, 1, 2), Atom(1, 2, 3)),
            True,
            ((0, 2),),
            confidence=0.5,
            body_support=9.0,
        ),  # fmt: skip
    ]
    edges = edges_with_inverses(facts(random_rows(seed, entities=12, n=300, times=10)), 3)
    settings = ApplySettings(top_k=10_000)
    applied = applied_rules(rules, 3, settings)
    asked = queries([(k, k % 12, 0, 6 + k % 4) for k in range(24)])

    def run() -> dict:
        found = apply_rules(asked, applied, edges, settings, progress=False)
        return {k: (c.scores, c.rules, c.explanations) for k, c in found.items()}

    whole = run()
    blocks = []
    split = grounding.split_by_weight
    monkeypatch.setattr(grounding, "MAX_EXPANSION_ROWS", 5)
    monkeypatch.setattr(
        grounding, "split_by_weight", lambda w, n: blocks.append(split(w, n)) or blocks[-1]
    )
    assert run() == whole
    assert max(len(b) for b in blocks) > 10  # the hops really ran in many blocks
    assert sum(bool(c[0]) for c in whole.values()) > 12


def test_ragged_ranges_and_weight_blocks() -> None:
    lo, hi = np.array([3, 0, 7, 5]), np.array([6, 0, 9, 4])
    pos, owner = ragged_ranges(lo, hi)
    assert pos.tolist() == [3, 4, 5, 7, 8]
    assert owner.tolist() == [0, 0, 0, 2, 2]
    weights = np.array([2, 9, 1, 1, 1, 4, 0, 3])
    parts = split_by_weight(weights, 4)
    assert [i for p in parts for i in range(len(weights))[p]] == list(range(len(weights)))
    assert all(weights[p].sum() <= 4 or p.stop - p.start == 1 for p in parts)
    assert [(p.start, p.stop) for p in parts] == [(0, 1), (1, 2), (2, 5), (5, 7), (7, 8)]
    assert split_by_weight(np.array([], dtype=int), 4) == []


def test_sorted_lookup_is_isin_with_positions() -> None:
    rng = np.random.default_rng(3)
    table = np.unique(rng.integers(0, 50, 30))
    values = rng.integers(-5, 60, 200)
    pos, found = sorted_lookup(table, values)
    assert (found == np.isin(values, table)).all()
    assert (table[pos[found]] == values[found]).all()
    pos, found = sorted_lookup(table[:0], values)
    assert not found.any() and not pos.any() and len(pos) == len(values)


@pytest.mark.parametrize(
    ("temporal", "aggregation"),
    [(True, "noisy_or"), (False, "noisy_or"), (False, "nrnoisy_or")],
    ids=["temporal", "static", "static-nrnoisy"],
)
def test_the_stage_entry_gives_what_the_stage_computed_before(
    tmp_path, temporal, aggregation
) -> None:
    """`apply_mined_rules` against the stage's former sequence, spelled out: forecast the
    test facts, answer RuleQA's test queries from the corpus splits' history, the report
    (nrnoisy_or: with the clusters learned once on the KG's train and valid splits)."""
    import json

    from rulerag.benchmark.files import read_benchmark_files
    from rulerag.benchmark.settings import build_benchmark_settings
    from rulerag.io import read_jsonl
    from rulerag.layout import DataLayout
    from rulerag.rules.answers import PUBLISHED, apply_mined_rules, results_markdown, rule_answers
    from rulerag.rules.bank import frame_rules
    from rulerag.rules.forecasting import forecast
    from rulerag.rules.rule_clusters import rule_clusters
    from rulerag.rules.settings import apply_rules_settings
    from tests.support.synthetic_kg import write_synthetic_dataset

    layout = DataLayout.of(tmp_path / "data", "toy")
    kg, bank = write_synthetic_dataset(layout, temporal)
    read_benchmark_files(build_benchmark_settings({"test_size": 30}), layout).write(
        layout.benchmark, {}
    )
    settings = apply_rules_settings(
        {"evaluate_facts": 40, "candidates": 3, "min_body_support": 0, "aggregation": aggregation}
    )
    splits = ("train", "valid")
    applied = apply_mined_rules(settings, splits, layout)
    applied.write(layout.rule_application)

    rules = frame_rules(bank)
    applying = settings.for_data(temporal)
    n_rel, n_ent = len(kg.relations), len(kg.entities)
    clusters = None
    if aggregation == "nrnoisy_or":
        clustering = rule_clusters(rules, kg.facts, n_rel, applying)
        clusters = clustering.labels
        assert applied.metrics["clusters"] == clustering.summary() | {
            "seconds": applied.metrics["clusters"]["seconds"]
        }
    result = forecast(
        kg.facts, rules, n_rel, n_ent, applying, max_facts=40, seed=settings.seed,
        clusters=clusters,
    )  # fmt: skip
    test = read_jsonl(layout.queries("test"))
    answers = rule_answers(
        test, rules, kg.facts[kg.facts["split"].isin(splits)], n_rel, applying,
        entity_names=dict(zip(kg.entities["id"], kg.entities["name"], strict=True)),
        relation_names=dict(zip(kg.relations["id"], kg.relations["name"], strict=True)),
        time_unit=kg.time_unit, keep=3, clusters=clusters,
    )  # fmt: skip
    assert read_jsonl(layout.rule_answers) == json.loads(json.dumps(answers))
    assert any(a["candidates"] for a in answers)
    metrics = json.loads((layout.rule_application / "metrics.json").read_text())
    assert metrics == applied.metrics
    assert metrics["dataset"] == "toy" and metrics["temporal"] is temporal
    assert (metrics["rules"], metrics["test_facts"]) == (len(bank), 40)
    assert metrics["published"] is None and "toy" not in PUBLISHED
    for key, value in result.metrics.items():
        if isinstance(value, dict):  # the tie conventions' figures
            assert metrics[key] == {k: round(v, 4) for k, v in value.items()}
            assert metrics[key]["mrr"] <= metrics["mrr"]
        else:
            assert metrics[key] == round(value, 4)
    assert set(TIE_CONVENTIONS) <= set(metrics)
    assert (result.ranks["rank_last"] >= result.ranks["rank"]).all()
    answered = sum(bool(a["candidates"]) for a in answers) / len(answers)
    assert metrics["ruleqa_answered"] == round(answered, 4)
    report = (layout.rule_application / "results.md").read_text(encoding="utf-8")
    assert report == applied.results == results_markdown(metrics, settings)


def test_static_rules_apply_to_the_training_facts_only() -> None:
    """Static link prediction applies rules to the splits they were learned from (AnyBURL's and
    SAFRAN's graph): a fact only the valid split holds is no evidence, only a filter."""
    from rulerag.errors import InputError
    from rulerag.rules.forecasting import forecast

    lives_in, born_in = 0, 1
    rows = [
        (0, lives_in, 2, "train"), (0, born_in, 2, "train"),  # born where one lives
        (3, born_in, 4, "train"), (5, born_in, 4, "train"),  # the baseline's favourite: 4
        (1, lives_in, 2, "valid"),  # the only evidence for the test fact
        (1, born_in, 2, "test"),
    ]  # fmt: skip
    facts = pd.DataFrame(rows, columns=["head", "relation", "tail", "split"]).assign(time=pd.NA)
    rule = Rule(head=Atom(born_in, 0, 1), body=(Atom(lives_in, 0, 1),), confidence=0.9)
    settings = ApplySettings(
        temporal=False, aggregation="max", min_confidence=0.0, baseline="unanswered"
    )

    def object_query(**kwargs: object) -> pd.Series:
        ranks = forecast(facts, [rule], 2, 6, settings, progress=False, **kwargs).ranks
        return ranks[ranks["rel"] == born_in].iloc[0]

    default = object_query()  # train only: no rule fires, the baseline puts 4 first
    assert (default["rank"], bool(default["by_rules"])) == (2, False)
    with_valid = object_query(history_splits=("train", "valid"))
    assert (with_valid["rank"], bool(with_valid["by_rules"])) == (1, True)
    for wrong in (("train", "test"), ("dev",)):
        with pytest.raises(InputError, match="history_splits"):
            object_query(history_splits=wrong)


def test_exact_noisy_or_orders_what_float32_ties_as_exact_arithmetic_does() -> None:
    """float32 noisy-or rounds 1 - 0.4^25 and 1 - 0.4^30 both to 1.0; the exact key keeps
    them apart, and over random score lists orders candidates as Fractions do."""
    from fractions import Fraction

    from rulerag.rules.application import noisy_or_exact

    assert noisy_or([0.6] * 30) == noisy_or([0.6] * 25) == 1.0
    assert noisy_or_exact([0.6] * 30)[1] > noisy_or_exact([0.6] * 25)[1]
    assert noisy_or_exact([0.5, 0.5])[0] == pytest.approx(0.75)
    assert noisy_or_exact([1.0, 0.2])[1] == float("inf")
    rng = np.random.default_rng(5)
    lists = [
        sorted(np.float32(rng.integers(1, 20, rng.integers(1, 40)) / 20).tolist(), reverse=True)
        for _ in range(200)
    ]

    def product(scores: list[float]) -> Fraction:
        out = Fraction(1)
        for s in scores:
            out *= 1 - Fraction(s)
        return out

    for x, y in zip(lists, lists[1:], strict=False):
        px, py = product(x), product(y)
        (sx, kx), ky = noisy_or_exact(x), noisy_or_exact(y)[1]
        assert sx == pytest.approx(float(1 - px), abs=1e-12)
        if px == py:
            continue
        if abs(px - py) / max(px, py) > 1e-9:
            assert (kx > ky) == (px < py)


def test_exact_noisy_or_ranks_candidates_that_float32_ties() -> None:
    """Candidate 7 is reached by 30 one-atom rules of confidence 0.6, candidate 6 by 25: float32
    noisy-or ties them at 1.0 (ranked by id), exact ranks 7 first; max is refused with exact."""
    n_rel = 32  # 0 the head, 1..31 bodies
    rows = [(1, r, 7, 0) for r in range(1, 31)] + [(1, r, 6, 0) for r in range(1, 26)]
    kg = facts(rows).assign(time=pd.NA)
    rules = [Rule.path(0, [(r, False)], pca_confidence=0.6) for r in range(1, 31)]
    edges = edges_with_inverses(kg, n_rel)
    q = queries([(0, 1, 0, 0)])
    ranked = {}
    for mode in ("float32", "exact"):
        settings = ApplySettings(temporal=False, noisy_or=mode)
        found = apply_rules(q, applied_rules(rules, n_rel, settings), edges, settings,
                            progress=False)[0]  # fmt: skip
        ranked[mode] = [c for c, _ in found.ranked()]
        assert found.scores == pytest.approx({6: 1.0, 7: 1.0})
    assert ranked == {"float32": [6, 7], "exact": [7, 6]}
    with pytest.raises(ValueError, match="noisy_or: exact"):
        ApplySettings(aggregation="max", noisy_or="exact")
    with pytest.raises(ValueError, match="noisy_or must be"):
        ApplySettings(noisy_or="float64")
    with pytest.raises(ValueError, match="baseline must be"):
        ApplySettings(baseline="everywhere")


def test_the_baseline_below_the_rules_breaks_ties_and_ranks_what_they_miss() -> None:
    """below_rules: the rules' candidates first (their ties by the relation's object
    frequency), then every other training object by frequency; without it an answer the rules
    miss ranks |E| and tied candidates by id, first or last."""
    from rulerag.rules.forecasting import below_rules, forecast

    keys = {3: 0.5, 4: 0.5, 5: 0.9}
    prior = {4: 0.4, 6: 0.3, 7: 0.2, 3: 0.1}
    ranked = below_rules(keys, prior)
    assert sorted(ranked, key=ranked.__getitem__, reverse=True) == [5, 4, 3, 6, 7]
    assert ranked[6] == (0, 0.0, 0.3) and ranked[3] == (1, 0.5, 0.1)
    assert below_rules({3: (0.5, 0.2)}, {})[3] == (1, (0.5, 0.2), 0.0)

    lives_in, born_in = 0, 1
    rows = [
        (0, lives_in, 2, "train"), (0, born_in, 2, "train"),  # the rule's evidence
        (8, lives_in, 9, "train"), (8, lives_in, 3, "train"),  # it reaches 9 and 3 for 8
        (3, born_in, 4, "train"), (5, born_in, 4, "train"), (6, born_in, 7, "train"),
        (10, born_in, 3, "train"),  # frequencies of born_in's objects: 4 2/5; 2, 7, 3 1/5
        (8, born_in, 7, "test"),  # rules miss 7: |E| without the baseline; with it after 9
        # (the rules' other candidate; 3 is filtered) and 4, tied with 2
        (8, born_in, 3, "test"),  # tied with 9 for the rules; 3 has a frequency, 9 none
    ]  # fmt: skip
    kg = pd.DataFrame(rows, columns=["head", "relation", "tail", "split"]).assign(time=pd.NA)
    rule = Rule(head=Atom(born_in, 0, 1), body=(Atom(lives_in, 0, 1),), confidence=0.9)
    for baseline, expected in (("unanswered", {7: (11, 11), 3: (1, 2)}),
                               ("below_rules", {7: (3, 4), 3: (1, 1)})):  # fmt: skip
        settings = ApplySettings(temporal=False, min_confidence=0.0, baseline=baseline)
        ranks = forecast(kg, [rule], 2, 11, settings, progress=False).ranks
        objects = ranks[(ranks["rel"] == born_in) & (ranks["sub"] == 8)]
        got = {int(o): (int(f), int(la)) for o, f, la in
               objects[["obj", "rank", "rank_last"]].itertuples(index=False)}  # fmt: skip
        assert got == expected, baseline


def test_the_apply_rules_section_takes_temporal_from_the_data() -> None:
    """params.yaml's `apply_rules` is `ApplySettings`: `temporal` and `cluster_ties` are no
    keys of it (refused as unknown), the section as loaded applies nothing until the data says
    whether its rules are temporal (`for_data`, which checks nrnoisy_or again)."""
    from rulerag.rules.forecasting import forecast
    from rulerag.rules.settings import NRNOISY_TEMPORAL, apply_rules_settings
    from rulerag.settings import SettingsError

    loaded = apply_rules_settings({"aggregation": "nrnoisy_or", "baseline": "unanswered"})
    assert loaded.temporal is None
    assert loaded.for_data(False) == ApplySettings(
        temporal=False, aggregation="nrnoisy_or", baseline="unanswered"
    )
    with pytest.raises(ValueError, match="static rules only") as caught:
        loaded.for_data(True)
    assert str(caught.value) == NRNOISY_TEMPORAL
    assert apply_rules_settings(None) == replace(ApplySettings(), temporal=None)
    for key, value in (("temporal", False), ("cluster_ties", "first")):
        with pytest.raises(SettingsError, match=f"apply_rules: unknown key '{key}'"):
            apply_rules_settings({key: value})
    rule = Rule(head=Atom(HEAD, 0, 1), body=(Atom(BODY, 0, 1),), confidence=0.9)
    with pytest.raises(ValueError, match="for_data"):
        applied_rules([rule], N_REL, apply_rules_settings(None))
    with pytest.raises(ValueError, match="for_data"):
        forecast(facts([(1, HEAD, 2, 0)]).assign(split="test"), [rule], N_REL, 3, loaded)
