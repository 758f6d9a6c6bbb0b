"""Temporal rules with constants (`temporal_constants`): every rule mined has the support, body
groundings and confidence a brute-force count over the definitions gives and every rule the
count keeps is mined; applied, every candidate's scores equal a brute-force firing; no body
fact at or after the query time is used; the other rules do not change."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest

from rulerag.rules.application import (
    ApplySettings,
    applied_rules,
    apply_rules,
    edges_with_inverses,
    noisy_or,
)
from rulerag.rules.bank import rules_frame, select_bank
from rulerag.rules.mining import describe_rules, mine
from rulerag.rules.rule import Rule
from rulerag.rules.settings import (
    BankConfig,
    TemporalConstantSettings,
    TemporalMinerSettings,
    mine_rules_settings,
)
from rulerag.rules.temporal_constants import mine_temporal_constant_rules
from rulerag.rules.temporal_miner import mine_temporal
from rulerag.rules.tlogic_io import write_tlogic_json
from rulerag.settings import SettingsError
from tests.helpers import assert_brute_force_counts

N_ENTITIES, N_RELATIONS, N_TIMES = 8, 3, 10
ALL = TemporalConstantSettings(
    kinds=("ac1", "ac2", "zero"), min_support=1, min_confidence=0.0, unseen_negatives=0
)


def toy_facts(seed: int, n: int = 70) -> pd.DataFrame:
    """n seeded facts over 8 entities, 3 relations and 10 time steps (self-loops and repeats
    of a triple at other times included), plus a planted pattern: whoever visits 1 (relation
    0) later negotiates with 2 (relation 1)."""
    rng = np.random.default_rng(seed)
    rows = {
        (int(s), int(r), int(o), int(t))
        for s, r, o, t in zip(
            rng.integers(0, N_ENTITIES, n), rng.integers(0, N_RELATIONS, n),
            rng.integers(0, N_ENTITIES, n), rng.integers(0, N_TIMES, n), strict=True,
        )
    }  # fmt: skip
    for x in (3, 4, 5, 6):
        rows |= {(x, 0, 1, x - 3), (x, 1, 2, x)}
    frame = pd.DataFrame(sorted(rows), columns=["head", "relation", "tail", "time"])
    return frame.assign(split="train")


def edges_of(facts: pd.DataFrame) -> set[tuple[int, int, int, int]]:
    """Every fact in both directions in TLogic's ids (r, or r + n read backwards)."""
    rows = set(facts[["head", "relation", "tail", "time"]].itertuples(index=False, name=None))
    return {(s, r, o, t) for s, r, o, t in rows} | {
        (o, r + N_RELATIONS, s, t) for s, r, o, t in rows
    }


def rule_of(h: int, c: int, b: int | None = None, d: int | None = None) -> Rule:
    """h(X, c, T) <= b(X, d | A, T') (or no body) as the Rule the miner builds."""
    n = N_RELATIONS
    body = None if b is None else (b % n, b >= n)
    rule = Rule.with_constant(h % n, c, constant_is_subject=h >= n, body=body, body_constant=d)
    return dataclasses.replace(rule, temporal=True)


