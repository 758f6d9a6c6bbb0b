"""AnyBURL's cyclic rules of three body atoms (rulerag/rules/long_cyclic.py) against brute force:
every path of a small random KG enumerated, every body pair and support counted by hand."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

from rulerag.rules.application import ApplySettings, applied_rules
from rulerag.rules.long_cyclic import mine_long_cyclic_rules
from rulerag.rules.settings import ConstantRuleSettings, LongCyclicSettings, StaticMinerSettings
from rulerag.rules.static_miner import mine_static

N_ENT, N_REL = 14, 3
#: every sampled fact, every neighbour, every candidate: the search is then exhaustive
EXHAUSTIVE = LongCyclicSettings(
    samples_per_head=10_000, rules_per_head=10_000, neighbour_cap=10_000, min_seen=1,
    min_support=1, min_confidence=0.0,
)  # fmt: skip


def random_kg(seed: int, n_facts: int = 45) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    triples = {
        (int(h), int(r), int(t))
        for h, r, t in zip(
            rng.integers(0, N_ENT, n_facts),
            rng.integers(0, N_REL, n_facts),
            rng.integers(0, N_ENT, n_facts),
            strict=True,
        )  # fmt: skip
        if h != t
    }
    h, r, t = (np.array(c, np.int64) for c in zip(*sorted(triples), strict=True))
    return h, r, t


def walk(h: np.ndarray, r: np.ndarray, t: np.ndarray) -> dict[int, set[tuple[int, int]]]:
    """Relation code -> its (from, to) steps: code r walks r forwards, r + N_REL backwards."""
    steps: dict[int, set[tuple[int, int]]] = defaultdict(set)
    for a, rel, b in zip(h.tolist(), r.tolist(), t.tolist(), strict=True):
        steps[rel].add((a, b))
        steps[rel + N_REL].add((b, a))
    return steps


def brute_counts(steps, body: tuple[int, int, int], head: int) -> tuple[int, int]:
    """(body pairs X != Y joined by a path of the three codes, those that are head facts)."""
    pairs = {
        (x, y)
        for x, a in steps[body[0]]
        for a2, b in steps[body[1]]
        if a2 == a
        for b2, y in steps[body[2]]
        if b2 == b and x != y
    }
    facts = steps[head]
    return len(pairs), len(pairs & facts)


def brute_candidates(steps, head: int) -> set[tuple[int, int, int]]:
    """Every code sequence of a path x-a-b-y, x a b y pairwise distinct, for a head fact (x, y)."""
    codes = range(2 * N_REL)
    out = set()
    for x, y in steps[head]:
        for s1, s2, s3 in itertools.product(codes, repeat=3):
            for x1, a in steps[s1]:
                if x1 != x or a in (x, y):
                    continue
                for a1, b in steps[s2]:
                    if a1 == a and b not in (x, y, a) and (b, y) in steps[s3]:
                        out.add((s1, s2, s3))
    return out


def code(atom, k: int) -> int:
    """An atom's relation code read from path position k to k + 1."""
    return atom.relation if (atom.subject, atom.object) == (k, k + 1) else atom.relation + N_REL


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_exhaustive_search_finds_every_path_and_counts_it_exactly(seed: int) -> None:
    h, r, t = random_kg(seed)
    steps = walk(h, r, t)
    rules = mine_long_cyclic_rules(h, r, t, N_ENT, N_REL, EXHAUSTIVE, unseen_negatives=5,
                                   seed=0, progress=False)  # fmt: skip
    found: dict[int, set] = defaultdict(set)
    for rule in rules:
        assert all(
            (a.subject, a.object) in ((k, k + 1), (k + 1, k)) for k, a in enumerate(rule.body)
        )
        body = tuple(code(a, k) for k, a in enumerate(rule.body))
        found[rule.head.relation].add(body)
        pairs, support = brute_counts(steps, body, rule.head.relation)
        assert (rule.body_support, rule.support) == (pairs, support)
        assert rule.confidence == pytest.approx(support / (pairs + 5))
    for head in range(N_REL):
        expected = {b for b in brute_candidates(steps, head) if brute_counts(steps, b, head)[1]}
        assert found[head] == expected
    assert rules  # the random KGs do have such paths


