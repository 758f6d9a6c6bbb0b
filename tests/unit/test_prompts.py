"""Prompt rendering (exact text: the paper's own tables, and the legacy format), the shared
tokenisation, and assembling the inputs of a query from a retrieval run, the corpus and the
rule bank."""

from __future__ import annotations

import pandas as pd
import pytest

from rulerag.generation.grid_names import grid_config
from rulerag.generation.prompts import (
    PLAIN_INSTRUCTION,
    RULE_INSTRUCTION,
    PromptFormat,
    instruction,
    number_word,
    render_prompt,
    target_text,
    use_chat_template,
)
from rulerag.generation.samples import (
    build_samples,
    sample_queries,
    selected_rules,
    united_documents,
)
from rulerag.generation.settings import apply_profile, generation_settings
from rulerag.settings import SettingsError, deep_merge
from tests.paper_prompts import TABLE8, TABLE10, TABLE10_TYPOS

QUERY = "Time 2014-12-01 what does Abdullah Abdullah Make a visit ?"
DOCS = [
    "Time 2014-06-23 Abdullah Abdullah Make a visit Afghanistan.",
    "Time 2014-07-02 Abdullah Abdullah Consult John Kerry.",
]
RULES = ["[Entity1, Make a visit, Entity2] leads to [Entity1, Consult, Entity2]"]
LEGACY = {"style": "legacy"}


def norm(text: str) -> str:
    return " ".join(text.split())


def rule(body: str, head: str) -> str:
    """A rule in the bank's text form (no full stop: the prompt adds it)."""
    return f"[Entity1, {body}, Entity2] leads to [Entity1, {head}, Entity2]"


#: The parts of the paper's examples (Tables 8 and 10), as the pipeline holds them.
ABDULLAH = {
    "query": QUERY,
    "documents": [
        "Time 2014-06-23 Abdullah Abdullah Expel or withdraw peacekeepers Election Commission "
        "(Afghanistan).",
        "Time 2014-02-20 Abdullah Abdullah Make a visit Afghanistan.",
        "Time 2014-07-16 Abdullah Abdullah Make a visit Ashraf Ghani Ahmadzai.",
        "Time 2014-09-20 Abdullah Abdullah Make a visit Foreign Affairs (United States).",
    ],
    "rules": [
        rule("Abduct, hijack, or take hostage", "Make a visit"),
        rule("Make a visit", "Make a visit"),
    ],
    "answer": "Afghanistan",
}
OSHIOMHOLE_APPEAL = {
    "query": "Time 2014-12-01 what does Adams Oshiomhole Make an appeal or request ?",
    "documents": [
        "Time 2014-04-07 Adams Oshiomhole Make an appeal or request Citizen (Benin).",
        "Time 2014-10-13 Adams Oshiomhole Accuse People’s Democratic Party (Benin).",
        "Time 2014-07-02 Adams Oshiomhole Criticize or denounce Citizen (Nigeria).",
        "Time 2014-08-05 Adams Oshiomhole Praise or endorse Labor Union (Nigeria).",
    ],
    "rules": [
        rule("Make an appeal or request", "Make an appeal or request"),
        rule("Appeal for economic aid", "Make an appeal or request"),
        rule("Accuse of aggression", "Make an appeal or request"),
    ],
    "answer": "Citizen (Nigeria)",
}
OSHIOMHOLE_PRAISE = {
    "query": "Time 2014-12-01 what does Adams Oshiomhole Praise or endorse ?",
    "documents": [
        "Time 2014-09-25 Adams Oshiomhole Demand Citizen (Benin).",
        "Time 2014-02-05 Adams Oshiomhole Express intent to cooperate Citizen (Nigeria).",
        "Time 2014-10-13 Adams Oshiomhole Make an appeal or request Other Authorities / "
        "Officials (Nigeria).",
        "Time 2014-07-01 Adams Oshiomhole Praise or endorse Media (Africa).",
    ],
    "rules": [
        rule("Obstruct passage, block", "Praise or endorse"),
        rule("Expel or deport individuals", "Praise or endorse"),
        rule("Praise or endorse", "Praise or endorse"),
    ],
    "answer": "Media (Africa)",
}
TSIPRAS = {
    "query": "Time 2014-12-01 what does Alexis Tsipras Make statement ?",
    "documents": [
        "Time 2014-03-11 Alexis Tsipras Make a visit Ireland.",
        "Time 2014-02-26 Alexis Tsipras Express intent to meet or negotiate Slovenia.",
        "Time 2014-05-26 Alexis Tsipras Make a visit Head of Government (Greece).",
        "Time 2014-09-17 Alexis Tsipras Consult New Democracy.",
    ],
    "rules": [
        rule("Accede to demands for change in leadership", "Make statement"),
        rule("Demand release of persons or property", "Make statement"),
        rule("Accuse of crime, corruption", "Make statement"),
    ],
}


