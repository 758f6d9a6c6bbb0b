"""SAFRAN's non-redundant noisy-or: the clustering against hand-computed Jaccard indices, the
aggregation and the threshold search against brute force on small synthetic KGs."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pandas as pd
import pytest

from rulerag.rules.application import (
    NRNOISY_TEMPORAL,
    ApplySettings,
    EdgeIndex,
    applied_rules,
    apply_rules,
    edges_with_inverses,
    filtered_rank,
    noisy_or,
    nrnoisy_or,
)
from rulerag.rules.rule import Rule
from rulerag.rules.rule_clusters import (
    clusters_above,
    jaccard_matrix,
    rule_clusters,
    rule_predictions,
)

N_REL = 5  # 0 head, 1..4 bodies
HEAD = 0
STATIC = ApplySettings(temporal=False, aggregation="nrnoisy_or", top_k=10_000)


def kg(rows, split="train") -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["head", "relation", "tail"])
    return frame.assign(time=pd.NA, split=split)


def queries(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["key", "sub", "rel", "ts"])


def path(body, confidence) -> Rule:
    return Rule.path(HEAD, [(r, inverse) for r, inverse in body], pca_confidence=confidence)


def test_jaccard_of_rule_predictions_equals_the_hand_computed_sets() -> None:
    facts = kg([(1, 1, 2), (1, 1, 3), (4, 1, 5), (1, 2, 2), (4, 2, 5), (6, 2, 7), (8, 2, 9),
                (2, 3, 10), (3, 3, 10), (10, 4, 3)])  # fmt: skip
    rules = [path([(1, False)], 0.5), path([(2, False)], 0.4),
             path([(1, False), (3, False)], 0.3), path([(3, True)], 0.2)]  # fmt: skip
    graph = EdgeIndex.build(edges_with_inverses(facts, N_REL))
    by_head = applied_rules(rules, N_REL, STATIC)[HEAD]
    n = graph.n_entities
    predicted = {
        rule.index: {(int(c // n), int(c % n)) for c in rule_predictions(rule, graph)}
        for rule in by_head
    }
    assert predicted == {
        0: {(1, 2), (1, 3), (4, 5)},
        1: {(1, 2), (4, 5), (6, 7), (8, 9)},
        2: {(1, 10)},  # 1 -> 2 -> 10 and 1 -> 3 -> 10: one inferred triple
        3: {(10, 2), (10, 3)},  # body read backwards: head(10, 2) from 3(2, 10)
    }
    order = [rule.index for rule in by_head]
    jaccard = jaccard_matrix([rule_predictions(rule, graph) for rule in by_head])
    for (i, a), (j, b) in itertools.product(enumerate(order), repeat=2):
        union = predicted[a] | predicted[b]
        assert jaccard[i, j] == pytest.approx(len(predicted[a] & predicted[b]) / len(union))
    assert jaccard[order.index(0), order.index(1)] == pytest.approx(2 / 5)
    # linked strictly above the threshold: 0 and 1 at 0.4 > 0.39, not at 0.4 (SAFRAN: conf > t)
    first, second = order.index(0), order.index(1)
    assert clusters_above(jaccard, 0.39)[first] == clusters_above(jaccard, 0.39)[second]
    assert clusters_above(jaccard, 0.4)[first] != clusters_above(jaccard, 0.4)[second]
    assert len(set(clusters_above(jaccard, 0.0).tolist())) == 3  # 2 and 3 share nothing


def test_redundant_rules_count_once_and_independent_ones_combine() -> None:
    """Rules 1 and 2 infer the same triples (one cluster), rule 3 others: candidate 2, found
    by the redundant pair, scores their max; candidate 3, found by rules 1 and 3, their
    noisy-or; plain noisy-or would count the pair twice and rank 2 first."""
    facts = kg([(1, 1, 2), (1, 1, 3), (4, 1, 5), (1, 2, 2), (1, 2, 3), (4, 2, 5), (1, 3, 3),
                (6, 3, 7), (8, 3, 9)])  # fmt: skip
    rules = [path([(1, False)], 0.6), path([(2, False)], 0.6), path([(3, False)], 0.5)]
    # rules 1 and 2 both predict 3; make 2 a candidate of the pair only
    facts = facts[~((facts["relation"] == 2) & (facts["tail"] == 3))]
    by_head = applied_rules(rules, N_REL, STATIC)
    graph = EdgeIndex.build(edges_with_inverses(facts, N_REL))
    jaccard = jaccard_matrix([rule_predictions(r, graph) for r in by_head[HEAD]])
    labels = clusters_above(jaccard, 0.5)
    index = {rule.index: i for i, rule in enumerate(by_head[HEAD])}
    assert labels[index[0]] == labels[index[1]] != labels[index[2]]
    clusters = {head: clusters_above(
        jaccard_matrix([rule_predictions(r, graph) for r in rules_]), 0.5).tolist()
        for head, rules_ in by_head.items()}  # fmt: skip
    edges = edges_with_inverses(facts, N_REL)
    out = apply_rules(queries([(0, 1, HEAD, 0)]), by_head, edges, STATIC, clusters=clusters,
                      progress=False)[0]  # fmt: skip
    assert out.scores == pytest.approx({2: 0.6, 3: 1 - 0.4 * 0.5})
    assert [c for c, _ in out.ranked()] == [3, 2]
    plain = ApplySettings(temporal=False, top_k=10_000)
    noisy = apply_rules(queries([(0, 1, HEAD, 0)]), by_head, edges, plain, progress=False)[0]
    assert noisy.scores == pytest.approx({2: 1 - 0.4 * 0.4, 3: 1 - 0.4 * 0.5})
    with pytest.raises(ValueError, match="needs the rules' clusters"):
        apply_rules(queries([(0, 1, HEAD, 0)]), by_head, edges, STATIC, progress=False)


def random_kg(seed: int, n: int = 60, entities: int = 12) -> pd.DataFrame:
    rng = random.Random(seed)
    rows = {(rng.randrange(entities), rng.randrange(N_REL), rng.randrange(entities))
            for _ in range(n)}  # fmt: skip
    return kg(sorted(rows))


RANDOM_RULES = [
    path([(1, False)], 0.7),
    path([(2, False)], 0.65),
    path([(1, False), (2, False)], 0.5),
    path([(3, True)], 0.45),
    path([(2, False), (4, True)], 0.4),
    path([(0, True)], 0.3),
    path([(4, False), (1, False)], 0.2),
]


def brute_groundings(facts: pd.DataFrame, rule: Rule) -> set[tuple[int, int]]:
    """(x, y) with the rule's body true from x to y, by nested loops over the facts."""
    triples = list(facts[["head", "relation", "tail"]].itertuples(index=False, name=None))
    steps = []
    for atom in rule.body:
        forward = atom.subject < atom.object
        steps.append({(s, o) if forward else (o, s) for s, r, o in triples if r == atom.relation})
    reach = {(a, b) for a, b in steps[0]}
    for step in steps[1:]:
        reach = {(a, c) for a, b in reach for b2, c in step if b == b2}
    return reach


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nrnoisy_scores_equal_a_brute_force_aggregation(seed: int) -> None:
    """Every candidate of every object query: max of its rules' confidences inside each
    cluster, noisy-or across, for random clusterings (singletons give noisy-or, one cluster
    the best confidence)."""
    facts = random_kg(seed)
    by_head = applied_rules(RANDOM_RULES, N_REL, STATIC)
    forward = by_head[HEAD]
    rng = random.Random(seed)
    found = {rule.index: brute_groundings(facts, RANDOM_RULES[rule.index]) for rule in forward}
    edges = edges_with_inverses(facts, N_REL)
    q = queries([(s, s, HEAD, 0) for s in range(12)])
    for labels in (
        [rng.randrange(3) for _ in forward],
        list(range(len(forward))),
        [0] * len(forward),
    ):
        out = apply_rules(q, by_head, edges, STATIC, clusters={HEAD: labels}, progress=False)
        for s in range(12):
            expected: dict[int, dict[int, float]] = {}
            for label, rule in zip(labels, forward, strict=True):
                for x, y in found[rule.index]:
                    if x == s:
                        best = expected.setdefault(y, {})
                        c = float(np.float32(rule.confidence))
                        best[label] = max(best.get(label, 0.0), c)
            want = {y: 1 - np.prod([1 - m for m in b.values()]) for y, b in expected.items()}
            assert out[s].scores == pytest.approx(want, abs=1e-12)
            if labels == [0] * len(forward):
                assert out[s].scores == pytest.approx(
                    {y: max(b.values()) for y, b in expected.items()}
                )
    # and unchanged: noisy_or and max ignore clusters
    for aggregation in ("noisy_or", "max"):
        plain = ApplySettings(temporal=False, top_k=10_000, aggregation=aggregation)
        a = apply_rules(q, by_head, edges, plain, progress=False)
        b = apply_rules(
            q, by_head, edges, plain, clusters={HEAD: [0] * len(forward)}, progress=False
        )
        assert all(a[k].scores == b[k].scores and a[k].rank_keys == b[k].rank_keys for k in a)