def test_a_planted_rule_is_found_from_samples_and_ranks_first() -> None:
    rng = np.random.default_rng(7)
    triples = set()
    for i in range(60):  # r0(x, y) <= r1(x, a), r2(b, a), r1(b, y): codes (1, 2 + 3, 1)
        x, a, b, y = 100 + 4 * i, 101 + 4 * i, 102 + 4 * i, 103 + 4 * i
        triples |= {(x, 1, a), (b, 2, a), (b, 1, y)}
        if i < 50:
            triples.add((x, 0, y))
    for _ in range(150):  # noise among other entities
        u, v = rng.integers(0, 100, 2)
        if u != v:
            triples.add((int(u), int(rng.integers(0, 3)), int(v)))
    h, r, t = (np.array(c, np.int64) for c in zip(*sorted(triples), strict=True))
    settings = LongCyclicSettings(samples_per_head=20, rules_per_head=5)
    rules = mine_long_cyclic_rules(h, r, t, 400, 3, settings, unseen_negatives=5, seed=3,
                                   progress=False)  # fmt: skip
    best = next(rule for rule in rules if rule.head.relation == 0)
    assert tuple(code(a, k) for k, a in enumerate(best.body)) == (1, 2 + 3, 1)
    steps = walk(h, r, t)
    assert (best.body_support, best.support) == brute_counts(steps, (1, 2 + 3, 1), 0)
    assert best.support >= 50 and best.confidence > 0.5  # the 50 planted, and what noise adds
    again = mine_long_cyclic_rules(h, r, t, 400, 3, settings, unseen_negatives=5, seed=3,
                                   progress=False)  # fmt: skip
    assert again == rules  # seeded


def test_the_static_miner_adds_them_on_anyburls_scale_and_application_reads_them() -> None:
    h, r, t = random_kg(4, n_facts=60)
    facts = pd.DataFrame({"head": h, "relation": r, "tail": t})
    anyburl = ConstantRuleSettings(closed_confidence="anyburl")
    plain = mine_static(
        facts,
        N_ENT,
        N_REL,
        StaticMinerSettings(
            constants=anyburl, min_initial_support=0, min_head_coverage=0.0, min_pca_confidence=0.0
        ),
        progress=False,
    )
    both = mine_static(
        facts,
        N_ENT,
        N_REL,
        StaticMinerSettings(
            constants=anyburl,
            long_cyclic=EXHAUSTIVE,
            min_initial_support=0,
            min_head_coverage=0.0,
            min_pca_confidence=0.0,
        ),
        progress=False,
    )
    longer = [rule for rule in both if len(rule.body) == 3]
    assert longer and [rule for rule in both if len(rule.body) < 3] == plain
    by_head = applied_rules(both, N_REL, ApplySettings(temporal=False, min_confidence=0.0))
    applied = {(a.head, a.body) for rules in by_head.values() for a in rules}
    for rule in longer:  # forwards, and backwards for the subject queries
        body = tuple(code(a, k) for k, a in enumerate(rule.body))
        assert (rule.head.relation, body) in applied
        back = tuple((c + N_REL) % (2 * N_REL) for c in reversed(body))
        assert (rule.head.relation + N_REL, back) in applied


def test_they_refuse_a_pca_scale_beside_them() -> None:
    with pytest.raises(ValueError, match="closed_confidence: anyburl"):
        StaticMinerSettings(long_cyclic=LongCyclicSettings(samples_per_head=5))
    facts = pd.DataFrame({"head": [0], "relation": [0], "tail": [1]})
    with pytest.raises(ValueError, match="closed_confidence: anyburl"):
        mine_static(
            facts, 2, 1, StaticMinerSettings(long_cyclic=LongCyclicSettings(samples_per_head=5))
        )
