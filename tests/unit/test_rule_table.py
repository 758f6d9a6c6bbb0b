"""`RuleTable`: rules read as columns give what the same rules as objects give. Rule objects
(`bank.frame_rules`) are the ground truth: the table must build the same rules, and rule
application from its arrays must give every query the same candidates, scores, rank keys,
rules and explanations, on random rule sets of every shape (closed, ac1, ac2, zero-body, head
constant on either side, duplicates, missing statistics), static and temporal."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pandas as pd
import pytest

from rulerag.rules.application import apply_rules
from rulerag.rules.applied_rule import applied_rules
from rulerag.rules.bank import frame_rules, rules_frame
from rulerag.rules.edge_index import edges_with_inverses
from rulerag.rules.rule import Atom, Rule
from rulerag.rules.rule_table import ConstantRules, RuleTable
from rulerag.rules.settings import ApplySettings

N_ENT, N_REL = 12, 3


def random_rules(seed: int, temporal: bool, n: int = 120) -> list[Rule]:
    """Rules of every shape with random statistics: confidences from a few values (so that
    they tie), now and then a statistic missing, now and then the same rule twice."""
    rng = random.Random(seed)
    confidences = [0.9, 0.5, 0.5, 2 / 7, 0.2, 0.01, 0.004]
    rules: list[Rule] = []
    for _ in range(n):
        stats = {
            "confidence": rng.choice(confidences + [None]),
            "pca_confidence": rng.choice([None, 0.3, 0.7]),
            "std_confidence": rng.choice([None, 0.1]),
            "support": float(rng.randint(1, 9)),
            "body_support": rng.choice([None, 1.0, 2.0, 7.0]),
        }
        shape = rng.choice(["ac1", "ac2", "zero", "path", "path2", "both", "long"])
        if shape == "both":  # both head ends constants: no query it answers
            c1, c2 = rng.randrange(N_ENT), rng.randrange(N_ENT)
            rule = Rule(Atom(rng.randrange(N_REL), 0, 1), (), constants=((0, c1), (1, c2)))
        elif shape == "long":  # a constant at the end of two body atoms: not applied either
            body = (Atom(rng.randrange(N_REL), 0, 1), Atom(rng.randrange(N_REL), 1, 2))
            rule = Rule(
                Atom(rng.randrange(N_REL), 0, 2), body, constants=((2, rng.randrange(N_ENT)),)
            )
        elif shape == "path":
            rule = Rule.path(rng.randrange(N_REL), [(rng.randrange(N_REL), rng.random() < 0.5)])
        elif shape == "path2":
            body = [(rng.randrange(N_REL), rng.random() < 0.5) for _ in range(2)]
            rule = Rule.path(rng.randrange(N_REL), body)
        else:
            rule = Rule.with_constant(
                rng.randrange(N_REL),
                rng.randrange(N_ENT),
                constant_is_subject=rng.random() < 0.5,
                body=None if shape == "zero" else (rng.randrange(N_REL), rng.random() < 0.5),
                body_constant=rng.randrange(N_ENT) if shape == "ac1" else None,
            )
        rules.append(dataclasses.replace(rule, temporal=temporal, **stats))
        if rng.random() < 0.1:  # the same rule again, with other statistics
            rules.append(dataclasses.replace(rule, temporal=temporal, confidence=0.5))
    return rules


def as_table(rules: list[Rule]) -> tuple[RuleTable, list[Rule]]:
    """The rules written as a rules frame, read back as a table and as objects."""
    frame = rules_frame(rules, {r: f"r{r}" for r in range(N_REL)}, [f"e{e}" for e in range(N_ENT)])
    return RuleTable(frame), frame_rules(frame)


def random_facts(seed: int, temporal: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = 90
    return pd.DataFrame(
        {
            "head": rng.integers(0, N_ENT, n),
            "relation": rng.integers(0, N_REL, n),
            "tail": rng.integers(0, N_ENT, n),
            "time": rng.integers(0, 8, n) if temporal else np.zeros(n, np.int64),
        }
    )


@pytest.mark.parametrize("seed", range(6))
def test_the_table_holds_the_rules_its_frame_describes(seed: int) -> None:
    table, objects = as_table(random_rules(seed, temporal=seed % 2 == 1))
    assert len(table) == len(objects)
    assert list(table) == objects
    assert [table[i] for i in range(len(table))] == objects
    assert table[2:5] == objects[2:5]
    assert sorted(table.closed.tolist()) == [i for i, r in enumerate(objects) if not r.constants]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("temporal", [False, True])
def test_rules_with_constants_as_arrays_are_the_objects_arrays(seed: int, temporal: bool) -> None:
    table, objects = as_table(random_rules(seed, temporal))
    for settings in (
        ApplySettings(temporal=temporal, min_confidence=0.0, min_body_support=0.0),
        ApplySettings(temporal=temporal, min_confidence=0.01, lengths=(2,)),
    ):
        columns = applied_rules(table, N_REL, settings)
        lists = applied_rules(objects, N_REL, settings)
        assert dict(columns) == {h: [r for r in v if r.constant is None] for h, v in lists.items()
                                 if any(r.constant is None for r in v)}  # fmt: skip
        heads = set(lists) | set(columns.constant)
        for head in heads:
            want = ConstantRules.of([r for r in lists.get(head, []) if r.constant is not None])
            got = columns.constant_rules(head)
            for name in ("index", "constant", "body", "body_constant", "confidence", "reverse"):
                assert getattr(got, name).tolist() == getattr(want, name).tolist(), (head, name)
            assert columns.count(head) == len(lists.get(head, []))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("aggregation", ["max", "noisy_or"])
def test_application_from_the_table_answers_as_from_objects(seed: int, aggregation: str) -> None:
    temporal = seed % 2 == 1
    table, objects = as_table(random_rules(seed, temporal))
    facts = random_facts(seed, temporal)
    edges = edges_with_inverses(facts, N_REL)
    settings = ApplySettings(
        temporal=temporal, aggregation=aggregation, min_confidence=0.0, min_body_support=0.0,
        discrimination_bound=0 if temporal else 6, top_k=5,
    )  # fmt: skip
    queries = pd.DataFrame(
        [(i, e, r, 8) for i, (e, r) in enumerate(
            (e, r) for e in range(N_ENT) for r in range(2 * N_REL))],
        columns=["key", "sub", "rel", "ts"],
    )  # fmt: skip
    got = apply_rules(queries, applied_rules(table, N_REL, settings), edges, settings,
                      progress=False)  # fmt: skip
    want = apply_rules(queries, applied_rules(objects, N_REL, settings), edges, settings,
                       progress=False)  # fmt: skip
    # what link prediction's ranks use: no rules or explanations kept, the same keys
    lean = apply_rules(queries, applied_rules(table, N_REL, settings), edges, settings,
                       progress=False, explain=False)  # fmt: skip
    assert any(c.scores for c in want.values())  # the rules answer something
    for key in want:
        assert got[key].scores == want[key].scores
        assert got[key].rank_keys == want[key].rank_keys
        assert got[key].rules == want[key].rules
        assert got[key].explanations == want[key].explanations
        assert lean[key].scores == want[key].scores
        assert lean[key].rank_keys == want[key].rank_keys
        assert not lean[key].rules and not lean[key].explanations


def test_shared_floats_are_the_values_one_object_per_distinct_value() -> None:
    from rulerag.rules.aggregation import shared_floats

    values = np.array([0.5, 2 / 7, 0.5, 0.125, 2 / 7, 0.5], np.float32)
    shared = shared_floats(values)
    assert shared == values.tolist()
    assert len({id(x) for x in shared}) == 3
    assert shared_floats(np.zeros(0, np.float32)) == []
