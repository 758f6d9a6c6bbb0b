"""Prompt rendering (exact text), the shared tokenisation, and assembling the inputs of a
query from a retrieval run, the corpus and the rule bank."""

from __future__ import annotations

import pandas as pd
import pytest

from rulerag.generation.config import apply_profile, deep_merge, grid_config
from rulerag.generation.prompts import (
    PLAIN_INSTRUCTION,
    RULE_INSTRUCTION,
    few_shot_messages,
    render_prompt,
    use_chat_template,
)
from rulerag.generation.samples import build_samples, sample_queries, united_documents

QUERY = "Time 2014-12-01 what does Abdullah Abdullah Make a visit ?"
DOCS = [
    "Time 2014-06-23 Abdullah Abdullah Make a visit Afghanistan.",
    "Time 2014-07-02 Abdullah Abdullah Consult John Kerry.",
]
RULES = ["[Entity1, Make a visit, Entity2] leads to [Entity1, Consult, Entity2]"]


def test_rule_prompt_exact_text():
    assert render_prompt("rule", QUERY, DOCS, RULES) == (
        "Instruct: Answer the question based on the retrieved documents and the rules. "
        "The rules are logical patterns that can help you infer the answer: when the documents "
        "contain a fact that matches the left side of a rule, the fact on the right side of the "
        "rule is likely to hold. Reply with the answer entity only.\n"
        "Retrieved documents:\n"
        "1. Time 2014-06-23 Abdullah Abdullah Make a visit Afghanistan.\n"
        "2. Time 2014-07-02 Abdullah Abdullah Consult John Kerry.\n"
        "Rules:\n"
        "[Entity1, Make a visit, Entity2] leads to [Entity1, Consult, Entity2]\n"
        "Query: Time 2014-12-01 what does Abdullah Abdullah Make a visit ?\n"
        "Answer:"
    )


def test_plain_prompt_has_no_rules_part():
    assert render_prompt("plain", QUERY, DOCS, RULES) == (
        "Instruct: Answer the question based on the retrieved documents. "
        "Reply with the answer entity only.\n"
        "Retrieved documents:\n"
        "1. Time 2014-06-23 Abdullah Abdullah Make a visit Afghanistan.\n"
        "2. Time 2014-07-02 Abdullah Abdullah Consult John Kerry.\n"
        "Query: Time 2014-12-01 what does Abdullah Abdullah Make a visit ?\n"
        "Answer:"
    )


def test_query_prompt_is_the_query_alone():
    assert render_prompt("query", QUERY, DOCS, RULES) == f"Query: {QUERY}\nAnswer:"


def test_whitespace_inside_items_is_collapsed_and_empty_parts_keep_headers():
    text = render_prompt("rule", "  what\n does X  ?", ["a\nb  c"], [])
    assert text.endswith("Retrieved documents:\n1. a b c\nRules:\nQuery: what does X ?\nAnswer:")
    assert text.startswith(RULE_INSTRUCTION)
    assert render_prompt("plain", "q").startswith(PLAIN_INSTRUCTION + "\nRetrieved documents:\n")


def test_unknown_kind_fails():
    with pytest.raises(ValueError, match="prompt kind"):
        render_prompt("fancy", QUERY)


def test_few_shot_messages_alternate_examples_then_prompt():
    examples = [("p1", " Kabul "), ("p2", "Iran"), ("p3", "John Kerry")]
    messages = few_shot_messages(examples, "p4", system="sys")
    assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * 3 + ["user"]
    assert messages[2] == {"role": "assistant", "content": "Kabul"}
    assert messages[-1] == {"role": "user", "content": "p4"}


def test_chat_template_setting():
    class WithTemplate:
        chat_template = "{{ x }}"

    class Without:
        chat_template = None

    assert use_chat_template(WithTemplate(), "auto") is True
    assert use_chat_template(Without(), "auto") is False
    assert use_chat_template(WithTemplate(), False) is False
    assert use_chat_template(Without(), "true") is True


def test_united_documents_keep_best_score_and_filter_rules():
    run = pd.DataFrame(
        {
            "qid": ["q1"] * 5 + ["q2"],
            "rule": ["", "", "R1", "R1", "R2", ""],
            "rank": [1, 2, 1, 2, 1, 1],
            "doc_id": ["D1", "D2", "D3", "D1", "D4", "D9"],
            "score": [5.0, 4.0, 7.0, 6.0, 4.0, 1.0],
        }
    )
    united = united_documents(run)
    # D1 kept once with its best score 6; D4 and D2 tie at 4, D4 has the better rank
    assert united["q1"] == ["D3", "D1", "D4", "D2"]
    assert united["q2"] == ["D9"]
    assert united_documents(run, "query_only")["q1"] == ["D1", "D2"]
    assert united_documents(run, "rules_only") == {"q1": ["D3", "D1", "D4"]}
    with pytest.raises(ValueError):
        united_documents(run, "some")


def test_build_samples_cuts_documents_and_rules():
    queries = [{"qid": "q1", "query": QUERY, "answers": ["Kabul"], "rule_ids": ["R2", "RX", "R1"]}]
    corpus = {f"D{i}": f"doc {i}" for i in range(12)}
    bank = {"R1": "rule one", "R2": "rule two"}
    docs = {"q1": [f"D{i}" for i in range(12)] + ["D99"]}
    (sample,) = build_samples(
        queries,
        rule_texts=bank,
        documents=docs,
        corpus=corpus,
        num_documents=3,
        max_rules=1,
        keep_retrieved=10,
    )
    assert sample.documents == ("doc 0", "doc 1", "doc 2")
    assert sample.rules == ("rule two",)  # unknown RX skipped, then cut to one
    assert len(sample.extra["retrieved"]) == 10
    assert sample.answers == ("Kabul",)
    (bare,) = build_samples(
        queries, rule_texts=bank, documents=None, corpus=corpus, num_documents=3, max_rules=None
    )
    assert bare.documents == () and "retrieved" not in bare.extra and len(bare.rules) == 2


def test_sample_queries_is_seeded_and_ordered():
    records = [{"qid": str(i)} for i in range(50)]
    a = sample_queries(records, 10, seed=1)
    assert a == sample_queries(records, 10, seed=1)
    assert [int(r["qid"]) for r in a] == sorted(int(r["qid"]) for r in a)
    assert sample_queries(records, None, seed=1) == records


def test_profiles_and_grid():
    section = {
        "profile": "paper",
        "model": "smollm2",
        "train": {"samples": 64, "lora": {"r": 4}},
        "profiles": {"cpu": {}, "paper": {"model": "big", "train": {"samples": 2048}}},
    }
    merged = apply_profile(section)
    assert merged["model"] == "big"
    assert merged["train"] == {"samples": 2048, "lora": {"r": 4}}
    assert "profiles" not in merged
    assert apply_profile({**section, "profile": "cpu"})["model"] == "smollm2"
    with pytest.raises(ValueError, match="profile"):
        apply_profile({**section, "profile": "gpu"})
    assert deep_merge({"a": {"b": 1}}, {"a": {"c": 2}}) == {"a": {"b": 1, "c": 2}}
    grid = {
        "sp": {"retrieval": None, "generator": "base", "prompt": "query"},
        "ft": {"retrieval": "rgft", "generator": "rgft", "prompt": "rule"},
        "bad": {"retrieval": None, "generator": "base", "prompt": "rule"},
    }
    assert grid_config("ft", grid).trained and not grid_config("sp", grid).trained
    with pytest.raises(ValueError, match="without retrieval"):
        grid_config("bad", grid)
    with pytest.raises(ValueError, match="not in"):
        grid_config("nope", grid)
