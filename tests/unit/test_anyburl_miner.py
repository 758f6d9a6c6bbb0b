"""AnyBURL's constant rules, counted exactly: planted rules are found with the support, body
groundings and confidence a brute-force count over the definitions gives, and every other rule
found agrees with that count too."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from rulerag.rules.anyburl_miner import mine_constant_columns
from rulerag.rules.mining import mine
from rulerag.rules.rule import Rule
from rulerag.rules.settings import (
    ConstantRuleSettings,
    MineRulesSettings,
    StaticMinerSettings,
    mine_rules_settings,
)
from rulerag.rules.static_miner import mine_static
from rulerag.settings import SettingsError
from tests.helpers import assert_brute_force_counts

GENDER, PLAYS_FOR, KNOWS = 0, 1, 2
MALE, FEMALE, TEAM = 0, 1, 2
N_ENTITIES, N_RELATIONS = 16, 3


def toy_facts(seed: int = 3) -> pd.DataFrame:
    """Persons 3..15; the planted rules: who plays for TEAM is male (5 of the 6 players have a
    known gender, all male), and random `knows` facts for noise."""
    facts = {(p, PLAYS_FOR, TEAM) for p in range(3, 9)}
    facts |= {(p, GENDER, MALE) for p in range(3, 8)}  # player 8 has no gender
    facts |= {(p, GENDER, FEMALE) for p in range(9, 13)}
    facts |= {(13, GENDER, MALE), (14, PLAYS_FOR, 15)}
    rng = np.random.default_rng(seed)
    for _ in range(30):
        a, b = rng.integers(3, N_ENTITIES, size=2)
        facts.add((int(a), KNOWS, int(b)))  # self-loops included: they must be skipped
    facts.add((TEAM, KNOWS, MALE))
    rows = sorted(facts)
    return pd.DataFrame(rows, columns=["head", "relation", "tail"])


def brute_force(facts: pd.DataFrame, settings: ConstantRuleSettings) -> dict[tuple, tuple]:
    """rule key -> (support, body groundings, confidence), straight from the definitions."""
    fact_set = set(facts.itertuples(index=False, name=None))
    entities = range(N_ENTITIES)

    def edge(a: int, code: int, b: int) -> bool:
        rel, inverse = divmod(code, 2)
        return ((b, rel, a) if inverse else (a, rel, b)) in fact_set

    pc = settings.unseen_negatives
    out: dict[tuple, tuple] = {}

    def add(rule: Rule, support: int, body: int, weight: float) -> None:
        confidence = weight * support / (body + pc)
        if support >= settings.min_support and confidence >= settings.min_confidence:
            out[rule.key] = (support, body, pytest.approx(confidence))

    for r, inverse in itertools.product(range(N_RELATIONS), (False, True)):
        hc = 2 * r + inverse
        n_facts = sum(1 for f in fact_set if f[1] == r)
        for c in entities:
            holds = {x for x in entities if x != c and edge(x, hc, c)}
            if not holds:
                continue
            zero = Rule.with_constant(r, c, constant_is_subject=inverse)
            add(zero, len(holds), n_facts, settings.zero_weight)
            for code in range(2 * N_RELATIONS):
                rel, body_inverse = divmod(code, 2)
                if code != hc:
                    body = {
                        x
                        for x in entities
                        if x != c and any(edge(x, code, a) for a in entities if a != x)
                    }
                    rule = Rule.with_constant(
                        r, c, constant_is_subject=inverse, body=(rel, bool(body_inverse))
                    )
                    add(rule, len(body & holds), len(body), settings.ac2_weight)
                for d in entities:
                    if code == hc and d == c:
                        continue  # the head's own fact
                    reach = {x for x in entities if x != d and edge(x, code, d)}
                    if len(reach) < settings.min_body_constant_groundings:
                        continue
                    body = reach - {c}
                    rule = Rule.with_constant(
                        r,
                        c,
                        constant_is_subject=inverse,
                        body=(rel, bool(body_inverse)),
                        body_constant=d,
                    )
                    add(rule, len(body & holds), len(body), 1.0)
    return out


def mine_toy(facts: pd.DataFrame, settings: ConstantRuleSettings) -> list[Rule]:
    """The constant rules of a toy KG's facts (N_ENTITIES, N_RELATIONS)."""
    return mine_constant_columns(
        facts["head"].to_numpy(),
        facts["relation"].to_numpy(),
        facts["tail"].to_numpy(),
        N_ENTITIES,
        N_RELATIONS,
        settings,
    ).rules()


def mined(facts: pd.DataFrame, settings: ConstantRuleSettings) -> dict[tuple, Rule]:
    rules = mine_toy(facts, settings)
    keys = [rule.key for rule in rules]
    assert len(keys) == len(set(keys)), "a rule was found twice"
    return {rule.key: rule for rule in rules}


ALL = ConstantRuleSettings(kinds=("ac1", "ac2", "zero"))


@pytest.mark.parametrize(
    "settings",
    [
        ALL,
        ConstantRuleSettings(
            kinds=("ac1", "ac2", "zero"), min_support=1, min_body_constant_groundings=0
        ),
        ConstantRuleSettings(
            kinds=("ac1", "ac2", "zero"), unseen_negatives=0, zero_weight=1.0, ac2_weight=1.0
        ),
    ],
)
@pytest.mark.parametrize("seed", [3, 8])
def test_every_rule_matches_the_brute_force_count(
    settings: ConstantRuleSettings, seed: int
) -> None:
    facts = toy_facts(seed)
    expected = brute_force(facts, settings)
    found = mined(facts, settings)
    assert_brute_force_counts(found, expected)
    for rule in found.values():
        assert rule.std_confidence == pytest.approx(rule.support / rule.body_support)


