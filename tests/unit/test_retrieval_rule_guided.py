"""Rule-guided retrieval: `q ∘ r` per rule, union keeping the best score, fallback to q."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from rulerag.errors import InputError
from rulerag.retrieval.configs import parse_config
from rulerag.retrieval.data import Query
from rulerag.retrieval.rule_guided import (
    NO_RULE,
    compose,
    expand,
    retrieve,
    rule_body,
    rule_query_text,
    rule_query_texts,
    unite,
)
from rulerag.retrieval.settings import retrieve_settings
from tests.helpers import run_frame

RULES = {"R1": "[Entity1, r1, Entity2] leads to [Entity1, r2, Entity2]", "R2": "rule two"}


class TableSearcher:
    """Answers each text from a fixed table of (doc id, score) lists; records the texts."""

    def __init__(self, table: dict[str, list[tuple[str, float]]]) -> None:
        self.table = table
        self.corpus_ids = tuple(sorted({d for hits in table.values() for d, _ in hits}))
        self.seen: list[str] = []

    def search(self, texts: Sequence[str], k: int, show_progress: bool = False):
        self.seen.extend(texts)
        rows = np.full((len(texts), k), -1, dtype=np.int64)
        scores = np.full((len(texts), k), -np.inf, dtype=np.float32)
        for i, text in enumerate(texts):
            for j, (doc, score) in enumerate(self.table.get(text, [])[:k]):
                rows[i, j] = self.corpus_ids.index(doc)
                scores[i, j] = score
        return rows, scores


def test_compose_is_query_space_rule() -> None:
    assert compose("what does A r2 ?", "rule") == "what does A r2 ? rule"


def test_expand_falls_back_to_the_query_and_skips_unknown_rules() -> None:
    queries = [
        Query("q1", "Q1", ("a",), ("R1", "R2", "R1")),  # repeated rule searched once
        Query("q2", "Q2", ("b",), ()),  # no rules: alone
        Query("q3", "Q3", ("c",), ("R404",)),  # only unknown rules: alone
        Query("q4", "Q4", ("d",), ("R404", "R2")),
    ]
    plan = expand(queries, RULES, use_rules=True)
    assert list(zip(plan.qids, plan.rules, plan.texts, strict=True)) == [
        ("q1", "R1", compose("Q1", RULES["R1"])),
        ("q1", "R2", "Q1 rule two"),
        ("q2", NO_RULE, "Q2"),
        ("q3", NO_RULE, "Q3"),
        ("q4", "R2", "Q4 rule two"),
    ]
    assert plan.unknown_rules == 2 and plan.fallbacks == 2
    plain = expand(queries, RULES, use_rules=False)
    assert plain.texts == ["Q1", "Q2", "Q3", "Q4"] and set(plain.rules) == {NO_RULE}
    assert plain.fallbacks == 0


def test_retrieve_writes_per_rule_lists_and_unite_keeps_best_score() -> None:
    searcher = TableSearcher(
        {
            "Q1 rule two": [("d1", 0.5), ("d3", 0.4)],
            compose("Q1", RULES["R1"]): [("d1", 0.9), ("d2", 0.8), ("d3", 0.1)],
            "Q2": [("d4", 1.0)],
        }
    )
    queries = [Query("q1", "Q1", (), ("R1", "R2")), Query("q2", "Q2", (), ())]
    run, plan = retrieve(queries, searcher, k=3, rule_texts=RULES, use_rules=True, block=2)
    assert list(run.columns) == ["qid", "rule", "rank", "doc_id", "score"]
    assert len(searcher.seen) == 3 and plan.fallbacks == 1
    r1 = run[(run.qid == "q1") & (run.rule == "R1")]
    assert r1["doc_id"].tolist() == ["d1", "d2", "d3"] and r1["rank"].tolist() == [1, 2, 3]
    assert run[run.qid == "q2"]["rule"].tolist() == [NO_RULE]  # missing hits are not rows
    united = unite(run)
    q1 = united[united.qid == "q1"]
    assert q1["doc_id"].tolist() == ["d1", "d2", "d3"]  # deduplicated, by best score
    assert q1["score"].tolist() == pytest.approx([0.9, 0.8, 0.4])
    assert q1["rule"].tolist() == ["R1", "R1", "R2"]  # the rule that gave the best score
    assert q1["rank"].tolist() == [1, 2, 3]
    assert unite(run, k=2).groupby("qid").size().to_dict() == {"q1": 2, "q2": 1}


def test_unite_orders_ties_deterministically() -> None:
    run = run_frame(
        [("q", "A", 1, "d9", 1.0), ("q", "A", 2, "d2", 0.5), ("q", "B", 1, "d5", 1.0),
         ("q", "B", 2, "d1", 0.5)]
    )  # fmt: skip
    assert unite(run)["doc_id"].tolist() == ["d5", "d9", "d1", "d2"]
    assert unite(run.iloc[::-1])["doc_id"].tolist() == ["d5", "d9", "d1", "d2"]


def test_standard_mode_ignores_rules() -> None:
    searcher = TableSearcher({"Q1": [("d1", 1.0)]})
    run, _ = retrieve([Query("q1", "Q1", (), ("R1",))], searcher, 2, RULES, use_rules=False)
    assert searcher.seen == ["Q1"] and run["rule"].tolist() == [NO_RULE]


def test_config_names() -> None:
    config = parse_config("minilm-rgft")
    assert (config.index, config.mode, config.use_rules, config.trained) == (
        "minilm", "rgft", True, True,
    )  # fmt: skip
    assert config.model_name == "minilm-rgft"
    assert parse_config("bm25-rg").sparse and parse_config("bm25-rg").use_rules
    assert parse_config("my-model-v2-ssft").index == "my-model-v2"
    assert parse_config("mpnet-standard").model_name is None
    for bad in ("bm25-rgft", "minilm", "minilm-xyz", "-rg"):
        with pytest.raises(InputError, match=r"retrieval config"):  # a clean stage exit
            parse_config(bad)


def test_rule_body_keeps_relation_names_with_commas_and_every_body_atom() -> None:
    # Table 8's rule, whose relation name holds commas
    paper = (
        "[Entity1, Abduct, hijack, or take hostage, Entity2] leads to "
        "[Entity1, Make a visit, Entity2]"
    )
    assert rule_body(paper) == "Abduct, hijack, or take hostage"
    inverse = "[Entity2, mutual proxy for, Entity1] leads to [Entity1, proxy for, Entity2]"
    assert rule_body(inverse) == "mutual proxy for"
    chain = (
        "[Entity1, Consult, Entity2], [Entity2, Make a visit, Entity3] leads to "
        "[Entity1, Make a visit, Entity3]"
    )
    assert rule_body(chain) == "Consult Make a visit"
    with pytest.raises(ValueError, match="leads to"):
        rule_body("not a rule")


def test_rule_query_forms() -> None:
    texts = {"R1": "[Entity1, sub part of, Entity2] leads to [Entity1, proxy for, Entity2]"}
    assert rule_query_texts(texts, "rule") == texts
    assert rule_query_texts(texts, "body") == {"R1": "sub part of"}
    assert rule_query_text(texts["R1"]) == texts["R1"]  # the paper's form by default
    with pytest.raises(ValueError, match="rule_query"):
        rule_query_texts(texts, "head")
    with pytest.raises(ValueError, match=r"retrieve\.rule_query: Input should be 'rule' or"):
        retrieve_settings({"rule_query": "bodies"})
