"""mine_rules' import path: rules written in AMIE's, TLogic's and AnyBURL's formats come back
intact."""

from __future__ import annotations

from pathlib import Path

import pytest

from rulerag.errors import InputError
from rulerag.rules.amie_io import write_amie_tsv
from rulerag.rules.anyburl_io import write_anyburl_rules
from rulerag.rules.mining import import_rules
from rulerag.rules.rule import Rule
from rulerag.rules.settings import RuleImport, mine_rules_settings
from rulerag.rules.tlogic_io import write_tlogic_json
from rulerag.settings import SettingsError

KEYS = ["concept:bornin", "concept:livesin", "concept:worksin"]


def test_amie_import(tmp_path: Path) -> None:
    rules = [
        Rule.path(
            1,
            [(0, False)],
            support=120,
            head_coverage=0.5,
            std_confidence=0.4,
            pca_confidence=0.6,
            body_support=300,
            pca_body_support=200,
        ),
        Rule.path(
            2,
            [(0, False), (1, True)],
            support=110,
            head_coverage=0.2,
            std_confidence=0.3,
            pca_confidence=0.35,
            body_support=366,
            pca_body_support=314,
        ),
    ]
    path = tmp_path / "rules.tsv"
    write_amie_tsv(rules, path, KEYS)
    back = import_rules(
        RuleImport(format="amie", path=str(path)), {k: i for i, k in enumerate(KEYS)}, 3
    )
    assert {r.key for r in back} == {r.key for r in rules}


def test_tlogic_import(tmp_path: Path) -> None:
    rules = [
        Rule.path(1, [(0, False)], temporal=True, support=5, body_support=10, confidence=0.5),
        Rule.path(
            2, [(0, True), (1, False)], temporal=True, support=2, body_support=8, confidence=0.25
        ),
    ]
    path = tmp_path / "rules.json"
    write_tlogic_json(rules, path, 3)
    back = import_rules(RuleImport(format="tlogic", path=str(path)), {}, 3)
    assert {r.key for r in back} == {r.key for r in rules}


def test_anyburl_import(tmp_path: Path) -> None:
    entities = ["/m/a", "/m/b", "/m/c"]
    rules = [
        Rule.path(1, [(0, False), (2, True)], support=3, body_support=9),
        Rule.with_constant(0, 2, body=(1, False), body_constant=1, support=4, body_support=5),
        Rule.with_constant(2, 0, constant_is_subject=True, support=6, body_support=60),
    ]
    path = tmp_path / "rules-1000"
    write_anyburl_rules(rules, path, KEYS, entities, kinds=("path", "ac1", "zero"))
    spec = RuleImport(format="anyburl", path=str(path))
    relation_keys = {k: i for i, k in enumerate(KEYS)}
    entity_keys = {k: i for i, k in enumerate(entities)}
    back = import_rules(spec, relation_keys, 3, entity_keys)
    assert [r.key for r in back] == [r.key for r in rules]
    assert back[1].confidence == pytest.approx(4 / 10)
    with path.open("a") as handle:  # a rule learned with AnyBURL's REWRITE_REFLEXIV
        handle.write("9\t3\t0.3\tconcept:bornin(X,me_myself_i) <= concept:livesin(X,/m/a)\n")
    with pytest.raises(InputError, match=r"reflexive.*1.*skip_unsupported"):
        import_rules(spec, relation_keys, 3, entity_keys)
    skipping = RuleImport(format="anyburl", path=str(path), skip_unsupported=True)
    assert len(import_rules(skipping, relation_keys, 3, entity_keys)) == 3
    with pytest.raises(InputError, match=r"not an AnyBURL rule file.*line 2: '/m/b' is not a name"):
        import_rules(skipping, relation_keys, 3, {})


def test_unknown_format_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        SettingsError, match=r"import\.x\.format: Input should be 'amie', 'tlogic' or 'anyburl'"
    ):
        mine_rules_settings({"import": {"x": {"format": "safran", "path": str(tmp_path)}}})