def paper_prompt(case: dict) -> str:
    return PromptFormat("paper", temporal=True).render(
        "rule", case["query"], case["documents"], case["rules"]
    )


def test_paper_table8_renders_from_its_parts():
    fmt = PromptFormat("paper", temporal=True)
    text = paper_prompt(ABDULLAH) + " " + fmt.target(ABDULLAH["answer"])
    assert norm(text) == norm(" ".join(TABLE8))
    # the five parts, one per line, each opened as in the paper
    lines = paper_prompt(ABDULLAH).split("\n")
    assert [line.split(":")[0] for line in lines] == [
        "# Instruct", "# Retrieved documents", "# Rules", "# Query", "# Answer",
    ]  # fmt: skip


def test_paper_table10_three_shot_renders_from_its_parts():
    fmt = PromptFormat("paper", temporal=True)
    shots = [
        (paper_prompt(c), c["answer"]) for c in (ABDULLAH, OSHIOMHOLE_APPEAL, OSHIOMHOLE_PRAISE)
    ]
    (message,) = fmt.few_shot_messages(shots, paper_prompt(TSIPRAS))
    assert message["role"] == "user"
    printed = norm(" ".join(TABLE10))
    for typo, fixed in TABLE10_TYPOS:
        assert typo in printed
        printed = printed.replace(typo, fixed)
    assert norm(message["content"]) == printed


def test_static_instruction_is_derived_from_the_static_text_forms():
    assert instruction(temporal=False) == (
        "For the query in the form of “what does {subject} {relation} ?”, we provide a "
        "collection of text consisting of multiple documents in the form of "
        "“{subject} {relation} {object}.” Your response should directly generate the missing "
        "{object}."
    )
    text = render_prompt("plain", "what does Barack Obama profession ?", ["Barack Obama "
                         "profession lawyer."], temporal=False)  # fmt: skip
    assert text == (
        f"# Instruct: {instruction(False)}\n"
        "# Retrieved documents: Documents related to the Query. Barack Obama profession lawyer.\n"
        "# Query: what does Barack Obama profession ?\n"
        "# Answer:"
    )


def test_paper_rules_part_counts_in_words():
    one = render_prompt("rule", QUERY, DOCS, RULES)
    assert (
        "# Rules: Use the following One rule to answer the given Query. Rule One: "
        "[Entity1, Make a visit, Entity2] leads to [Entity1, Consult, Entity2].\n"
    ) in one
    none = render_prompt("rule", QUERY, DOCS, [])
    assert "# Rules: Use the following Zero rules to answer the given Query.\n" in none
    assert [number_word(n) for n in (1, 3, 5, 20, 21)] == ["One", "Three", "Five", "Twenty", "21"]


def test_paper_query_prompt_and_targets():
    assert render_prompt("query", QUERY, DOCS, RULES) == f"# Query: {QUERY}\n# Answer:"
    assert target_text(" Citizen  (Nigeria) ") == "Citizen (Nigeria)."
    assert target_text("Washington, D.C.") == "Washington, D.C."
    assert target_text("Iran", style="legacy") == "Iran"