def brute_force(facts: pd.DataFrame, settings: TemporalConstantSettings) -> dict[tuple, tuple]:
    """rule key -> (support, body groundings, confidence), straight from the definitions:
    body groundings are body facts (entities and time), support those a head fact follows."""
    edges = edges_of(facts)
    codes, entities = range(2 * N_RELATIONS), range(N_ENTITIES)
    pc = settings.unseen_negatives
    weight = {"ac1": 1.0, "ac2": settings.ac2_weight, "zero": settings.zero_weight}
    out: dict[tuple, tuple] = {}

    def head_after(x: int, h: int, c: int, t: int) -> bool:
        return any(e[0] == x and e[1] == h and e[2] == c and e[3] > t for e in edges)

    def add(kind: str, rule: Rule, support: int, body: int) -> None:
        confidence = weight[kind] * support / (body + pc) if body + pc else 0.0
        kept = support >= settings.min_support and confidence >= settings.min_confidence
        if kept and confidence > 0:
            out[rule.key] = (support, body, pytest.approx(confidence))

    def counted(groundings: list[tuple[int, int]], h: int, c: int) -> tuple[int, int]:
        """(support, body) over body facts (x, t), or over the distinct x (entities)."""
        if settings.groundings == "facts":
            return sum(1 for x, t in groundings if head_after(x, h, c, t)), len(groundings)
        xs = {x for x, _ in groundings}
        return sum(
            1 for x in xs if any(head_after(x, h, c, t) for y, t in groundings if y == x)
        ), len(xs)

    for h, c in itertools.product(codes, entities):
        if "zero" in settings.kinds:
            heads = [(x, t) for x, r, o, t in edges if r == h and o == c and x != c]
            if settings.groundings == "facts":
                support, body = len(heads), sum(1 for e in edges if e[1] == h)
            else:
                support = len({x for x, _ in heads})
                body = len({x for x, r, o, _ in edges if r == h and o != x})
            add("zero", rule_of(h, c), support, body)
        for b in codes:
            if "ac2" in settings.kinds:
                body = [(x, t) for x, r, a, t in edges if r == b and a != x and x != c]
                add("ac2", rule_of(h, c, b), *counted(body, h, c))
            if "ac1" in settings.kinds:
                for d in entities:
                    body = [(x, t) for x, r, o, t in edges if r == b and o == d and x not in (c, d)]
                    add("ac1", rule_of(h, c, b, d), *counted(body, h, c))
    return out


def mined(facts: pd.DataFrame, settings: TemporalConstantSettings) -> dict[tuple, Rule]:
    rules = mine_temporal_constant_rules(facts, N_ENTITIES, N_RELATIONS, settings)
    keyed = {rule.key: rule for rule in rules}
    assert len(keyed) == len(rules), "a rule was mined twice"
    assert all(rule.temporal and rule.constants for rule in rules)
    return keyed


@pytest.mark.parametrize(
    "settings",
    [
        ALL,
        TemporalConstantSettings(kinds=("ac1", "ac2", "zero"), min_confidence=0.3),
        TemporalConstantSettings(
            kinds=("ac2", "zero"), unseen_negatives=5, ac2_weight=0.5, zero_weight=0.1,
            min_support=2, min_confidence=0.01,
        ),
        dataclasses.replace(ALL, groundings="entities"),
        TemporalConstantSettings(
            kinds=("ac1", "ac2", "zero"), groundings="entities", unseen_negatives=2,
            min_confidence=0.2,
        ),
    ],
)  # fmt: skip
@pytest.mark.parametrize("seed", [0, 5])
def test_every_rule_matches_the_brute_force_count(
    seed: int, settings: TemporalConstantSettings
) -> None:
    facts = toy_facts(seed)
    want = brute_force(facts, settings)
    assert_brute_force_counts(mined(facts, settings), want)


def test_the_planted_rule_is_found_with_its_counts() -> None:
    facts = toy_facts(0, n=0)  # the planted facts only
    got = mined(facts, ALL)
    # negotiate(X, 2, T) <= visit(X, 1, T'): the four visits are each followed by the head
    rule = got[rule_of(1, 2, 0, 1).key]
    assert (rule.support, rule.body_support, rule.confidence) == (4.0, 4.0, 1.0)
    assert rule.kind == "ac1" and rule.score == 1.0 and rule.std_confidence is None
    # the subject-side variant negotiate(4, X, T) <= negotiate(3, X, T'): X = 2, T' = 3 < 4
    back = got[rule_of(1 + N_RELATIONS, 4, 1 + N_RELATIONS, 3).key]
    assert back.head.subject in back.constant_of and back.text(["v", "n", "x"], "abcdefgh") == (
        "[d, n, Entity3] leads to [e, n, Entity3]"
    )
    assert (back.support, back.body_support) == (1.0, 1.0)
    # no head can follow the last time: negotiate(X, 2) <= negotiate(X, 2) never holds here
    assert rule_of(1, 2, 1, 2).key not in got


