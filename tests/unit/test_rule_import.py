"""mine_rules' import path: rules written in AMIE's and TLogic's formats come back intact."""

from __future__ import annotations

from pathlib import Path

import pytest

from rulerag.rules.amie_io import write_amie_tsv
from rulerag.rules.mining import RuleImport, import_rules, mine_rules_settings
from rulerag.rules.rule import Rule
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


def test_unknown_format_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"import\.x\.format: Input should be 'amie' or"):
        mine_rules_settings({"import": {"x": {"format": "anyburl", "path": str(tmp_path)}}})
