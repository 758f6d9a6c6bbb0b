"""Rules with constants (AnyBURL's AC1, AC2 and zero-body rules): their structure, text forms,
rules.parquet and AMIE round trips, and the places that cannot take them (the RuleRAG bank,
TLogic's format)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rulerag.rules.amie_io import AmieFormatError, read_amie_tsv, write_amie_tsv
from rulerag.rules.bank import frame_rules, rule_id, rules_frame, select_bank
from rulerag.rules.mining import describe_rules, rule_kinds
from rulerag.rules.rule import RULE_KINDS, Atom, Rule
from rulerag.rules.settings import BankConfig
from rulerag.rules.tlogic_io import rule_to_tlogic, write_tlogic_json

RELATIONS = ["gender", "father of", "plays for", "nationality"]
ENTITIES = ["male", "female", "ann", "bob", "FC X", "France"]


def constant_rules() -> list[Rule]:
    stats = {"support": 4.0, "body_support": 6.0, "confidence": 4 / 11}
    return [
        # gender(X, male) <= father_of(X, bob)
        Rule.with_constant(0, 0, body=(1, False), body_constant=3, **stats),
        # nationality(France, X)... as r(c, X) <= plays_for(X, FC X)
        Rule.with_constant(3, 5, constant_is_subject=True, body=(2, False), body_constant=4),
        # gender(X, male) <= father_of(X, A)
        Rule.with_constant(0, 0, body=(1, False), **stats),
        # gender(X, male) <= father_of(A, X)
        Rule.with_constant(0, 0, body=(1, True)),
        # gender(X, female) <=
        Rule.with_constant(0, 1, support=3.0, body_support=9.0, confidence=0.2),
        # nationality(France, X) <=
        Rule.with_constant(3, 5, constant_is_subject=True),
        # nationality(X, France) <= nationality(X, France)-like: head and body share a constant
        Rule.with_constant(3, 5, body=(2, True), body_constant=5),
    ]


def all_rules() -> list[Rule]:
    return [
        Rule.path(0, [(1, False)], support=2.0, pca_confidence=0.5),
        Rule(head=Atom(2, 0, 1), body=(Atom(1, 0, 1), Atom(3, 1, 0)), pca_confidence=0.3),
        *constant_rules(),
    ]


def test_structure_and_kinds() -> None:
    ac1, ac1_subject, ac2, ac2_inverse, zero, zero_subject, shared = constant_rules()
    assert ac1.head == Atom(0, 0, 2) and ac1.body == (Atom(1, 0, 1),)
    assert ac1.constants == ((1, 3), (2, 0))
    assert ac1_subject.body == (Atom(2, 2, 1),) and ac1_subject.constants == ((0, 5), (1, 4))
    assert ac2.constants == ((2, 0),) and ac2_inverse.body == (Atom(1, 1, 0),)
    assert zero.head == Atom(0, 0, 1) and zero.body == () and zero.constants == ((1, 1),)
    assert zero_subject.constants == ((0, 5),)
    assert shared.head == Atom(3, 0, 1) and shared.constants == ((1, 5),)
    kinds = [r.kind for r in all_rules()]
    assert kinds == ["path", "pair", "ac1", "ac1", "ac2", "ac2", "zero", "zero", "ac1"]
    # constants are part of the structure: same shape, other constant, other rule
    other = Rule.with_constant(0, 1, body=(1, False), body_constant=3)
    assert other.key != ac1.key and rule_id(other) != rule_id(ac1)
    with pytest.raises(ValueError, match="zero-body"):
        Rule.with_constant(0, 1, body_constant=3)


def test_text_and_formal_name_the_constants() -> None:
    ac1, ac1_subject, ac2, _, zero, zero_subject, _ = constant_rules()
    assert (
        ac1.text(RELATIONS, ENTITIES)
        == "[Entity1, father of, bob] leads to [Entity1, gender, male]"
    )
    assert ac1.formal(RELATIONS, ENTITIES) == "gender(X, male) <- father_of(X, bob)"
    assert ac1_subject.formal(RELATIONS, ENTITIES) == "nationality(France, Y) <- plays_for(Y, FC_X)"
    assert ac2.formal(RELATIONS, ENTITIES) == "gender(X, male) <- father_of(X, Z)"
    assert zero.text(RELATIONS, ENTITIES) == "(always) leads to [Entity1, gender, female]"
    assert zero_subject.formal(RELATIONS, ENTITIES) == "nationality(France, Y) <-"
    with pytest.raises(ValueError, match="entity names"):
        ac1.text(RELATIONS)


def test_rule_ids_of_rules_without_constants_are_unchanged() -> None:
    # the id scheme of every rule mined before constants existed (a pinned value)
    assert rule_id(Rule.path(1, [(0, False)])) == rule_id(Rule.path(1, [(0, False)], support=3))
    payload = json.dumps([[1, 0, 1], [[0, 0, 1]], False, []])
    import hashlib

    assert (
        rule_id(Rule.path(1, [(0, False)])) == "R" + hashlib.sha1(payload.encode()).hexdigest()[:12]
    )


def test_rules_frame_round_trip_with_constants(tmp_path: Path) -> None:
    rules = all_rules()
    frame = rules_frame(rules, RELATIONS, ENTITIES)
    assert {"constants", "kind"} <= set(frame.columns)
    path = tmp_path / "rules.parquet"
    frame.to_parquet(path)
    back = frame_rules(pd.read_parquet(path))
    assert {r.key for r in back} == {r.key for r in rules}
    by_key = {r.key: r for r in back}
    zero = by_key[constant_rules()[4].key]
    assert zero.support == 3.0 and zero.confidence == 0.2
    assert rule_kinds(frame) == {"path": 1, "pair": 1, "ac1": 3, "ac2": 2, "zero": 2}


def test_frame_without_constants_has_no_new_columns() -> None:
    frame = rules_frame(all_rules()[:2], RELATIONS)
    assert "constants" not in frame.columns and "kind" not in frame.columns
    assert rule_kinds(frame) == {"path": 1, "pair": 1, "ac1": 0, "ac2": 0, "zero": 0}
    assert [r.key for r in frame_rules(frame)] == [r.key for r in all_rules()[:2]]


def test_bank_excludes_constant_rules() -> None:
    frame = rules_frame(all_rules(), RELATIONS, ENTITIES)
    bank = select_bank(frame, BankConfig(lengths=(0, 1, 2)))
    assert len(bank) == 2 and all(not r.constants for r in frame_rules(bank))
    # the same file as the bank of the rules without constants alone
    plain = rules_frame([r for r in all_rules() if r.constants == () and r.body], RELATIONS)
    pd.testing.assert_frame_equal(bank, select_bank(plain, BankConfig(lengths=(0, 1, 2))))


def test_stats_count_kinds_for_the_static_miner_and_rules_with_constants() -> None:
    frame = rules_frame(all_rules(), RELATIONS, ENTITIES)
    bank = select_bank(frame, BankConfig())
    facts = pd.DataFrame({"relation": [0, 1, 2, 3]})
    stats = describe_rules("toy", "static", frame, bank, facts)
    assert list(stats["rules_by_kind"]) == list(RULE_KINDS)
    assert stats["rules_by_kind"]["zero"] == 2 and stats["rules_by_length"]["0"] == 2
    # another miner counts kinds only when its rules have constants (stats.json unchanged)
    assert describe_rules("toy", "temporal", frame, bank, facts)["rules_by_kind"]["zero"] == 2
    plain = frame[frame["constants"] == "[]"].drop(columns=["constants", "kind"])
    assert "rules_by_kind" not in describe_rules("toy", "temporal", plain, bank, facts)


def test_amie_export_round_trip_with_constants(tmp_path: Path) -> None:
    rules = all_rules()
    path = tmp_path / "rules.tsv"
    write_amie_tsv(rules, path, RELATIONS, ENTITIES)
    text = path.read_text(encoding="utf-8")
    assert "?a  father of  bob   => ?a  gender  male" in text
    assert "   => France  nationality  ?b" in text
    relation_ids = {n: i for i, n in enumerate(RELATIONS)}
    entity_ids = {n: i for i, n in enumerate(ENTITIES)}
    back = read_amie_tsv(path, relation_ids, entity_ids=entity_ids)
    assert [r.key for r in back] == [r.key for r in rules]
    # without entity ids the constants cannot be read: an error naming the line, or skipped
    with pytest.raises(AmieFormatError, match="line 4"):
        read_amie_tsv(path, relation_ids)
    with pytest.warns(UserWarning, match="skipped 7"):
        assert len(read_amie_tsv(path, relation_ids, skip_unsupported=True)) == 2
    with pytest.raises(AmieFormatError, match="unknown entity 'bob'"):
        read_amie_tsv(path, relation_ids, entity_ids={"male": 0})
    with pytest.raises(ValueError, match="entity_names"):
        write_amie_tsv(rules, tmp_path / "x.tsv", RELATIONS)


def test_tlogic_refuses_constant_rules(tmp_path: Path) -> None:
    # r(X, c) <= s(X, c) has the shape of a one-atom path: only its constants tell it apart
    shared = constant_rules()[-1]
    with pytest.raises(ValueError, match="no constants"):
        rule_to_tlogic(shared, len(RELATIONS))
    with pytest.raises(ValueError, match="no constants"):
        write_tlogic_json([shared], tmp_path / "rules.json", len(RELATIONS))