def brute_force_firing(
    facts: pd.DataFrame, rules: list[Rule], query: tuple[int, int, int], settings: ApplySettings
) -> dict[int, list[float]]:
    """candidate -> the float32 scores of the constant rules that fire for query (e, h, t),
    each rule read from its atoms over the facts before t (within the window)."""
    edges = edges_of(facts)
    e, rel, tq = query
    n = N_RELATIONS
    low = tq - settings.window if settings.window > 0 else -(10**9)
    out: dict[int, list[float]] = {}
    for rule in rules:
        if not rule.constants or rule.score < settings.min_confidence:
            continue
        bound = rule.constant_of
        head = rule.head
        constant_is_subject = head.subject in bound
        if head.relation + (n if constant_is_subject else 0) != rel:
            continue
        x = head.object if constant_is_subject else head.subject
        c = bound[head.subject if constant_is_subject else head.object]
        if e == c:
            continue
        a, conf = settings.a, float(rule.confidence)
        if not rule.body:
            out.setdefault(c, []).append(float(np.float32(a * conf)))
            continue
        (atom,) = rule.body
        other = atom.object if atom.subject == x else atom.subject
        code = atom.relation + (n if atom.object == x else 0)  # read from X
        d = bound.get(other)
        if d == e:
            continue
        times = [
            t for s, r, o, t in edges
            if s == e and r == code and low <= t < tq and (o == d if d is not None else o != e)
        ]  # fmt: skip
        if times:
            recency = np.exp(settings.lmbda * (max(times) - tq))
            out.setdefault(c, []).append(float(np.float32(a * conf + (1 - a) * recency)))
    return {c: sorted(s, reverse=True) for c, s in out.items()}


@pytest.mark.parametrize("window", [0, 4])
@pytest.mark.parametrize("seed", [1, 7])
def test_candidate_scores_equal_a_brute_force_firing(seed: int, window: int) -> None:
    facts = toy_facts(seed)
    rules = mine_temporal_constant_rules(facts, N_ENTITIES, N_RELATIONS, ALL)
    kinds = {rule.kind for rule in rules}
    assert kinds == {"ac1", "ac2", "zero"}
    settings = ApplySettings(aggregation="max", top_k=10**6, min_confidence=0.0,
                             min_body_support=0.0, window=window)  # fmt: skip
    noisy = dataclasses.replace(settings, aggregation="noisy_or")
    by_head = applied_rules(rules, N_RELATIONS, settings)
    assert sum(len(v) for v in by_head.values()) == len(rules)  # never mirrored
    edges = edges_with_inverses(facts, N_RELATIONS)
    queries = pd.DataFrame(
        [(i, e, rel, tq) for i, (e, rel, tq) in enumerate(
            itertools.product(range(N_ENTITIES), range(2 * N_RELATIONS), (3, 6, N_TIMES)))],
        columns=["key", "sub", "rel", "ts"],
    )  # fmt: skip
    got = apply_rules(queries, by_head, edges, settings, progress=False)
    got_noisy = apply_rules(queries, by_head, edges, noisy, progress=False)
    for row in queries.itertuples(index=False):
        want = brute_force_firing(facts, rules, (row.sub, row.rel, row.ts), settings)
        candidates = got[row.key]
        assert {c: list(k) for c, k in candidates.rank_keys.items()} == want
        assert got_noisy[row.key].scores == pytest.approx({c: noisy_or(s) for c, s in want.items()})
        for c, facts_used in candidates.explanations.items():  # the best firing's body fact
            assert all(t < row.ts and s == row.sub for s, _, _, t in facts_used)
            assert rules[candidates.rules[c]].constant_of  # a rule with constants answered


