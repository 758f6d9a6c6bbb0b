"""The temporal miner on ICEWS14 from the local mirror: one-atom rules for most relations,
sane statistics for every rule, and TLogic's JSON holding the real rule set unchanged."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from rulerag.kg.registry import DATASETS
from rulerag.kg.schema import KnowledgeGraph
from rulerag.rules.settings import TemporalMinerSettings
from rulerag.rules.temporal_miner import mine_temporal
from rulerag.rules.tlogic_io import read_tlogic_json, write_tlogic_json

pytestmark = pytest.mark.data


@pytest.fixture(scope="module")
def icews14(kg_mirror: Path) -> KnowledgeGraph:
    spec = DATASETS["icews14"]
    return spec.sources[0].reader(kg_mirror / spec.mirror_dir)


@pytest.fixture(scope="module")
def rules(icews14: KnowledgeGraph):
    train = icews14.split("train")
    # TLogic's defaults for ICEWS14 in the RuleRAG setting; ~8 s on two cores
    return mine_temporal(
        train,
        len(icews14.entities),
        len(icews14.relations),
        TemporalMinerSettings(lengths=(1, 2, 3)),
        progress=False,
    )


def test_one_atom_rules_for_most_relations(icews14: KnowledgeGraph, rules):
    with_facts = set(icews14.split("train")["relation"].unique().tolist())
    heads = {r.head.relation for r in rules if r.length == 1}
    assert heads <= with_facts
    assert len(heads) >= 0.8 * len(with_facts)  # 207 of 222 with seed 12


def test_statistics_are_tlogic_like(icews14: KnowledgeGraph, rules):
    n = len(icews14.relations)
    by_length = Counter(r.length for r in rules)
    assert set(by_length) == {1, 2, 3} and all(v > 1000 for v in by_length.values())
    for rule in rules:
        assert rule.temporal
        assert 0 < rule.confidence <= 1
        assert 1 <= rule.support <= rule.body_support <= 500
        assert rule.confidence == round(rule.support / rule.body_support, 6)
        assert all(0 <= a.relation < n for a in (rule.head, *rule.body))


def test_real_rules_survive_tlogic_json(tmp_path: Path, icews14: KnowledgeGraph, rules):
    path = tmp_path / "icews14_rules.json"
    n = len(icews14.relations)
    write_tlogic_json(rules, path, n)
    assert read_tlogic_json(path, n) == rules