def test_nrnoisy_or_ranks_equal_multisets_equal_and_keeps_tiny_differences() -> None:
    assert nrnoisy_or([0.2, 0.5, 0.9]) == nrnoisy_or([0.9, 0.2, 0.5])
    score, key = nrnoisy_or([0.5])
    assert (score, key) == (0.5, -0.5)
    four, five = nrnoisy_or([0.999999] * 4), nrnoisy_or([0.999999] * 5)
    assert four[0] == five[0] == 1.0  # 1 - 1e-24 and 1 - 1e-30 round to 1.0
    assert five[1] > four[1]  # the rank key still tells them apart
    assert noisy_or([0.999999] * 4) == noisy_or([0.999999] * 5)  # float32 noisy-or: a tie


def brute_validation_mrr(facts, by_head, head, labels, settings) -> float:
    """SAFRAN's validation MRR for one head, by loops: rules grounded on train, candidates
    known in any split but the answer dropped, reciprocal rank within the top k with ties
    ranked last, else 0."""
    n_rel = N_REL
    valid = edges_with_inverses(facts[facts["split"] == "valid"], n_rel)
    valid = valid[valid["rel"] == head]
    known = {tuple(r) for r in edges_with_inverses(facts, n_rel)[["sub", "rel", "obj"]].to_numpy()}
    train = edges_with_inverses(facts[facts["split"] == "train"], n_rel)
    subs = sorted(set(valid["sub"].tolist()))
    q = queries([(i, s, head, 0) for i, s in enumerate(subs)])
    if labels is None:
        chosen = ApplySettings(temporal=False, aggregation="max", top_k=settings.top_k)
        out = apply_rules(q, by_head, train, chosen, progress=False)
    else:
        out = apply_rules(q, by_head, train, settings, clusters={head: labels}, progress=False)
    total = 0.0
    for s, _, o in valid[["sub", "rel", "obj"]].to_numpy():
        keys = out[subs.index(s)].rank_keys
        if o not in keys:
            continue
        rivals = [c for c in keys if c != o and (s, head, c) not in known]
        if settings.cluster_ties == "last":
            rank = 1 + sum(keys[c] >= keys[o] for c in rivals)
        else:
            rank = 1 + sum(keys[c] > keys[o] for c in rivals)
        total += 1 / rank if rank <= settings.cluster_top_k else 0.0
    return total / len(valid)