def test_planted_rules_are_found_with_their_counts() -> None:
    found = mined(toy_facts(), ALL)
    # gender(X, male) <= plays_for(X, TEAM): 6 players, 5 of them male
    ac1 = found[Rule.with_constant(GENDER, MALE, body=(PLAYS_FOR, False), body_constant=TEAM).key]
    assert (ac1.support, ac1.body_support, ac1.confidence) == (5, 6, pytest.approx(5 / 11))
    assert ac1.kind == "ac1"
    # gender(X, male) <= plays_for(X, A): 7 entities play for someone, 5 of them male
    ac2 = found[Rule.with_constant(GENDER, MALE, body=(PLAYS_FOR, False)).key]
    assert (ac2.support, ac2.body_support, ac2.confidence) == (5, 7, pytest.approx(0.1 * 5 / 12))
    # gender(X, male) <=: 6 males among the 10 gender facts
    zero = found[Rule.with_constant(GENDER, MALE).key]
    assert (zero.support, zero.body_support, zero.confidence) == (
        6,
        10,
        pytest.approx(0.01 * 6 / 15),
    )
    # the other way round: plays_for(X, TEAM) <= gender(X, male)
    back = found[Rule.with_constant(PLAYS_FOR, TEAM, body=(GENDER, False), body_constant=MALE).key]
    assert (back.support, back.body_support) == (5, 6)  # males 3-7 and 13
    # fewer than 5 s-neighbours of the body constant: not an ac1 rule
    plays_for_constants = {
        dict(r.constants).get(v)
        for r in found.values()
        if r.kind == "ac1" and r.body[0].relation == PLAYS_FOR
        for v in (r.body[0].subject, r.body[0].object)
    }
    assert TEAM in plays_for_constants and 15 not in plays_for_constants


def test_kinds_switch_and_settings() -> None:
    facts = toy_facts()
    only_zero = mined(facts, ConstantRuleSettings(kinds=("zero",)))
    assert {r.kind for r in only_zero.values()} == {"zero"}
    assert mined(facts, ConstantRuleSettings()) == {}
    with pytest.raises(ValueError, match="kinds"):
        ConstantRuleSettings(kinds=("ac3",))  # type: ignore[arg-type]
    with pytest.raises(SettingsError):
        mine_rules_settings({"static": {"constants": {"kinds": ["ac1"], "min_suport": 2}}})
    settings = mine_rules_settings({"static": {"constants": {"kinds": ["ac1", "zero"]}}})
    assert settings.static.constants.kinds == ("ac1", "zero")


def test_static_miner_adds_constant_rules_only_when_asked() -> None:
    facts = toy_facts()
    plain = mine_static(
        facts, N_ENTITIES, N_RELATIONS, StaticMinerSettings(min_initial_support=0), progress=False
    )
    assert all(not r.constants for r in plain)
    settings = mine_rules_settings(
        {"static": {"min_initial_support": 0, "constants": {"kinds": ["ac1", "ac2", "zero"]}}}
    )
    both = mine(facts, N_ENTITIES, N_RELATIONS, False, settings)
    assert [r for r in both if not r.constants] == plain
    assert {r.key for r in both if r.constants} == set(mined(facts, ALL))
    assert isinstance(MineRulesSettings().static.constants, ConstantRuleSettings)


def test_closed_rules_can_take_anyburls_confidence() -> None:
    facts = toy_facts()
    section = {"static": {"min_initial_support": 0, "constants": {"closed_confidence": "anyburl"}}}
    rules = mine(facts, N_ENTITIES, N_RELATIONS, False, mine_rules_settings(section))
    plain = mine_static(
        facts, N_ENTITIES, N_RELATIONS, StaticMinerSettings(min_initial_support=0), progress=False
    )
    assert {r.key for r in rules} == {r.key for r in plain} and rules
    for rule in rules:
        assert rule.confidence == pytest.approx(rule.support / (rule.body_support + 5))
        assert rule.score == rule.confidence and rule.pca_confidence is not None
    assert all(r.confidence is None for r in plain)


def test_mine_rule_bank_writes_constant_rules_and_counts_kinds(tmp_path) -> None:
    from rulerag.io import read_parquet
    from rulerag.rules.bank import frame_rules
    from rulerag.rules.mining import mine_rule_bank
    from tests.support.synthetic_kg import synthetic_kg

    kg, _ = synthetic_kg(temporal=False, n_facts=600)
    section = {"static": {"min_initial_support": 0, "constants": {"kinds": ["ac1", "ac2", "zero"]}}}
    mined_rules = mine_rule_bank(kg, mine_rules_settings(section), "toy")
    kinds = mined_rules.stats["rules_by_kind"]
    assert kinds["zero"] > 0 and kinds["ac2"] > 0 and sum(kinds.values()) == len(mined_rules.rules)
    assert "constants" not in mined_rules.bank  # the bank keeps closed rules only, as without
    mined_rules.write(tmp_path, {"test": "1"})
    back = frame_rules(read_parquet(tmp_path / "rules.parquet"))
    assert (
        sum(1 for r in back if r.constants)
        == len(mined_rules.rules) - kinds["path"] - kinds["pair"]
    )
    names = set(kg.entities["name"])
    zero = next(t for t in mined_rules.rules["text"] if t.startswith("(always)"))
    head = zero.split("leads to [")[1].rstrip("]").split(", ")
    assert head[0] in names or head[-1] in names  # the constant by its entity name
    plain = mine_rule_bank(kg, mine_rules_settings({"static": {"min_initial_support": 0}}), "toy")
    assert "constants" not in plain.rules.columns
    assert plain.stats["rules_by_kind"] == {
        "path": kinds["path"],
        "pair": kinds["pair"],
        "ac1": 0,
        "ac2": 0,
        "zero": 0,
    }