def test_legacy_rule_prompt_exact_text():
    assert render_prompt("rule", QUERY, DOCS, RULES, **LEGACY) == (
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


def test_legacy_plain_prompt_has_no_rules_part():
    assert render_prompt("plain", QUERY, DOCS, RULES, **LEGACY) == (
        "Instruct: Answer the question based on the retrieved documents. "
        "Reply with the answer entity only.\n"
        "Retrieved documents:\n"
        "1. Time 2014-06-23 Abdullah Abdullah Make a visit Afghanistan.\n"
        "2. Time 2014-07-02 Abdullah Abdullah Consult John Kerry.\n"
        "Query: Time 2014-12-01 what does Abdullah Abdullah Make a visit ?\n"
        "Answer:"
    )
    assert render_prompt("query", QUERY, DOCS, RULES, **LEGACY) == f"Query: {QUERY}\nAnswer:"


def test_whitespace_inside_items_is_collapsed_and_empty_parts_keep_headers():
    text = render_prompt("rule", "  what\n does X  ?", ["a\nb  c"], [], **LEGACY)
    assert text.endswith("Retrieved documents:\n1. a b c\nRules:\nQuery: what does X ?\nAnswer:")
    assert text.startswith(RULE_INSTRUCTION)
    plain = render_prompt("plain", "q", **LEGACY)
    assert plain.startswith(PLAIN_INSTRUCTION + "\nRetrieved documents:\n")
    paper = render_prompt("plain", "  what\n does X  ?", ["a\nb  c"])
    assert "# Retrieved documents: Documents related to the Query. a b c\n" in paper
    assert render_prompt("plain", "q").split("\n")[1] == (
        "# Retrieved documents: Documents related to the Query."
    )


def test_unknown_kind_or_style_fails():
    with pytest.raises(ValueError, match="prompt kind"):
        render_prompt("fancy", QUERY)
    with pytest.raises(ValueError, match="prompt style"):
        PromptFormat("fancy")


def test_legacy_few_shot_alternates_examples_then_prompt():
    examples = [("p1", " Kabul "), ("p2", "Iran"), ("p3", "John Kerry")]
    messages = PromptFormat("legacy").few_shot_messages(examples, "p4", system="sys")
    assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * 3 + ["user"]
    assert messages[2] == {"role": "assistant", "content": "Kabul"}
    assert messages[-1] == {"role": "user", "content": "p4"}
    paper = PromptFormat("paper").few_shot_messages(examples[:2], "p4")
    assert paper == [
        {
            "role": "user",
            "content": "Answer the Final Query by referring to the two cases below.\n"
            "Case 1:\np1 Kabul.\nCase 2:\np2 Iran.\nFinal Query:\np4",
        }
    ]
    assert PromptFormat("paper").few_shot_messages([], "p4") == [{"role": "user", "content": "p4"}]


def test_chat_template_setting():
    class WithTemplate:
        chat_template = "{{ x }}"

    class Without:
        chat_template = None

    assert use_chat_template(WithTemplate(), "auto") is True
    assert use_chat_template(Without(), "auto") is False
    assert use_chat_template(WithTemplate(), False) is False
    assert use_chat_template(Without(), "true") is True


RUN = pd.DataFrame(
    {
        "qid": ["q1"] * 5 + ["q2"],
        "rule": ["", "", "R1", "R1", "R2", ""],
        "rank": [1, 2, 1, 2, 1, 1],
        "doc_id": ["D1", "D2", "D3", "D1", "D4", "D9"],
        "score": [5.0, 4.0, 7.0, 6.0, 4.0, 1.0],
    }
)


def test_united_documents_keep_best_score_and_filter_rules():
    united = united_documents(RUN)
    # D1 kept once with its best score 6; D4 and D2 tie at 4, D4 has the better rank
    assert united["q1"] == ["D3", "D1", "D4", "D2"]
    assert united["q2"] == ["D9"]
    assert united_documents(RUN, "query_only")["q1"] == ["D1", "D2"]
    assert united_documents(RUN, "rules_only") == {"q1": ["D3", "D1", "D4"]}
    with pytest.raises(ValueError):
        united_documents(RUN, "some")


def test_united_documents_come_only_from_the_shown_rules():
    rg = RUN[RUN["rule"] != ""]
    assert united_documents(rg, rule_ids={"q1": ["R1"]}) == {"q1": ["D3", "D1"]}
    assert united_documents(rg, rule_ids={"q1": ["R2"]}) == {"q1": ["D4"]}
    assert united_documents(rg, rule_ids={"q1": ["R1", "R2"]}) == {"q1": ["D3", "D1", "D4"]}
    # a query searched alone (no rules) keeps its list whatever the rule limit
    assert united_documents(RUN, rule_ids={"q2": []})["q2"] == ["D9"]


def test_build_samples_cuts_documents_and_rules():
    queries = [{"qid": "q1", "query": QUERY, "answers": ["Kabul"], "rule_ids": ["R2", "RX", "R1"],
                "time": 16405}]  # fmt: skip
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
    assert sample.temporal
    (bare,) = build_samples(
        queries, rule_texts=bank, documents=None, corpus=corpus, num_documents=3, max_rules=None
    )
    assert bare.documents == () and "retrieved" not in bare.extra and len(bare.rules) == 2
    static = {**queries[0], "time": None}
    assert selected_rules(static, bank, None) == ["R2", "R1"]
    (flat,) = build_samples(
        [static], rule_texts=bank, documents=None, corpus=corpus, num_documents=3, max_rules=2
    )
    assert not flat.temporal


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
        "grid": {
            "sp": {"retrieval": None, "generator": "base", "prompt": "query"},
            "ft": {"retrieval": "rgft", "generator": "rgft", "prompt": "rule"},
            "bad": {"retrieval": None, "generator": "base", "prompt": "rule"},
        },
        "profiles": {"cpu": {}, "paper": {"model": "big", "train": {"samples": 2048}}},
    }
    merged = apply_profile(section)
    assert merged["model"] == "big"
    assert merged["train"] == {"samples": 2048, "lora": {"r": 4}}
    assert apply_profile({**section, "profile": "cpu"})["model"] == "smollm2"
    with pytest.raises(SettingsError, match="profile"):
        apply_profile({**section, "profile": "gpu"})
    assert deep_merge({"a": {"b": 1}}, {"a": {"c": 2}}) == {"a": {"b": 1, "c": 2}}
    settings = generation_settings(section)
    assert settings.model == "big" and settings.train.samples == 2048
    assert settings.train.lora.r == 4
    assert grid_config("ft", settings).trained and not grid_config("sp", settings).trained
    with pytest.raises(ValueError, match="without retrieval"):
        grid_config("bad", settings)
    with pytest.raises(ValueError, match="not in"):
        grid_config("nope", settings)


def test_generation_settings_are_strict():
    with pytest.raises(SettingsError, match=r"generation\.train: unknown key 'sample'"):
        generation_settings({"train": {"sample": 3}})
    with pytest.raises(SettingsError, match=r"generation\.grid\.x: unknown key 'retriever'"):
        generation_settings({"grid": {"x": {"retriever": "rg"}}})
    with pytest.raises(SettingsError, match="prompt_style"):
        generation_settings({"prompt_style": "fancy"})
    with pytest.raises(SettingsError, match=r"grid\.x\.prompt: Input should be"):
        generation_settings({"grid": {"x": {"retrieval": "rg", "prompt": "fancy"}}})


def test_max_rules_must_be_positive():
    with pytest.raises(SettingsError, match="max_rules"):
        generation_settings({"max_rules": 0})
