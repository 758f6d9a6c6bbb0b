"""The TLogic-style temporal miner: planted rules come back with their confidence, exact mode
equals a brute-force count, walks and samples follow TLogic's distributions (checked against a
plain one-edge-at-a-time port of TLogic's logic), no body fact is at or after the head's time,
results are deterministic, edge cases work, and TLogic's rules JSON round-trips."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rulerag.kg.schema import make_facts
from rulerag.rules import temporal_miner
from rulerag.rules.rule import Atom, Rule
from rulerag.rules.settings import TemporalMinerSettings
from rulerag.rules.temporal_miner import (
    _sample_bodies,
    build_temporal_graph,
    mine_temporal,
    sample_walks,
    walk_rules,
    walk_uniforms,
)
from rulerag.rules.tlogic_io import (
    read_tlogic_json,
    rule_from_tlogic,
    rule_to_tlogic,
    write_tlogic_json,
)
from tests.support.planted_temporal import planted_temporal_kg

# ---------------------------------------------------------------------------------------------
# helpers: random KGs and a plain reference of TLogic's semantics


def random_kg(
    seed: int, n_entities: int = 12, n_relations: int = 3, n_facts: int = 60, n_times: int = 8
) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    facts = make_facts(
        rng.integers(0, n_entities, n_facts).tolist(),
        rng.integers(0, n_relations, n_facts).tolist(),
        rng.integers(0, n_entities, n_facts).tolist(),
        rng.integers(0, n_times, n_facts).tolist(),
        ["train"] * n_facts,
    )
    return facts.drop_duplicates(["head", "relation", "tail", "time"], ignore_index=True)


def quads(facts: pd.DataFrame, n_relations: int) -> np.ndarray:
    """Facts plus inverse quadruples, as TLogic's Grapher builds them."""
    q = facts[["head", "relation", "tail", "time"]].to_numpy(dtype=np.int64)
    inv = np.column_stack([q[:, 2], q[:, 1] + n_relations, q[:, 0], q[:, 3]])
    return np.vstack([q, inv])


def constraints(entities: list[int]) -> list[list[int]]:
    groups: dict[int, list[int]] = defaultdict(list)
    for i, e in enumerate(entities):
        groups[e].append(i)
    return sorted(g for g in groups.values() if len(g) > 1)


def ref_walk_distribution(
    q: np.ndarray, n_rel: int, length: int, rel: int, transition: str
) -> dict:
    """Exact probability of each rule (and of failing) for one TLogic walk, by enumerating
    every walk with TLogic's sample_walk / transition_step semantics, edge by edge."""
    dist: dict = defaultdict(float)

    def extend(walk: list, prob: float) -> None:
        step, prev = len(walk), walk[-1]
        if step == length + 1:
            dist[ref_rule_key(walk, n_rel)] += prob
            return
        cur, ts = prev[2], prev[3]
        nb = q[q[:, 0] == cur]
        if step == 1:
            cand = nb[nb[:, 3] < ts]
        else:
            cand = nb[nb[:, 3] <= ts]
            inv = [cur, (prev[1] + n_rel) % (2 * n_rel), prev[0], ts]
            cand = cand[~np.all(cand == inv, axis=1)]
        if step == length:
            cand = cand[cand[:, 2] == walk[0][0]]
        if not len(cand):
            dist["fail"] += prob
            return
        p = np.exp(cand[:, 3] - ts).astype(float) if transition == "exp" else np.ones(len(cand))
        p = p / p.sum() if p.sum() > 0 else np.full(len(cand), 1 / len(cand))
        for edge, pe in zip(cand, p, strict=True):
            extend([*walk, edge], prob * pe)

    starts = q[q[:, 1] == rel]
    for edge in starts:
        extend([edge], 1 / len(starts))
    return dist


def ref_rule_key(walk: list, n_rel: int) -> tuple:
    """TLogic's create_rule for an edge-list walk, as our Rule key."""
    body = [int((e[1] + n_rel) % (2 * n_rel)) for e in walk[1:][::-1]]
    ents = [int(e[2]) for e in walk[::-1]]
    return rule_from_tlogic(int(walk[0][1]), body, constraints(ents), n_rel).key


