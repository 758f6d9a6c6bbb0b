"""`ConstantRuleColumns`: rules with constants kept as arrays give the rules and the rules frame
that a `Rule` each gives. `Rule.with_constant` is the ground truth for the rules; the frame the
objects make (`bank.rules_frame` over a list) for the frame, with names that stress the string
templates (braces, quotes, the stand-ins' look-alikes) and confidences that tie, so ids decide
the order."""

from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pytest

from rulerag.rules import bank
from rulerag.rules.bank import _frame_order, rules_frame
from rulerag.rules.constant_columns import ConstantRuleColumns, RuleSet
from rulerag.rules.rule import Rule

N_ENT, N_REL = 9, 4
ENTITIES = ["plain", "{0}", "{1} and }{", 'a "quoted" one', "-1000000001", "\\", "x", "é", "[]"]
RELATIONS = {0: "r0", 1: "{r1}", 2: "has, comma", 3: "-2"}


def random_columns(seed: int, temporal: bool, n: int = 150) -> ConstantRuleColumns:
    """Random rules of every constant shape: ac1 (d other than c, and d = c), ac2, zero-body;
    the head constant on either side; a few confidences (so they tie), a body count of 0."""
    rng = np.random.default_rng(seed)
    code = rng.integers(-1, 2 * N_REL, n)
    d = np.where(rng.random(n) < 0.5, rng.integers(0, N_ENT, n), -1)
    d[code < 0] = -1
    const = rng.integers(0, N_ENT, n)
    same = rng.random(n) < 0.15
    d[same & (code >= 0)] = const[same & (code >= 0)]
    return ConstantRuleColumns(
        relation=rng.integers(0, N_REL, n),
        inverse=rng.random(n) < 0.5,
        const=const,
        code=code,
        d=d,
        support=rng.integers(1, 6, n).astype(float),
        body=rng.integers(0, 8, n).astype(float),
        confidence=rng.choice([0.5, 0.25, 2 / 7, 0.01], n),
        temporal=temporal,
        unseen_negatives=5,
    )


def expected_rules(columns: ConstantRuleColumns) -> list[Rule]:
    """A `Rule.with_constant` per entry: what the miners made before the columns."""
    out = []
    for i in range(len(columns)):
        code, d = int(columns.code[i]), int(columns.d[i])
        s, b = float(columns.support[i]), float(columns.body[i])
        out.append(
            Rule.with_constant(
                int(columns.relation[i]),
                int(columns.const[i]),
                constant_is_subject=bool(columns.inverse[i]),
                body=None if code < 0 else (code >> 1, bool(code & 1)),
                body_constant=None if d < 0 else d,
                temporal=columns.temporal,
                support=s,
                body_support=b,
                std_confidence=s / b if b and not columns.temporal else None,
                confidence=float(columns.confidence[i]),
                extra={"unseen_negatives": 5},
            )
        )
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("temporal", [False, True])
def test_the_columns_rules_are_with_constants_rules(seed: int, temporal: bool) -> None:
    columns = random_columns(seed, temporal)
    got, want = columns.rules(), expected_rules(columns)
    assert got == want
    assert [r.extra for r in got] == [r.extra for r in want]
    assert {r.kind for r in got} == {"ac1", "ac2", "zero"}
    joined = ConstantRuleColumns.concat([columns, random_columns(seed + 10, temporal)])
    assert joined.rules() == got + expected_rules(random_columns(seed + 10, temporal))


def closed_rules(seed: int) -> list[Rule]:
    rng = random.Random(seed)
    return [
        Rule.path(
            rng.randrange(N_REL),
            [(rng.randrange(N_REL), rng.random() < 0.5) for _ in range(rng.randint(1, 2))],
            pca_confidence=rng.choice([0.5, 0.25, 0.9]),
            support=float(rng.randint(1, 9)),
        )
        for _ in range(30)
    ]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("temporal", [False, True])
def test_the_frame_from_columns_is_the_frame_from_objects(
    seed: int, temporal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    columns = random_columns(seed, temporal)
    # one rule per structure, as a miner finds it
    seen, keep = set(), []
    for rule in columns.rules():
        keep.append(rule.key not in seen)
        seen.add(rule.key)
    mask = np.array(keep)
    columns = ConstantRuleColumns(
        **{
            name: getattr(columns, name)[mask]
            for name in ("relation", "inverse", "const", "code", "d", "support", "body")
        },
        confidence=columns.confidence[mask],
        temporal=temporal,
        unseen_negatives=5,
    )
    objects = closed_rules(seed)
    got = rules_frame(RuleSet(objects, columns), RELATIONS, ENTITIES)
    want = rules_frame([*objects, *columns.rules()], RELATIONS, ENTITIES)
    pd.testing.assert_frame_equal(got, want)
    with monkeypatch.context() as patch:  # made a few rows at a time: the same frame
        patch.setattr(bank, "_CHUNK", 7)
        pd.testing.assert_frame_equal(
            rules_frame(RuleSet(objects, columns), RELATIONS, ENTITIES), want
        )
        pd.testing.assert_frame_equal(
            rules_frame([*objects, *columns.rules()], RELATIONS, ENTITIES), want
        )
    assert got.dtypes.to_dict() == want.dtypes.to_dict()
    assert (
        got["text"].str.contains('"quoted"').any()
        and got["text"].str.contains("{0}", regex=False).any()
    )
    # rules of one head relation tie on confidence, so the ids set their order
    assert got.duplicated(["head_relation", "score"]).any()


@pytest.mark.parametrize("seed", range(5))
def test_the_frame_order_is_the_sorted_order(seed: int) -> None:
    rng = random.Random(seed)
    n = 400
    heads = [rng.randrange(3) for _ in range(n)]
    scores = [rng.choice([0.5, 0.25, -0.0, 0.0, math.nan, 1 / 3]) for _ in range(n)]
    ids = ["R" + "".join(rng.choice("0123456789abcdef") for _ in range(12)) for _ in range(n)]
    ids[5] = ids[9]  # the same id twice: their order stays

    def key(i: int) -> tuple:  # rules_frame's sort before the columns: NaN scores last
        nan = scores[i] != scores[i]
        return (heads[i], nan, 0.0 if nan else -scores[i], ids[i])

    want = sorted(range(n), key=key)
    id_key = np.array([int(i[1:], 16) for i in ids])
    assert _frame_order(np.array(heads), np.array(scores), id_key).tolist() == want


def test_an_empty_set_of_columns_joins_and_lists_nothing() -> None:
    empty = ConstantRuleColumns.concat([])
    assert len(empty) == 0 and empty.rules() == []
    rules = closed_rules(0)
    assert RuleSet(rules, empty).has_constants is False
    pd.testing.assert_frame_equal(
        rules_frame(RuleSet(rules, empty), RELATIONS), rules_frame(rules, RELATIONS)
    )
    with pytest.raises(ValueError, match="different kinds"):
        ConstantRuleColumns.concat([random_columns(0, False), random_columns(0, True)])
