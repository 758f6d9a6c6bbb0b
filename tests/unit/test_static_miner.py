"""The static miner (AMIE 3 semantics) against a brute-force count with Python sets, planted
rules, thresholds, edge cases, determinism, and AMIE's TSV rule format."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rulerag.orchestration.project_copy import kg_mirror_dir
from rulerag.rules.amie_io import AmieFormatError, read_amie_tsv, write_amie_tsv
from rulerag.rules.rule import Atom, Rule
from rulerag.rules.settings import StaticMinerSettings
from rulerag.rules.static_miner import mine_static
from tests.support.planted_static import PlantSpec, make_planted_kg

SAMPLE = kg_mirror_dir() / "amie_output_sample.tsv"


def random_kg(seed: int, n: int = 18, n_rel: int = 4, facts: int = 45) -> pd.DataFrame:
    """A small dense random KG (duplicates and self-loops included on purpose)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "head": rng.integers(0, n, n_rel * facts),
            "relation": rng.integers(0, n_rel, n_rel * facts),
            "tail": rng.integers(0, n, n_rel * facts),
        }
    )


def _walk(rel_pairs: dict[int, set], code: int) -> set[tuple[int, int]]:
    rel, inverse = divmod(code, 2)
    return {(b, a) if inverse else (a, b) for a, b in rel_pairs[rel]}


def _atom(code: int, s: int, o: int) -> Atom:
    rel, inverse = divmod(code, 2)
    return Atom(rel, o, s) if inverse else Atom(rel, s, o)


def brute_force(facts: pd.DataFrame, n_rel: int, max_atoms: int = 3, **thr) -> dict:
    """Every closed rule of up to `max_atoms` atoms with its (support, body, PCA body, side),
    enumerated and counted naively, filtered by the thresholds as the miner documents them."""
    rel_pairs: dict[int, set] = defaultdict(set)
    for h, r, t in facts[["head", "relation", "tail"]].itertuples(index=False):
        rel_pairs[int(r)].add((int(h), int(t)))
    codes = range(2 * n_rel)
    out = {}
    for r in range(n_rel):
        head = rel_pairs[r]
        m = len(head)
        if m == 0 or m < thr["min_initial_support"]:
            continue
        subj, obj = {x for x, _ in head}, {y for _, y in head}
        on_subject = len(subj) >= len(obj)

        bodies: dict[tuple, set] = {}
        for c in codes:
            if c != 2 * r:
                bodies[(Atom(r, 0, 1), (_atom(c, 0, 1),))] = _walk(rel_pairs, c)
        if max_atoms >= 3:
            for c1 in codes:
                for c2 in codes:
                    if c1 < c2 and 2 * r not in (c1, c2):
                        pairs = _walk(rel_pairs, c1) & _walk(rel_pairs, c2)
                        bodies[(Atom(r, 0, 1), (_atom(c1, 0, 1), _atom(c2, 0, 1)))] = pairs
                    first, second = _walk(rel_pairs, c1), _walk(rel_pairs, c2)
                    path = {(x, y) for x, z in first for z2, y in second if z == z2}
                    bodies[(Atom(r, 0, 2), (_atom(c1, 0, 1), _atom(c2, 1, 2)))] = path

        stats = {}
        for key, body in bodies.items():
            support = len(body & head)
            pca_body = {(x, y) for x, y in body if (x in subj if on_subject else y in obj)}
            if support == 0:
                continue
            stats[key] = (support, len(body), len(pca_body))
        for key, (support, body, pca_body) in stats.items():
            pca, std = support / pca_body, support / body
            if (
                support < thr["min_support"]
                or support / m < thr["min_head_coverage"] - 1e-12
                or pca < thr["min_pca_confidence"]
                or std < thr["min_std_confidence"]
            ):
                continue
            atoms = key[1]
            if thr["skyline"] and len(atoms) == 2 and key[0].object == 1:
                parents = [(key[0], (a,)) for a in atoms]
                if any(pca <= stats[p][0] / stats[p][2] for p in parents if p in stats):
                    continue
            out[key] = (support, body, pca_body, "subject" if on_subject else "object", m)
    return out