def ref_body_distribution(q: np.ndarray, body_rels: list[int]) -> dict:
    """Exact probability of each sampled body (and of failing) under TLogic's sample_body:
    a uniform first edge, then uniform among the next relation's later-or-equal edges."""
    dist: dict = defaultdict(float)

    def extend(ents: list[int], tss: list[int], prob: float) -> None:
        if len(tss) == len(body_rels):
            dist[(tuple(ents), tuple(tss))] += prob
            return
        rel = body_rels[len(tss)]
        cand = q[(q[:, 1] == rel) & (q[:, 0] == ents[-1]) & (q[:, 3] >= tss[-1])]
        if not len(cand):
            dist["fail"] += prob
        for e in cand:
            extend([*ents, int(e[2])], [*tss, int(e[3])], prob / len(cand))

    first = q[q[:, 1] == body_rels[0]]
    for e in first:
        extend([int(e[0]), int(e[2])], [int(e[3])], 1 / len(first))
    return dist


def brute_force(facts: pd.DataFrame, rule: Rule) -> tuple[int, int]:
    """(body support, rule support) of a Rule by enumerating every body grounding in time order
    over the plain facts, straight from the rule's atoms (no inverse ids, no TLogic code)."""
    by_rel = defaultdict(list)
    for s, r, o, t in facts[["head", "relation", "tail", "time"]].itertuples(index=False):
        by_rel[int(r)].append((int(s), int(o), int(t)))
    found: set[tuple] = set()

    def extend(i: int, binding: dict[int, int], times: list[int]) -> None:
        if i == rule.length:
            found.add((tuple(binding[v] for v in range(rule.length + 1)), tuple(times)))
            return
        atom = rule.body[i]
        for s, o, t in by_rel[atom.relation]:
            if times and t < times[-1]:
                continue
            if binding.get(atom.subject, s) != s or binding.get(atom.object, o) != o:
                continue
            if atom.subject == atom.object and s != o:
                continue
            extend(i + 1, {**binding, atom.subject: s, atom.object: o}, [*times, t])

    extend(0, {}, [])
    wanted = [list(g) for g in rule.var_constraints]
    bodies = [b for b in found if not wanted or constraints(list(b[0])) == wanted]
    heads = defaultdict(list)
    for s, o, t in by_rel[rule.head.relation]:
        heads[(s, o)].append(t)
    supported = [b for b in bodies if any(t > b[1][-1] for t in heads[(b[0][0], b[0][-1])])]
    return len(bodies), len(supported)


def all_walk_rules(facts: pd.DataFrame, n_rel: int, length: int) -> set[tuple]:
    """Every rule some TLogic walk of this length can produce (enumerating all walks)."""
    q = [tuple(int(v) for v in row) for row in quads(facts, n_rel)]
    out_edges = defaultdict(list)
    for e in q:
        out_edges[e[0]].append(e)
    keys = set()

    def extend(walk: list) -> None:
        step, prev = len(walk), walk[-1]
        if step == length + 1:
            keys.add(ref_rule_key(walk, n_rel))
            return
        for e in out_edges[prev[2]]:
            if step == 1 and not e[3] < prev[3]:
                continue
            if step > 1 and (e[3] > prev[3] or e == (prev[2], (prev[1] + n_rel) % (2 * n_rel),
                                                     prev[0], prev[3])):  # fmt: skip
                continue
            if step == length and e[2] != walk[0][0]:
                continue
            extend([*walk, e])

    for e in q:
        extend([e])
    return keys


def total_variation(counts: Counter, dist: dict) -> float:
    """Total variation distance between observed counts and an exact distribution."""
    n = sum(counts.values())
    return 0.5 * sum(abs(counts.get(k, 0) / n - dist.get(k, 0.0)) for k in set(counts) | set(dist))


# ---------------------------------------------------------------------------------------------
# planted rules


