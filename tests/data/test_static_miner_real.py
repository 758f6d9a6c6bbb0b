"""The static miner on FB15k-237 and NELL-995 from the local mirror: rules come out, their
statistics are consistent and re-count exactly with pandas joins, and their text is readable."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rulerag.kg.registry import DATASETS
from rulerag.rules.amie_io import read_amie_tsv, write_amie_tsv
from rulerag.rules.rule import Rule
from rulerag.rules.settings import StaticMinerSettings
from rulerag.rules.static_miner import mine_static

pytestmark = pytest.mark.data

DATASET_NAMES = ("fb15k237", "nell995")


@pytest.fixture(scope="module", params=DATASET_NAMES)
def mined(request: pytest.FixtureRequest, kg_mirror: Path) -> tuple:
    spec = DATASETS[request.param]
    kg = spec.sources[0].reader(kg_mirror / spec.mirror_dir)
    train = kg.split("train")[["head", "relation", "tail"]].drop_duplicates()
    rules = mine_static(train, len(kg.entities), len(kg.relations), progress=False)
    names = kg.relations.set_index("id")["name"].to_dict()
    keys = kg.relations.set_index("id")["key"].to_dict()
    return request.param, train, rules, names, keys


def _body_pairs(train: pd.DataFrame, rule: Rule) -> pd.DataFrame:
    """Distinct (v0, v_last) bindings of the body, by pandas joins over the facts."""
    frames = []
    for atom in rule.body:
        f = train[train["relation"] == atom.relation]
        frames.append(
            pd.DataFrame(
                {f"v{atom.subject}": f["head"].values, f"v{atom.object}": f["tail"].values}
            )
        )
    joined = frames[0]
    for frame in frames[1:]:
        joined = joined.merge(frame, on=sorted(set(joined.columns) & set(frame.columns)))
    last = f"v{rule.head.object}"
    return joined[["v0", last]].drop_duplicates().rename(columns={"v0": "x", last: "y"})


def test_rules_exist_with_valid_statistics(mined: tuple) -> None:
    name, train, rules, _names, _keys = mined
    assert len(rules) > 100, name
    assert {r.length for r in rules} == {1, 2}
    assert any(r.head.object == 2 for r in rules)  # paths
    defaults = StaticMinerSettings()  # AMIE 3's: head coverage prunes, no support floor
    head_sizes = train["relation"].value_counts()
    for r in rules:
        assert r.support >= max(defaults.min_support, 1)
        assert r.support >= defaults.min_head_coverage * head_sizes[r.head.relation] - 1e-9
        for value in (r.head_coverage, r.std_confidence, r.pca_confidence):
            assert 0.0 <= value <= 1.0
        assert r.head_coverage >= 0.01 - 1e-12
        assert r.pca_confidence >= 0.1
        assert r.support <= r.pca_body_support <= r.body_support
        assert r.extra["functional_variable"] in ("subject", "object")
    heads = [r.head.relation for r in rules]
    assert heads == sorted(heads)


def test_statistics_recount_with_pandas(mined: tuple) -> None:
    _name, train, rules, _names, _keys = mined
    rng = np.random.default_rng(0)
    for i in rng.choice(len(rules), size=min(25, len(rules)), replace=False):
        rule = rules[int(i)]
        body = _body_pairs(train, rule)
        head = train[train["relation"] == rule.head.relation][["head", "tail"]]
        head = head.rename(columns={"head": "x", "tail": "y"})
        support = len(body.merge(head, on=["x", "y"]))
        side = "x" if rule.extra["functional_variable"] == "subject" else "y"
        pca_body = body[body[side].isin(head[side])]
        assert rule.support == support, rule
        assert rule.body_support == len(body), rule
        assert rule.pca_body_support == len(pca_body), rule
        assert rule.head_coverage == pytest.approx(support / len(head))


def test_text_is_readable(mined: tuple) -> None:
    name, _train, rules, names, _keys = mined
    for rule in rules[:: max(1, len(rules) // 50)]:
        text = rule.text(names)
        assert " leads to [Entity1, " in text
        assert text.startswith("[Entity")
        assert "concept:" not in text and "/m/" not in text, text
        # relation names are words, not ids or Freebase paths
        for atom in (*rule.body, rule.head):
            label = names[atom.relation]
            assert label.strip() and not label.isdigit() and not label.startswith("/"), label


def test_two_atom_mode_is_the_one_atom_subset(mined: tuple) -> None:
    name, train, rules, _names, _keys = mined
    n_entities = int(max(train["head"].max(), train["tail"].max())) + 1
    n_relations = int(train["relation"].max()) + 1
    short = mine_static(
        train, n_entities, n_relations, StaticMinerSettings(max_atoms=2), progress=False
    )
    assert [r.key for r in short] == [r.key for r in rules if r.length == 1], name


def test_amie_tsv_round_trip_with_source_keys(mined: tuple, tmp_path: Path) -> None:
    """Written with the relation keys of the source files (what AMIE would have been fed)."""
    _name, _train, rules, names, keys = mined
    path = tmp_path / "rules.tsv"
    write_amie_tsv(rules, path, keys)
    back = read_amie_tsv(path, {key: i for i, key in keys.items()})
    assert [r.key for r in back] == [r.key for r in rules]
    assert [r.support for r in back] == [r.support for r in rules]
    write_amie_tsv(rules, path, names)  # readable names (single spaces) work as well
    back = read_amie_tsv(path, {name: i for i, name in names.items()})
    assert [r.key for r in back] == [r.key for r in rules]
