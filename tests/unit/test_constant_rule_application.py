"""The static path of `apply_rules` with AnyBURL's rules with constants: every candidate's
score list equals a brute-force firing of the rules, with max and noisy-or aggregation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from rulerag.rules.application import (
    ApplySettings,
    applied_rules,
    apply_rule_list,
    noisy_or,
)
from rulerag.rules.forecasting import forecast
from rulerag.rules.rule import Rule
from rulerag.rules.settings import ConstantRuleSettings, StaticMinerSettings
from rulerag.rules.static_miner import mine_static
from tests.unit.test_anyburl_miner import N_ENTITIES, N_RELATIONS, mine_toy, toy_facts

ALL = ConstantRuleSettings(kinds=("ac1", "ac2", "zero"), min_body_constant_groundings=2)


def rules_for(facts: pd.DataFrame) -> list[Rule]:
    constant = mine_toy(facts, ALL)
    closed = mine_static(
        facts,
        N_ENTITIES,
        N_RELATIONS,
        StaticMinerSettings(min_initial_support=0, min_pca_confidence=0.0, min_head_coverage=0.0),
        progress=False,
    )
    return closed + constant


def _body_holds(fact_set: set[tuple[int, int, int]], rule: Rule, x: int, value: int) -> bool:
    """The rule's body with its variable x = value: s(value, d) for d != value, or an s-fact
    to an A != value for a dangling end; a zero-body rule always."""
    if not rule.body:
        return True
    (atom,) = rule.body
    other = atom.object if atom.subject == x else atom.subject
    d = rule.constant_of.get(other)

    def holds(end: int) -> bool:
        pair = {x: value, other: end}
        return (pair[atom.subject], atom.relation, pair[atom.object]) in fact_set

    if d is not None:
        return d != value and holds(d)
    return any(holds(a) for a in range(N_ENTITIES) if a != value)


def brute_force(
    facts: pd.DataFrame,
    rules: list[Rule],
    query: tuple[int, int],
    min_confidence: float,
    bound: int = 0,
) -> dict[int, list[float]]:
    """candidate -> the confidences of the constant rules that fire for query (e, head id),
    straight from the rule's atoms over the fact set (AnyBURL's firing conditions): forwards,
    r(X, c) gives c for r(e, ?); backwards, it gives every X its body holds for to r(?, c),
    none if `bound` (> 0) or more."""
    fact_set = set(facts[["head", "relation", "tail"]].itertuples(index=False, name=None))
    e, rel = query
    n = N_RELATIONS
    out: dict[int, list[float]] = {}
    for rule in rules:
        if not rule.constants or rule.score < min_confidence:
            continue
        bound_vars = rule.constant_of
        head = rule.head
        constant_is_subject = head.subject in bound_vars
        forward = head.relation + (n if constant_is_subject else 0)
        x = head.object if constant_is_subject else head.subject
        c = bound_vars[head.subject if constant_is_subject else head.object]
        if rel == forward and e != c and _body_holds(fact_set, rule, x, e):
            out.setdefault(c, []).append(np.float32(rule.score))
        elif rule.body and rel == (forward + n) % (2 * n) and e == c:
            xs = [v for v in range(N_ENTITIES) if v != c and _body_holds(fact_set, rule, x, v)]
            if not bound or len(xs) < bound:
                for v in xs:
                    out.setdefault(v, []).append(np.float32(rule.score))
    return out


@pytest.mark.parametrize("bound", [0, 4])
@pytest.mark.parametrize("aggregation", ["max", "noisy_or"])
@pytest.mark.parametrize("seed", [3, 8])
def test_candidate_scores_equal_a_brute_force_firing(
    aggregation: str, seed: int, bound: int
) -> None:
    facts = toy_facts(seed).assign(time=pd.NA, split="train")
    rules = [r for r in rules_for(facts) if r.constants]
    settings = ApplySettings(
        temporal=False,
        aggregation=aggregation,
        top_k=10**6,
        min_confidence=0.0001,
        discrimination_bound=bound,
    )
    queries = pd.DataFrame(
        [
            (e * 2 * N_RELATIONS + rel, e, rel, 0)
            for e in range(N_ENTITIES)
            for rel in range(2 * N_RELATIONS)
        ],
        columns=["key", "sub", "rel", "ts"],
    )
    out = apply_rule_list(queries, rules, facts, N_RELATIONS, settings, progress=False)
    fired = 0
    for row in queries.itertuples(index=False):
        expected = brute_force(facts, rules, (row.sub, row.rel), settings.min_confidence, bound)
        got = out[row.key]
        assert set(got.scores) == set(expected)
        for c, scores in expected.items():
            ordered = sorted(scores, reverse=True)
            if aggregation == "max":
                assert got.rank_keys[c] == pytest.approx(tuple(ordered))
                assert got.scores[c] == pytest.approx(ordered[0])
            else:
                assert got.scores[c] == pytest.approx(noisy_or(ordered), rel=1e-6)
            fired += len(scores)
    assert fired > 50  # the toy KG fires every kind many times
    if bound:  # the bound drops some backward firings on this KG (not a vacuous setting)
        unbounded = apply_rule_list(
            queries, rules, facts, N_RELATIONS, replace(settings, discrimination_bound=0),
            progress=False,
        )  # fmt: skip
        assert any(set(out[k].scores) != set(unbounded[k].scores) for k in queries["key"])


def test_constant_rules_explain_and_are_read_backwards_not_mirrored() -> None:
    facts = toy_facts().assign(time=pd.NA, split="train")
    rules = [r for r in rules_for(facts) if r.constants]
    by_head = applied_rules(rules, N_RELATIONS, ApplySettings(temporal=False, min_confidence=0))
    applied = [a for group in by_head.values() for a in group]
    forward = [a for a in applied if not a.reverse]
    backward = [a for a in applied if a.reverse]
    assert len(forward) == len(rules)  # never mirrored (a path read backwards)
    # every rule with a body is also read backwards, under the inverse head, as it is
    assert sorted(a.index for a in backward) == [i for i, r in enumerate(rules) if r.body]
    by_index = {a.index: a for a in forward}
    for a in backward:
        twin = by_index[a.index]
        assert a.head == (twin.head + N_RELATIONS) % (2 * N_RELATIONS)
        assert (a.body, a.constant, a.body_constant) == (
            twin.body, twin.constant, twin.body_constant,
        )  # fmt: skip
    temporal = applied_rules(rules, N_RELATIONS, ApplySettings(temporal=True, min_confidence=0))
    assert not any(a.reverse for group in temporal.values() for a in group)
    ac1 = Rule.with_constant(0, 0, body=(1, False), body_constant=2, confidence=0.5)
    zero = Rule.with_constant(0, 0, confidence=0.01)
    settings = ApplySettings(temporal=False, min_confidence=0.0, lengths=(1,))
    queries = pd.DataFrame([(0, 3, 0, 0), (1, 13, 0, 0)], columns=["key", "sub", "rel", "ts"])
    out = apply_rule_list(queries, [ac1, zero], facts, N_RELATIONS, settings, progress=False)
    # player 3 plays for TEAM (2): the ac1 rule explains male (0) by that fact
    assert out[0].rules[0] == 0 and out[0].explanations[0] == [(3, 1, 2, 0)]
    # 13 plays for no team: only the zero-body rule (applied whatever `lengths` says)
    assert out[1].scores == {0: pytest.approx(0.01)} and out[1].explanations[0] == []
    # read backwards, gender(?, male) gets every player of TEAM, each explained by its own
    # plays_for fact; the zero-body rule is not read backwards
    players = set(facts.loc[(facts["relation"] == 1) & (facts["tail"] == 2), "head"])
    backward = pd.DataFrame([(2, 0, N_RELATIONS, 0)], columns=["key", "sub", "rel", "ts"])
    out = apply_rule_list(backward, [ac1, zero], facts, N_RELATIONS, settings, progress=False)
    assert players and set(out[2].scores) == players
    assert all(out[2].explanations[x] == [(x, 1, 2, 0)] for x in players)


def test_forecast_with_constant_rules_ranks_the_planted_answer() -> None:
    facts = toy_facts().assign(time=pd.NA, split="train")
    test = pd.DataFrame([(8, 0, 0, pd.NA, "test")], columns=facts.columns)  # player 8: male
    kg = pd.concat([facts, test], ignore_index=True)
    rules = rules_for(facts)
    settings = ApplySettings(
        temporal=False, aggregation="max", min_confidence=0.0001, baseline="unanswered"
    )
    result = forecast(kg, rules, N_RELATIONS, N_ENTITIES, settings, progress=False)
    ranks = dict(zip(result.ranks["rel"], result.ranks["rank"], strict=True))
    assert ranks[0] == 1  # gender(8, ?) -> male, by gender(X, male) <= plays_for(X, TEAM)


def test_ruleqa_answers_name_a_constant_rule_and_its_evidence() -> None:
    from rulerag.rules.answers import rule_answers

    facts = toy_facts().assign(time=pd.NA, split="train")
    ac1 = Rule.with_constant(0, 0, body=(1, False), body_constant=2, confidence=0.5)
    zero = Rule.with_constant(0, 0, confidence=0.3)
    entity_names = {i: f"e{i}" for i in range(N_ENTITIES)} | {0: "male", 2: "FC X"}
    relation_names = {0: "gender", 1: "plays for", 2: "knows"}
    queries = [
        {"qid": "q1", "head": 3, "relation": 0, "time": None},
        {"qid": "q2", "head": 13, "relation": 0, "time": None},
    ]
    settings = ApplySettings(temporal=False, min_confidence=0.0)
    q1, q2 = rule_answers(
        queries, [ac1, zero], facts, N_RELATIONS, settings, entity_names=entity_names,
        relation_names=relation_names, progress=False,
    )  # fmt: skip
    best = q1["candidates"][0]
    assert best["name"] == "male" and best["rule"].endswith("leads to [Entity1, gender, male]")
    assert best["rule"].startswith("[Entity1, plays for, FC X]") and len(best["evidence"]) == 1
    assert q2["candidates"][0]["rule"] == "(always) leads to [Entity1, gender, male]"
    assert q2["candidates"][0]["evidence"] == []


def test_nrnoisy_or_refuses_rules_with_constants() -> None:
    """SAFRAN's clusters are computed for closed rules; a constant rule's firings would bypass
    the cluster maxima, so the combination is refused rather than silently half-applied."""
    facts = toy_facts().assign(time=pd.NA, split="train")
    zero = Rule.with_constant(0, 0, confidence=0.01)
    settings = ApplySettings(temporal=False, aggregation="nrnoisy_or", min_confidence=0.0)
    queries = pd.DataFrame([(0, 3, 0, 0)], columns=["key", "sub", "rel", "ts"])
    with pytest.raises(ValueError, match="nrnoisy_or does not take rules with constants"):
        apply_rule_list(queries, [zero], facts, N_RELATIONS, settings, clusters={0: [0]})


@pytest.mark.parametrize("aggregation", ["max", "noisy_or"])
def test_forecast_ranks_do_not_depend_on_the_query_chunk(aggregation: str) -> None:
    """`forecast` applies and ranks its queries a chunk at a time (memory); every chunk size
    gives the same ranks, rules with constants read both ways included."""
    facts = toy_facts(8).assign(time=pd.NA, split="train")
    test_rows = facts.sample(n=12, random_state=1).index
    facts.loc[test_rows, "split"] = "test"
    rules = rules_for(facts[facts["split"] == "train"])
    settings = ApplySettings(
        temporal=False, aggregation=aggregation, min_confidence=0.0001, baseline="unanswered"
    )
    tables = [
        forecast(
            facts, rules, N_RELATIONS, N_ENTITIES, settings, progress=False, query_chunk=chunk
        ).ranks  # fmt: skip
        for chunk in (1, 5, 10**6)
    ]
    assert len(tables[0]) == 24 and tables[0]["by_rules"].any()
    for table in tables[1:]:
        pd.testing.assert_frame_equal(table, tables[0])