@pytest.fixture(scope="module")
def planted():
    return planted_temporal_kg(seed=3)


@pytest.mark.parametrize("transition", ["exp", "unif"])
def test_planted_rules_come_out_on_top_with_their_confidence(planted, transition):
    rules = mine_temporal(
        planted.facts,
        planted.n_entities,
        planted.n_relations,
        TemporalMinerSettings(transition=transition, min_body_support=20),
        progress=False,
    )
    for p in planted.planted:
        for_head = [r for r in rules if r.head.relation == p.rule.head.relation]
        assert for_head and for_head[0].key == p.rule.key
        # sampled estimate from ~250 distinct bodies: sd about 0.03
        assert for_head[0].confidence == pytest.approx(p.confidence, abs=0.1)
        assert for_head[0].body_support <= 500


def test_planted_rules_exact_confidence(planted):
    rules = mine_temporal(
        planted.facts,
        planted.n_entities,
        planted.n_relations,
        TemporalMinerSettings(exact=True),
        progress=False,
    )
    by_key = {r.key: r for r in rules}
    for p in planted.planted:
        got = by_key[p.rule.key]
        assert got.body_support == p.body_groundings
        assert got.support == p.head_groundings
        assert got.confidence == pytest.approx(p.confidence, abs=1e-12)


def test_thresholds_drop_exactly_the_rules_below_them(planted):
    everything = mine_temporal(
        planted.facts, planted.n_entities, planted.n_relations,
        TemporalMinerSettings(lengths=(1, 2, 3)), seed=5, progress=False,
    )  # fmt: skip
    kept = mine_temporal(
        planted.facts, planted.n_entities, planted.n_relations,
        TemporalMinerSettings(lengths=(1, 2, 3), min_confidence=0.7, min_body_support=50,
                              min_rule_support=10),
        seed=5, progress=False,
    )  # fmt: skip
    assert kept and len(kept) < len(everything)
    assert all(r.confidence >= 0.7 and r.body_support >= 50 and r.support >= 10 for r in kept)
    expected = [
        r for r in everything
        if r.confidence >= 0.7 and r.body_support >= 50 and r.support >= 10
    ]  # fmt: skip
    assert kept == expected
    assert [p.rule.key for p in planted.planted if p.confidence >= 0.7] == [r.key for r in kept]


def test_every_kept_rule_has_positive_confidence(planted):
    rules = mine_temporal(planted.facts, planted.n_entities, planted.n_relations, progress=False)
    assert rules
    assert all(0 < r.confidence <= 1 and r.support >= 1 and r.temporal for r in rules)
    assert all(r.support <= r.body_support for r in rules)


# ---------------------------------------------------------------------------------------------
# exact mode and the population the sampler draws from


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_exact_mode_equals_brute_force(seed):
    facts = random_kg(seed, n_entities=10, n_relations=3, n_facts=45, n_times=6)
    rules = mine_temporal(
        facts,
        10,
        3,
        TemporalMinerSettings(
            lengths=(1, 2, 3),
            walks_per_relation=100,
            exact=True,
            transition="unif" if seed % 2 else "exp",
        ),
        seed=seed,
        progress=False,
    )
    assert len(rules) > 10
    assert {r.length for r in rules} == {1, 2, 3}
    assert any(r.var_constraints for r in rules)
    for rule in rules:
        body, supp = brute_force(facts, rule)
        assert (rule.body_support, rule.support) == (body, supp), rule
        assert rule.confidence == supp / body


def test_walks_reach_every_rule_a_tlogic_walk_can_produce():
    facts = random_kg(11, n_entities=8, n_relations=2, n_facts=24, n_times=5)
    rules = mine_temporal(
        facts,
        8,
        2,
        TemporalMinerSettings(
            lengths=(1, 2, 3),
            walks_per_relation=20_000,
            exact=True,
            transition="unif",
            min_rule_support=0,
        ),
        progress=False,
    )
    for length in (1, 2, 3):
        possible = all_walk_rules(facts, 2, length)
        assert {r.key for r in rules if r.length == length} == possible