THRESHOLDS = [
    dict(min_support=2, min_head_coverage=0.05, min_pca_confidence=0.05, min_std_confidence=0.0),
    dict(min_support=0, min_head_coverage=0.2, min_pca_confidence=0.2, min_std_confidence=0.1),
    dict(min_support=4, min_head_coverage=0.0, min_pca_confidence=0.0, min_std_confidence=0.0),
]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("thr_index", range(len(THRESHOLDS)))
@pytest.mark.parametrize("skyline", [True, False])
def test_equals_brute_force(seed: int, thr_index: int, skyline: bool) -> None:
    facts = random_kg(seed)
    thr = dict(THRESHOLDS[thr_index], min_initial_support=0, skyline=skyline)
    rules = mine_static(facts, 18, 4, StaticMinerSettings(**thr), progress=False)
    expected = brute_force(facts, 4, **thr)
    assert {(r.head, r.body) for r in rules} == set(expected)
    assert len(rules) == len(expected)  # no duplicates
    for rule in rules:
        support, body, pca_body, side, m = expected[(rule.head, rule.body)]
        assert rule.support == support
        assert rule.body_support == body
        assert rule.pca_body_support == pca_body
        assert rule.head_coverage == pytest.approx(support / m)
        assert rule.std_confidence == pytest.approx(support / body)
        assert rule.pca_confidence == pytest.approx(support / pca_body)
        assert rule.extra["functional_variable"] == side
        assert rule.confidence is None
    assert len(rules) > 0 or thr_index == 1


def test_max_atoms_two_equals_brute_force() -> None:
    facts = random_kg(11)
    thr = dict(THRESHOLDS[0], min_initial_support=0, skyline=True)
    rules = mine_static(facts, 18, 4, StaticMinerSettings(max_atoms=2, **thr), progress=False)
    expected = brute_force(facts, 4, max_atoms=2, **thr)
    assert rules
    assert {(r.head, r.body) for r in rules} == set(expected)
    assert all(r.length == 1 for r in rules)


def test_planted_rules_come_out_on_top_with_their_confidence() -> None:
    kg = make_planted_kg()
    rules = mine_static(kg.facts, kg.n_entities, kg.n_relations, progress=False)
    assert rules
    by_head: dict[int, list[Rule]] = defaultdict(list)
    for rule in rules:
        by_head[rule.head.relation].append(rule)
    for planted in kg.planted:
        top = by_head.get(planted.rule.head.relation, [])
        if planted.confidence < 0.1:  # below the default PCA threshold: must not be kept
            assert all(r.key != planted.rule.key for r in rules)
            continue
        assert top and top[0].key == planted.rule.key, planted.rule.text(kg.relation_names)
        assert abs(top[0].pca_confidence - planted.confidence) <= planted.tolerance()
        assert abs(top[0].std_confidence - planted.confidence) <= planted.tolerance()
    # nothing from the noise relations reaches support 100
    noise = set(range(5))
    assert all(r.head.relation not in noise for r in rules)


@pytest.mark.parametrize("seed", [1, 2])
def test_planted_confidence_many_seeds(seed: int) -> None:
    specs = [PlantSpec("path", 0.3, n_body=800), PlantSpec("inverse", 0.9, n_body=300)]
    kg = make_planted_kg(specs, n_entities=3000, seed=seed)
    rules = mine_static(kg.facts, kg.n_entities, kg.n_relations, progress=False)
    for planted in kg.planted:
        found = [r for r in rules if r.key == planted.rule.key]
        assert len(found) == 1
        assert abs(found[0].pca_confidence - planted.confidence) <= planted.tolerance()


def test_thresholds_are_respected() -> None:
    facts = random_kg(3, n=40, n_rel=5, facts=120)
    heads = facts.drop_duplicates().groupby("relation").size()
    settings = StaticMinerSettings(
        min_support=3, min_head_coverage=0.03, min_pca_confidence=0.15, min_initial_support=0,
        min_std_confidence=0.05,
    )  # fmt: skip
    rules = mine_static(facts, 40, 5, settings, progress=False)
    assert rules
    for r in rules:
        assert r.support >= 3
        assert r.head_coverage >= 0.03 - 1e-12
        assert r.support / heads[r.head.relation] == pytest.approx(r.head_coverage)
        assert r.pca_confidence >= 0.15
        assert r.std_confidence >= 0.05
        assert 0 < r.std_confidence <= r.pca_confidence <= 1


def test_min_initial_support_skips_small_heads() -> None:
    facts = random_kg(4)
    sizes = facts.drop_duplicates().groupby("relation").size()
    cut = int(sizes.median())
    rules = mine_static(
        facts,
        18,
        4,
        StaticMinerSettings(min_support=1, min_initial_support=cut, min_head_coverage=0),
        progress=False,
    )
    assert rules
    assert all(sizes[r.head.relation] >= cut for r in rules)


def test_deterministic_and_order() -> None:
    facts = random_kg(5)
    kw = dict(settings=StaticMinerSettings(min_support=2, min_initial_support=0), progress=False)
    first = mine_static(facts, 18, 4, **kw)
    shuffled = facts.sample(frac=1.0, random_state=1).reset_index(drop=True)
    second = mine_static(shuffled, 18, 4, **kw)
    assert first == second
    keys = [(r.head.relation, -r.pca_confidence) for r in first]
    assert keys == sorted(keys)


