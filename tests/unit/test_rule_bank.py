"""The rule bank: stable ids, frame round trip, selection by length/confidence/support/top-N."""

from __future__ import annotations

import io

import pandas as pd

from rulerag.rules.bank import (
    confidence_histogram,
    frame_rules,
    rule_id,
    rules_frame,
    rules_text,
    select_bank,
    write_rules_text,
)
from rulerag.rules.rule import Atom, Rule
from rulerag.rules.settings import BankConfig

NAMES = ["born in", "lives in", "citizen of", "works in"]


def sample_rules() -> list[Rule]:
    return [
        Rule.path(1, [(0, False)], support=120, confidence=0.9),
        Rule.path(1, [(3, False)], support=50, confidence=0.4),
        Rule.path(1, [(0, False), (2, True)], support=300, confidence=0.95),
        Rule.path(2, [(1, True)], support=10, confidence=0.05),
        Rule(
            head=Atom(2, 0, 1),
            body=(Atom(0, 0, 1), Atom(3, 1, 0)),
            support=200,
            pca_confidence=0.7,
            std_confidence=0.5,
        ),
    ]


def test_text_forms_follow_the_paper() -> None:
    frame = rules_frame(sample_rules(), NAMES)
    texts = set(frame["text"])
    assert "[Entity1, born in, Entity2] leads to [Entity1, lives in, Entity2]" in texts
    assert "[Entity2, lives in, Entity1] leads to [Entity1, citizen of, Entity2]" in texts
    assert (
        "[Entity1, born in, Entity2], [Entity3, citizen of, Entity2] leads to "
        "[Entity1, lives in, Entity3]"
    ) in texts


def test_rule_id_depends_on_structure_only() -> None:
    a = Rule.path(1, [(0, False)], confidence=0.9)
    b = Rule.path(1, [(0, False)], confidence=0.1, support=3)
    c = Rule.path(1, [(0, True)], confidence=0.9)
    assert rule_id(a) == rule_id(b) != rule_id(c)


def test_frame_round_trip_and_order() -> None:
    rules = sample_rules()
    frame = rules_frame(rules, NAMES)
    assert list(frame["head_relation"]) == sorted(frame["head_relation"])
    for _, group in frame.groupby("head_relation"):
        assert list(group["score"]) == sorted(group["score"], reverse=True)
    back = frame_rules(frame)
    assert {r.key for r in back} == {r.key for r in rules}
    assert rules_frame(back, NAMES).equals(frame)


def test_select_bank_filters() -> None:
    frame = rules_frame(sample_rules(), NAMES)
    bank = select_bank(frame, BankConfig(lengths=(1,), min_confidence=0.1))
    assert set(bank["length"]) == {1}
    assert bank["score"].min() >= 0.1
    assert len(bank) == 2
    top1 = select_bank(frame, BankConfig(lengths=(1, 2), top_n_per_head=1))
    assert top1.groupby("head_relation").size().max() == 1
    assert top1.set_index("head_relation").loc[1, "score"] == 0.95
    strict = select_bank(frame, BankConfig(lengths=(1, 2), min_support=150))
    assert set(strict["support"]) == {300, 200}


def test_empty_bank_is_valid() -> None:
    frame = rules_frame([], NAMES)
    bank = select_bank(frame, BankConfig(min_confidence=0.5))
    assert bank.empty and list(bank.columns) == list(frame.columns)
    assert rules_text(bank) == ""
    hist = confidence_histogram(frame, bank)
    assert int(hist["mined"].sum()) == 0


def test_rules_text_groups_by_head() -> None:
    frame = rules_frame(sample_rules(), NAMES)
    text = rules_text(frame)
    assert text.splitlines()[0] == "# citizen of (2 rules)"
    assert "conf=0.950 supp=300\t[Entity1, born in, Entity2]" in text
    assert text.count("\n# ") == frame["head_relation"].nunique() - 1 and text.endswith("\n")
    # written a head relation at a time: the same text
    for rows in (frame, frame.iloc[:1], frame.iloc[:0]):
        handle = io.StringIO()
        write_rules_text(rows, handle)
        assert handle.getvalue() == rules_text(rows)


def test_histogram_counts_every_rule() -> None:
    frame = rules_frame(sample_rules(), NAMES)
    bank = select_bank(frame, BankConfig())
    hist = confidence_histogram(frame, bank)
    assert int(hist["mined"].sum()) == len(frame)
    assert int(hist["bank"].sum()) == len(bank)
    assert isinstance(hist, pd.DataFrame) and len(hist) == 20


def test_columns_converted_in_chunks_are_the_same_series_and_file() -> None:
    from rulerag.rules.bank import _series

    values = {
        "text": [f"rule {i} " * (i % 4) for i in range(10)],
        "score": [float(i) if i % 3 else float("nan") for i in range(10)],
        "head": list(range(10)),
        "temporal": [i % 2 == 0 for i in range(10)],
    }
    chunked = pd.DataFrame(
        {k: _series(v[i : i + 3] for i in range(0, 10, 3)) for k, v in values.items()}
    )
    whole = pd.DataFrame({k: pd.Series(v) for k, v in values.items()})
    pd.testing.assert_frame_equal(chunked, whole)
    assert chunked.dtypes.to_dict() == whole.dtypes.to_dict()
    files = [io.BytesIO(), io.BytesIO()]
    chunked.to_parquet(files[0])
    whole.to_parquet(files[1])
    assert files[0].getvalue() == files[1].getvalue()
    assert _series([[]]).equals(pd.Series([]))