def test_sampled_confidence_equals_exact_when_samples_cover_the_population():
    facts = random_kg(4, n_entities=6, n_relations=2, n_facts=16, n_times=4)
    kw = dict(lengths=(1, 2), walks_per_relation=300)
    exact = mine_temporal(
        facts, 6, 2, TemporalMinerSettings(exact=True, **kw), seed=9, progress=False
    )
    sampled = mine_temporal(
        facts, 6, 2, TemporalMinerSettings(num_samples=20_000, **kw), seed=9, progress=False
    )
    assert exact
    assert [(r.key, r.support, r.body_support) for r in exact] == [
        (r.key, r.support, r.body_support) for r in sampled
    ]


# ---------------------------------------------------------------------------------------------
# TLogic's distributions


@pytest.mark.parametrize("transition", ["exp", "unif", "exp-edgewise"])
@pytest.mark.parametrize("kg", [(7, 8, 2, 40, 6), (7, 6, 2, 60, 3), (1, 5, 1, 40, 3)])
def test_walk_distribution_matches_tlogic(transition, kg, monkeypatch):
    # 200,000 walks against the exact distribution: sampling noise alone gives a total
    # variation of at most ~0.01 here; mis-weighting `exp` around the excluded inverse edge
    # alone gives 0.024-0.047
    seed, n_ent, n_rel, n_facts, n_times = kg
    if transition == "exp-edgewise":  # the path for nodes with long time spans, everywhere
        monkeypatch.setattr(temporal_miner, "EXP_SPAN_LIMIT", -1)
        transition = "exp"
    facts = random_kg(seed, n_ent, n_rel, n_facts, n_times)
    g = build_temporal_graph(facts, n_ent, n_rel)
    q = quads(facts, n_rel)
    n, rel = 200_000, 0
    for length in (1, 2, 3):
        u = walk_uniforms(1, rel, length, n, n_rel)
        ok, edges = sample_walks(g, np.full(n, rel), length, u, transition)
        done = edges[ok]
        head, body, pat = walk_rules(g, done)
        rows = np.column_stack([head, body, pat])
        uniq, first, counts = np.unique(rows, axis=0, return_index=True, return_counts=True)
        observed: Counter = Counter({"fail": int((~ok).sum())})
        for i, c in zip(first, counts, strict=True):
            walk = [tuple(int(v) for v in (g.s[e], g.r[e], g.o[e], g.t[e])) for e in done[i]]
            key = ref_rule_key(walk, n_rel)
            groups = constraints(list(g.o[done[i, ::-1]]))
            # walk_rules agrees with TLogic's create_rule
            assert rule_from_tlogic(int(head[i]), body[i].tolist(), groups, n_rel).key == key
            observed[key] += int(c)
        assert len(uniq) == len(observed) - 1
        exact = ref_walk_distribution(q, n_rel, length, rel, transition)
        assert total_variation(observed, exact) < 0.02


def test_body_sample_distribution_matches_tlogic():
    facts = random_kg(8, n_entities=6, n_relations=2, n_facts=30, n_times=5)
    g = build_temporal_graph(facts, 6, 2)
    q = quads(facts, 2)
    times = np.unique(g.t)
    for body in ([1, 2], [0, 3, 1]):  # relation ids >= 2 are inverses
        n = 100_000
        bodies = np.tile(body, (n, 1))
        rows, ents, trs = _sample_bodies(g, bodies, np.random.default_rng(0).random(bodies.shape))
        observed = Counter(
            (tuple(e), tuple(times[t].tolist())) for e, t in zip(ents.tolist(), trs, strict=True)
        )
        observed["fail"] = n - len(rows)
        assert total_variation(observed, ref_body_distribution(q, body)) < 0.02


# ---------------------------------------------------------------------------------------------
# time order