def test_edge_cases() -> None:
    kw = dict(settings=StaticMinerSettings(min_support=1, min_initial_support=0), progress=False)
    empty = pd.DataFrame({"head": [], "relation": [], "tail": []}, dtype="int64")
    assert mine_static(empty, 5, 3, **kw) == []
    # a relation with no facts (relation 1) and one relation only
    one = pd.DataFrame({"head": [0, 1, 2, 1], "relation": [0, 0, 0, 0], "tail": [1, 2, 0, 0]})
    rules = mine_static(one, 3, 2, **kw)
    assert rules and all(r.head.relation == 0 for r in rules)
    assert all(a.relation == 0 for r in rules for a in r.body)
    # symmetric closure: r(y, x) => r(x, y) is found, r(x, y) => r(x, y) never is
    keys = {(r.head, r.body) for r in rules}
    assert (Atom(0, 0, 1), (Atom(0, 1, 0),)) in keys
    assert all(r.body != (r.head,) for r in rules)
    # no rule above the thresholds: an empty result, not an error
    assert mine_static(random_kg(0), 18, 4, progress=False) == []
    with pytest.raises(ValueError, match="max_atoms"):
        mine_static(one, 3, 2, StaticMinerSettings(max_atoms=4))
    with pytest.raises(ValueError, match="outside"):
        mine_static(one, 2, 2)


def test_functional_variable_is_the_object_for_inverse_functional_heads() -> None:
    # head 0 maps many subjects onto few objects? no: few subjects, many objects -> object side
    facts = pd.DataFrame(
        {
            "head": [0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 5],
            "relation": [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1],
            "tail": [2, 3, 4, 5, 6, 7, 2, 3, 4, 6, 7, 9, 3],
        }
    )
    rules = mine_static(
        facts,
        10,
        2,
        StaticMinerSettings(max_atoms=2, min_support=1, min_initial_support=0),
        progress=False,
    )
    (rule,) = [r for r in rules if r.head.relation == 0 and r.body == (Atom(1, 0, 1),)]
    assert rule.extra["functional_variable"] == "object"
    # body pairs of relation 1 whose object has some relation-0 fact: 2, 3, 4, 6, 7, 3
    assert rule.pca_body_support == 6
    assert rule.support == 4


# -- AMIE TSV interop -------------------------------------------------------------------------


def test_amie_tsv_round_trip(tmp_path: Path) -> None:
    facts = random_kg(2)
    rules = mine_static(
        facts, 18, 4, StaticMinerSettings(min_support=2, min_initial_support=0), progress=False
    )
    assert any(r.length == 2 and r.head.object == 2 for r in rules)  # paths
    assert any(r.length == 2 and r.head.object == 1 for r in rules)  # parallel
    names = [f"<rel_{i}>" for i in range(4)]
    path = tmp_path / "rules.tsv"
    write_amie_tsv(rules, path, names)
    back = read_amie_tsv(path, {name: i for i, name in enumerate(names)})
    assert [r.key for r in back] == [r.key for r in rules]
    for a, b in zip(rules, back, strict=True):
        assert b.support == a.support
        assert b.body_support == a.body_support
        assert b.pca_body_support == a.pca_body_support
        assert b.pca_confidence == pytest.approx(a.pca_confidence, abs=1e-9)
        assert b.head_coverage == pytest.approx(a.head_coverage, abs=1e-9)
        assert b.extra["functional_variable"] == a.extra["functional_variable"]
    # names without brackets resolve too (AMIE keeps whatever the input TSV had)
    plain = read_amie_tsv(path, {f"rel_{i}": i for i in range(4)})
    assert [r.key for r in plain] == [r.key for r in rules]


def test_amie_tsv_reads_amie_variables_and_order(tmp_path: Path) -> None:
    text = (
        "Using HeadCoverage as pruning metric with minimum threshold 0.01\n"
        "Rule\tHead Coverage\tStd Confidence\tPCA Confidence\tPositive Examples\tBody size"
        "\tPCA Body size\tFunctional variable\n"
        "?e  <livesIn>  ?b  ?a  <isMarriedTo>  ?e   => ?a  <livesIn>  ?b"
        "\t0.25\t.5\t0.75\t30\t60\t40\t?a\n"
        "?b  <isMarriedTo>  ?a   => ?a  <isMarriedTo>  ?b\t0.9\t0.9\t0.95\t90\t100\t95\t?b\n"
        "?a  <livesIn>  ?b  ?b  <isMarriedTo>  ?a   => ?a  <wasBornIn>  ?b"
        "\t0.1\t0.2\t0.3\t10\t50\t33\t?a\n"
        "Mining done in 1.2 s\n"
    )
    path = tmp_path / "amie.tsv"
    path.write_text(text)
    ids = {"livesIn": 0, "isMarriedTo": 1, "wasBornIn": 2}
    rules = read_amie_tsv(path, ids)
    assert len(rules) == 3
    # the path is renumbered along x - z - y and ordered from the head's subject
    assert rules[0].key == Rule.path(0, [(1, False), (0, False)]).key
    assert rules[0].std_confidence == 0.5 and rules[0].support == 30
    assert rules[1].key == Rule.path(1, [(1, True)]).key
    assert rules[1].extra["functional_variable"] == "object"
    assert rules[2].head == Atom(2, 0, 1)
    assert rules[2].body == (Atom(0, 0, 1), Atom(1, 1, 0))
    with pytest.raises(AmieFormatError, match=r"line 3.*'<isMarriedTo>'"):
        read_amie_tsv(path, {"livesIn": 0, "wasBornIn": 2})