@pytest.mark.parametrize("ties", ["last", "first"])
@pytest.mark.parametrize("seed", [3, 4, 5])
def test_the_threshold_search_picks_the_best_validation_mrr_in_grid_order(seed, ties) -> None:
    """rule_clusters' choice per head against every grid threshold (and the max approach)
    scored by brute force, ties ranked last (SAFRAN) or first; the first best wins, max
    first, and nothing beats 0."""
    rng = random.Random(seed)
    facts = random_kg(seed, n=90)
    facts = facts.assign(split=[rng.choice(["train"] * 3 + ["valid"]) for _ in range(len(facts))])
    settings = ApplySettings(
        temporal=False,
        aggregation="nrnoisy_or",
        top_k=10_000,
        cluster_resolution=10,
        cluster_top_k=3,
        cluster_ties=ties,
    )
    chosen = rule_clusters(RANDOM_RULES, facts, N_REL, settings)
    by_head = applied_rules(RANDOM_RULES, N_REL, settings)
    graph = EdgeIndex.build(edges_with_inverses(facts[facts["split"] == "train"], N_REL))
    for head in (HEAD, HEAD + N_REL):
        jaccard = jaccard_matrix([rule_predictions(r, graph) for r in by_head[head]])
        options = [(None, None)] + [
            (i / 10, clusters_above(jaccard, i / 10).tolist()) for i in range(1, 11)
        ]
        best, pick = 0.0, (None, None)
        for threshold, labels in options:
            mrr = brute_validation_mrr(facts, by_head, head, labels, settings)
            if mrr > best + 1e-12:
                best, pick = mrr, (threshold, labels)
        assert chosen.validation_mrr[head] == pytest.approx(best)
        assert chosen.thresholds[head] == pick[0]
        assert chosen.labels[head] == (None if pick[1] is None else tuple(pick[1]))


def test_temporal_rules_are_refused() -> None:
    with pytest.raises(ValueError, match="static rules only") as caught:
        ApplySettings(temporal=True, aggregation="nrnoisy_or")
    assert str(caught.value) == NRNOISY_TEMPORAL
    with pytest.raises(ValueError, match="cluster_resolution"):
        ApplySettings(temporal=False, aggregation="nrnoisy_or", cluster_resolution=0)


def test_filtered_ranks_put_the_answer_first_or_last_among_its_ties() -> None:
    scores = {1: 0.5, 2: 0.5, 3: 0.7, 4: 0.5, 5: 0.1}
    assert filtered_rank(scores, 1, set(), 9) == 2  # TLogic's: only 3 is strictly higher
    assert filtered_rank(scores, 1, set(), 9, ties="last") == 4  # 3, then 2 and 4 tied
    assert filtered_rank(scores, 1, {2, 1}, 9, ties="last") == 3  # 2 is another answer
    assert filtered_rank(scores, 6, set(), 9, ties="last") == 9  # not a candidate