@pytest.mark.parametrize("transition", ["exp", "unif"])
def test_walks_never_use_a_body_fact_at_or_after_the_head_time(transition):
    facts = random_kg(5, n_entities=15, n_relations=4, n_facts=150, n_times=6)
    g = build_temporal_graph(facts, 15, 4)
    for length in (1, 2, 3):
        heads = np.repeat(np.arange(8), 500)
        u = np.random.default_rng(length).random((len(heads), length + 1))
        ok, edges = sample_walks(g, heads, length, u, transition)
        assert ok.sum() > 50
        w = edges[ok]
        t = g.t[w]
        assert (t[:, 1] < t[:, 0]).all()  # the latest body fact is strictly before the head
        assert (np.diff(t[:, 1:], axis=1) <= 0).all()  # walking back in time
        assert (g.s[w[:, 1:]] == g.o[w[:, :-1]]).all()  # a connected path
        assert (g.o[w[:, -1]] == g.s[w[:, 0]]).all()  # closing the cycle
        assert (w[:, 2:] != g.inv[w[:, 1:-1]]).all()  # never straight back over the same edge


def test_no_rule_from_simultaneous_or_later_bodies():
    # r1 and r2 always hold at the same time, r3 only after r4: no temporal rule has r1 for
    # head r2 (or back), nor r3 => r4, however many walks.
    rows = []
    for i in range(20):
        x, y = 2 * i, 2 * i + 1
        rows += [(x, 0, y, i), (x, 1, y, i), (x, 2, y, i), (x, 3, y, i + 1)]
    h, r, t, tm = zip(*rows, strict=True)
    facts = make_facts(list(h), list(r), list(t), list(tm), ["train"] * len(rows))
    rules = mine_temporal(
        facts, 40, 4, TemporalMinerSettings(lengths=(1,), walks_per_relation=500), progress=False
    )
    pairs = {(r.head.relation, r.body[0].relation) for r in rules}
    assert pairs == {(3, 0), (3, 1), (3, 2)}
    exact = mine_temporal(
        facts, 40, 4, TemporalMinerSettings(lengths=(1,), exact=True), progress=False
    )
    assert exact
    assert all(r.confidence == 1.0 and r.support == 20 for r in exact)


# ---------------------------------------------------------------------------------------------
# determinism and edge cases


def test_same_seed_same_rules_in_any_order():
    facts = random_kg(6, n_entities=30, n_relations=5, n_facts=400, n_times=10)
    settings = TemporalMinerSettings(walks_per_relation=50)
    kw = dict(progress=False)
    a = mine_temporal(facts, 30, 5, settings, seed=1, **kw)
    b = mine_temporal(facts.sample(frac=1.0, random_state=0), 30, 5, settings, seed=1, **kw)
    c = mine_temporal(facts, 30, 5, settings, seed=2, **kw)
    stats = [(r.key, r.support, r.body_support, r.confidence) for r in a]
    assert stats == [(r.key, r.support, r.body_support, r.confidence) for r in b]
    assert stats != [(r.key, r.support, r.body_support, r.confidence) for r in c]
    # each (relation, length) has its own generator: length 2 alone = length 2 among others
    only2 = mine_temporal(
        facts, 30, 5, TemporalMinerSettings(walks_per_relation=50, lengths=(2,)), seed=1, **kw
    )
    assert only2 == [r for r in a if r.length == 2]


def test_relation_without_facts_and_single_relation_kg():
    facts = random_kg(2, n_entities=8, n_relations=1, n_facts=40, n_times=5)
    rules = mine_temporal(facts, 8, 1, TemporalMinerSettings(walks_per_relation=50), progress=False)
    assert rules and {r.head.relation for r in rules} == {0}
    more = mine_temporal(facts, 8, 3, TemporalMinerSettings(walks_per_relation=50), progress=False)
    assert {r.head.relation for r in more} == {0}
    assert [r.key for r in more] == [r.key for r in rules]