def test_no_body_fact_at_or_after_the_query_time_is_used() -> None:
    # ac1 negotiate(X, 2) <= visit(X, 1) and ac2 negotiate(X, 4) <= visit(X, A)
    rules = [
        dataclasses.replace(rule_of(1, 2, 0, 1), confidence=0.5, body_support=5.0),
        dataclasses.replace(rule_of(1, 4, 0), confidence=0.4, body_support=5.0),
    ]
    facts = pd.DataFrame(
        [(3, 0, 1, 9), (3, 0, 1, 12), (3, 0, 5, 9), (7, 2, 7, 1)],
        columns=["head", "relation", "tail", "time"],
    ).assign(split="train")
    edges = edges_with_inverses(facts, N_RELATIONS)
    query = pd.DataFrame([(0, 3, 1, 9)], columns=["key", "sub", "rel", "ts"])
    by_head = applied_rules(rules, N_RELATIONS)
    assert not apply_rules(query, by_head, edges, progress=False)[0].scores  # all at t >= 9
    later = query.assign(ts=10)
    out = apply_rules(later, by_head, edges, progress=False)[0]
    assert set(out.scores) == {2, 4}
    assert out.explanations[2] == [(3, 0, 1, 9)] and out.explanations[4][0][3] == 9
    assert out.scores[2] == pytest.approx(0.5 * 0.5 + 0.5 * np.exp(-0.1), rel=1e-6)
    # a window of 1 at t = 11 sees t = 10 only: nothing; of 2 sees t = 9
    window = ApplySettings(window=1)
    assert not apply_rules(query.assign(ts=11), by_head, edges, window, progress=False)[0].scores
    window = ApplySettings(window=2)
    assert set(apply_rules(query.assign(ts=11), by_head, edges, window,
                           progress=False)[0].scores) == {2, 4}  # fmt: skip


def test_the_other_rules_do_not_change() -> None:
    facts = toy_facts(3, n=120)
    settings = TemporalMinerSettings(lengths=(1, 2), walks_per_relation=30, num_samples=50)
    plain = mine_temporal(facts, N_ENTITIES, N_RELATIONS, settings, progress=False)
    with_constants = dataclasses.replace(settings, constants=ALL)
    both = mine_temporal(facts, N_ENTITIES, N_RELATIONS, with_constants, progress=False)
    assert [r for r in both if not r.constants] == plain
    assert len(both) > len(plain)
    names = [f"r{i}" for i in range(N_RELATIONS)]
    entities = [f"e{i}" for i in range(N_ENTITIES)]
    frame = rules_frame(both, names, entities)
    old = rules_frame(plain, names)
    assert "constants" not in old.columns
    same = frame[frame["constants"] == "[]"].drop(columns=["constants", "kind"])
    pd.testing.assert_frame_equal(same.reset_index(drop=True), old)  # ids and rows alike
    # the bank keeps rules without constants; stats count the kinds; TLogic's JSON refuses
    bank = select_bank(frame, BankConfig(lengths=(0, 1, 2)))
    pd.testing.assert_frame_equal(bank, select_bank(old, BankConfig(lengths=(0, 1, 2))))
    stats = describe_rules("toy", "temporal", frame, bank, facts)
    assert stats["rules_by_kind"]["ac1"] == sum(r.kind == "ac1" for r in both) > 0
    assert "rules_by_kind" not in describe_rules("toy", "temporal", old, bank, facts)
    with pytest.raises(ValueError, match="no constants"):
        write_tlogic_json(both, "/nonexistent/never-written.json", N_RELATIONS)


def test_params_section_and_settings() -> None:
    settings = mine_rules_settings({"temporal": {"constants": {"kinds": ["ac1", "zero"]}}})
    assert settings.temporal.constants.kinds == ("ac1", "zero")
    assert mine_rules_settings({}).temporal.constants.kinds == ()
    with pytest.raises(SettingsError, match="constants"):
        mine_rules_settings({"temporal": {"constants": {"kinds": ["ac3"]}}})
    with pytest.raises(SettingsError, match="min_confidence"):
        mine_rules_settings({"temporal": {"constants": {"min_confidence": 2}}})
    facts = toy_facts(2)
    chosen = dataclasses.replace(
        settings,
        temporal=dataclasses.replace(settings.temporal, lengths=(1,), walks_per_relation=5),
    )
    rules = mine(facts, N_ENTITIES, N_RELATIONS, True, chosen)
    assert {r.kind for r in rules if r.constants} == {"ac1", "zero"}
    assert (
        mine_temporal_constant_rules(facts, N_ENTITIES, N_RELATIONS, TemporalConstantSettings())
        == []
    )
    with pytest.raises(ValueError, match="time"):
        mine_temporal_constant_rules(facts.assign(time=pd.NA), N_ENTITIES, N_RELATIONS, ALL)