def test_amie_tsv_reads_datalog_notation(tmp_path: Path) -> None:
    path = tmp_path / "datalog.tsv"
    path.write_text(
        "Rule\tHead Coverage\tStd Confidence\tPCA Confidence\tPositive Examples\tBody size"
        "\tPCA Body size\tFunctional variable\n"
        "livesIn(?a,?f) isLocatedIn(?f,?b)  => livesIn(?a,?b)\t0.2\t0.3\t0.4\t20\t66\t50\t?a\n"
    )
    (rule,) = read_amie_tsv(path, {"livesIn": 0, "isLocatedIn": 1})
    assert rule.key == Rule.path(0, [(0, False), (1, False)]).key


def test_amie_sample_file() -> None:
    if not SAMPLE.is_file():
        pytest.skip(f"no AMIE sample at {SAMPLE}")
    ids = {name: i for i, name in enumerate(["p1", "p2", "p3", "p4", "equals"])}
    # the sample mines conditional keys: every rule binds constants, which Rule cannot hold
    with pytest.raises(AmieFormatError, match=r"line 15.*constant 'c2'"):
        read_amie_tsv(SAMPLE, ids)
    with pytest.warns(UserWarning, match="skipped 14"):
        assert read_amie_tsv(SAMPLE, ids, skip_unsupported=True) == []
    with pytest.raises(AmieFormatError, match=r"line 15.*relation 'p3'"):
        read_amie_tsv(SAMPLE, {"equals": 0}, skip_unsupported=True)


def test_amie_tsv_rejects_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text("Rule\tHead Coverage\n?a  r  => ?a  r  ?b\t0.1\n")
    with pytest.raises(AmieFormatError, match="line 2"):
        read_amie_tsv(path, {"r": 0})
    with pytest.raises(ValueError, match="whitespace"):
        write_amie_tsv([Rule.path(0, [(0, True)])], tmp_path / "x.tsv", ["two  spaces"])


def test_path_support_in_small_chunks_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    import rulerag.rules.static_miner as miner

    facts = random_kg(7)
    kw = dict(settings=StaticMinerSettings(min_support=2, min_initial_support=0), progress=False)
    whole = mine_static(facts, 18, 4, **kw)
    monkeypatch.setattr(miner, "_FRONTIER_CHUNK", 7)
    assert mine_static(facts, 18, 4, **kw) == whole


def test_amie_tsv_without_header_or_stats(tmp_path: Path) -> None:
    path = tmp_path / "bare.txt"
    path.write_text("?b  r  ?a   => ?a  s  ?b\n?a  r  ?e  ?e  r  ?b   => ?a  s  ?b\n")
    rules = read_amie_tsv(path, {"r": 0, "s": 1})
    assert [r.key for r in rules] == [
        Rule.path(1, [(0, True)]).key,
        Rule.path(1, [(0, False), (0, False)]).key,
    ]
    assert rules[0].support is None and rules[0].extra == {}


def test_the_miners_take_their_settings_object_not_its_fields() -> None:
    """mine_static / mine_temporal take `mine_rules.static` / `.temporal` whole: no keyword
    re-declares one of their fields (and its default), and `mine` hands them over as read."""
    import dataclasses
    import inspect

    from rulerag.rules.mining import mine
    from rulerag.rules.settings import MineRulesSettings, TemporalMinerSettings
    from rulerag.rules.temporal_miner import mine_temporal

    for function, settings in (
        (mine_static, StaticMinerSettings),
        (mine_temporal, TemporalMinerSettings),
    ):
        keywords = set(inspect.signature(function).parameters)
        assert not keywords & {f.name for f in dataclasses.fields(settings)}, function.__name__
    facts = random_kg(5)
    static = StaticMinerSettings(min_support=2, min_initial_support=0)
    mined = mine(facts, 18, 4, False, MineRulesSettings(static=static))
    assert mined == mine_static(facts, 18, 4, static, progress=False)