def test_empty_results_are_valid():
    facts = random_kg(2, n_entities=8, n_relations=2, n_facts=40, n_times=5)
    assert (
        mine_temporal(facts, 8, 2, TemporalMinerSettings(min_confidence=1.1), progress=False) == []
    )
    chain = make_facts([0, 1, 2], [0, 1, 0], [1, 2, 3], [0, 1, 2], ["train"] * 3)
    assert mine_temporal(chain, 4, 2, progress=False) == []  # no cycles at all
    assert mine_temporal(chain.iloc[:0], 4, 2, progress=False) == []
    assert (
        mine_temporal(facts, 8, 2, TemporalMinerSettings(walks_per_relation=0), progress=False)
        == []
    )


def test_bad_input_is_refused():
    facts = random_kg(2)
    with pytest.raises(ValueError, match="transition"):
        mine_temporal(facts, 12, 3, TemporalMinerSettings(transition="linear"), progress=False)
    with pytest.raises(ValueError, match="lengths"):
        mine_temporal(facts, 12, 3, TemporalMinerSettings(lengths=(0,)), progress=False)
    with pytest.raises(ValueError, match="relation ids"):
        mine_temporal(facts, 12, 2, progress=False)
    no_time = facts.copy()
    no_time.loc[0, "time"] = pd.NA
    with pytest.raises(ValueError, match="time"):
        mine_temporal(no_time, 12, 3, progress=False)


def _walk_times(
    rows: list[tuple[int, int, int, int]], length: int = 1, step: int = 1, n: int = 4000
) -> Counter:
    """Times of the edge chosen at `step` by `exp` walks of `length` for head relation 0."""
    h, r, t, tm = zip(*rows, strict=True)
    facts = make_facts(list(h), list(r), list(t), list(tm), ["train"] * len(rows))
    g = build_temporal_graph(facts, 6, 3)
    u = np.random.default_rng(0).random((n, length + 1))
    ok, edges = sample_walks(g, np.full(n, 0), length, u, "exp")
    return Counter(g.t[edges[ok, step]].tolist())


def test_exp_on_times_far_apart_behaves_like_tlogic():
    # Node spans over EXP_SPAN_LIMIT take the edge-by-edge path. Weights exp(t - t_cur):
    # exp(-1000) underflows to 0, so TLogic only ever picks the edge one step back ...
    near = _walk_times([(0, 1, 1, 0), (0, 1, 1, 1000), (1, 2, 0, 1999), (0, 0, 1, 2000)])
    assert set(near) == {1999}
    # ... and when every weight underflows it falls back to a uniform draw
    far = _walk_times([(0, 1, 1, 0), (0, 1, 1, 1000), (0, 0, 1, 2000)])
    assert set(far) == {0, 1000}
    assert abs(far[0] - far[1000]) < 0.1 * sum(far.values())
    # ... also when the only weight that does not underflow is the excluded inverse edge:
    # step 2 leaves node 1 at 2999, where going back to 3 is forbidden and 0, 500 are far
    rows = [(0, 0, 3, 3000), (3, 1, 1, 2999), (1, 2, 4, 0), (1, 2, 5, 500)]
    rows += [(4, 2, 0, 0), (5, 2, 0, 100)]
    excluded = _walk_times(rows, length=3, step=2)
    assert set(excluded) == {0, 500}
    assert abs(excluded[0] - excluded[500]) < 0.1 * sum(excluded.values())


# ---------------------------------------------------------------------------------------------
# TLogic JSON


def test_tlogic_json_round_trip(tmp_path: Path):
    facts = random_kg(3, n_entities=10, n_relations=3, n_facts=60, n_times=6)
    for exact in (False, True):
        rules = mine_temporal(facts, 10, 3, TemporalMinerSettings(exact=exact), progress=False)
        assert any(r.extra.get("inverse_head") for r in rules)  # renamed inverse-head rules
        path = tmp_path / f"rules_{exact}.json"
        write_tlogic_json(rules, path, 3)
        assert read_tlogic_json(path, 3) == rules
        for rule in rules:
            assert rule_from_tlogic(*rule_to_tlogic(rule, 3), 3).key == rule.key


def test_tlogic_ids_and_inverse_heads(tmp_path: Path):
    n = 3
    data = {
        "0": [
            {"head_rel": 0, "body_rels": [4], "var_constraints": [],
             "conf": 0.5, "rule_supp": 1, "body_supp": 2},
            {"head_rel": 0, "body_rels": [1, 5], "var_constraints": [[0, 2]],
             "conf": 0.25, "rule_supp": 1, "body_supp": 4},
        ],
        "3": [
            {"head_rel": 3, "body_rels": [1], "var_constraints": [],
             "conf": 0.4, "rule_supp": 2, "body_supp": 5},
            {"head_rel": 3, "body_rels": [0, 2], "var_constraints": [[1, 2]],
             "conf": 0.1, "rule_supp": 1, "body_supp": 10},
        ],
    }  # fmt: skip
    path = tmp_path / "tlogic.json"
    path.write_text(json.dumps(data))
    rules = read_tlogic_json(path, n)
    by_key = {r.key: r for r in rules}
    assert len(rules) == 3  # head 3 <- [1] is head 0 <- [4] read from the other side
    one = by_key[(Atom(0, 0, 1), (Atom(1, 1, 0),), True, ())]
    assert (one.confidence, one.support, one.body_support) == (0.5, 1.0, 2.0)
    assert (Atom(0, 0, 2), (Atom(1, 0, 1), Atom(2, 2, 1)), True, ((0, 2),)) in by_key
    # r0^-1(X0, X2) <- r0(X0, X1), r2(X1, X2), X1 = X2, renamed X_i -> X_(2-i)
    inv = by_key[(Atom(0, 0, 2), (Atom(0, 2, 1), Atom(2, 1, 0)), True, ((0, 1),))]
    assert inv.text(["a", "b", "c"]) == (
        "[Entity3, a, Entity2], [Entity2, c, Entity1] leads to [Entity1, a, Entity3]"
    )
    out = tmp_path / "out.json"
    write_tlogic_json(rules, out, n)
    written = json.loads(out.read_text())
    assert sorted(written) == ["0", "3"]
    assert [(x["body_rels"], x["var_constraints"]) for x in written["0"]] == [
        ([4], []),
        ([1, 5], [[0, 2]]),
    ]
    assert [(x["body_rels"], x["var_constraints"], x["conf"]) for x in written["3"]] == [
        ([1], [], 0.5),  # the mirror of the one-atom rule, with its statistics
        ([0, 2], [[1, 2]], 0.1),
    ]
    assert written["0"][0]["rule_supp"] == 1 and isinstance(written["0"][0]["rule_supp"], int)


def test_non_path_rules_are_refused_by_the_writer(tmp_path: Path):
    closed = Rule(Atom(0, 0, 1), (Atom(1, 0, 1), Atom(2, 0, 1)))
    with pytest.raises(ValueError, match="path"):
        write_tlogic_json([closed], tmp_path / "x.json", 3)
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_length1_finds_every_one_atom_rule_without_walks(seed):
    """length1="exact" lists every one-atom rule a walk could produce (the constraint-free ones;
    self-loop rules still come from walks) with its exact confidence, however few walks run."""
    facts = random_kg(seed, n_entities=9, n_relations=3, n_facts=40, n_times=6)
    rules = mine_temporal(
        facts,
        9,
        3,
        TemporalMinerSettings(
            lengths=(1,), walks_per_relation=1, length1="exact", min_rule_support=0
        ),
        seed=seed,
        progress=False,
    )
    possible = {k for k in all_walk_rules(facts, 3, 1) if not k[3]}  # no var constraints
    assert possible <= {r.key for r in rules}
    few_walks = mine_temporal(
        facts,
        9,
        3,
        TemporalMinerSettings(lengths=(1,), walks_per_relation=1, min_rule_support=0),
        seed=seed,
        progress=False,
    )
    assert len(few_walks) < len(possible)  # what the option is for
    for rule in rules:
        body, supp = brute_force(facts, rule)
        assert (rule.body_support, rule.support) == (body, supp), rule
    with pytest.raises(ValueError, match="length1"):
        mine_temporal(facts, 9, 3, TemporalMinerSettings(length1="all"), progress=False)
