"""Answer extraction, EM, Token-F1 and Recall@k on hand-checked cases; the Table 2 report."""

from __future__ import annotations

import pandas as pd
import pytest

from rulerag.evaluation.metrics import (
    aggregate,
    exact_match,
    extract_answer,
    normalize_answer,
    recall_at_k,
    score_prediction,
    token_f1,
)
from rulerag.evaluation.report import plot_results, results_table, to_markdown
from tests.helpers import run_frame


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (" Kabul", "Kabul"),
        ("Kabul\nQuery: Time 2014 what does", "Kabul"),
        ("Answer: John Kerry.", "John Kerry"),
        ("The answer is: Paris", "Paris"),
        ("The answer to the question is: Abdullah Abdullah.", "Abdullah Abdullah"),
        ('"Barack Obama".', "Barack Obama"),
        ("\n\nIran\n", "Iran"),
        ("Iran<|im_end|>", "Iran"),
        ("Iran Rules: [Entity1", "Iran"),
        ("", ""),
        # the paper style: answers end with a full stop, sections open with "# "
        ("Afghanistan.", "Afghanistan"),
        ("# Answer: Citizen (Nigeria).", "Citizen (Nigeria)"),
        ("Media (Africa). # Query: Time 2014-12-01", "Media (Africa)"),
        ("Iran.\n# Rules: Use the following", "Iran"),
        ('"(Iran"', "Iran"),
    ],
)
def test_extract_answer(raw, expected):
    assert extract_answer(raw) == expected


@pytest.mark.parametrize(
    "answer", ["Afghanistan", "Citizen (Nigeria)", "Washington, D.C.", "St. Louis Cardinals", "k"]
)
def test_training_targets_and_extraction_agree(answer):
    """What a fine-tuned generator learns to write (`PromptFormat.target`, with the paper's
    full stop) is extracted back into an answer that matches the gold exactly."""
    from rulerag.generation.prompts import PromptFormat

    for style in ("paper", "legacy"):
        written = PromptFormat(style).target(answer)
        assert written.endswith(".") or style == "legacy"
        assert exact_match(extract_answer(written), [answer]) == 1.0
        assert exact_match(extract_answer(written + "\n# Query: next"), [answer]) == 1.0


def test_normalize_answer():
    assert normalize_answer("  The United-States of  AMERICA! ") == "unitedstates of america"
    assert normalize_answer("an Apple a day") == "apple day"


def test_exact_match_any_gold():
    golds = ["United States", "USA"]
    assert exact_match("the United States.", golds) == 1.0
    assert exact_match("usa", golds) == 1.0
    assert exact_match("United States Army", golds) == 0.0
    assert exact_match("Kabul", "kabul") == 1.0  # a single gold as a string
    assert exact_match("", ["Kabul"]) == 0.0


def test_token_f1_hand_checked():
    # pred tokens: [john, kerry, visits]; gold: [john, kerry] -> P 2/3, R 1 -> F1 0.8
    assert token_f1("John Kerry visits", ["John Kerry"]) == pytest.approx(0.8)
    # best over golds: "kerry" vs [john, kerry] = 2*(1*0.5)/(1.5) = 2/3; vs "kerry" = 1
    assert token_f1("Kerry", ["John Kerry", "Kerry"]) == pytest.approx(1.0)
    assert token_f1("Kerry", ["John Kerry"]) == pytest.approx(2 / 3)
    # tokens, not characters: Iran and Iraq share letters, no token
    assert token_f1("Iran", ["Iraq"]) == 0.0
    # bag of tokens: repeated tokens count up to their gold multiplicity
    # pred [new, new, york] vs gold [new, york]: common 2 -> P 2/3, R 1 -> 0.8
    assert token_f1("new new york", ["New York"]) == pytest.approx(0.8)
    # articles and punctuation do not count
    assert token_f1("The Taliban.", ["Taliban"]) == 1.0
    assert token_f1("anything", []) == 0.0
    assert token_f1("", [""]) == 1.0


def test_recall_at_k_substring():
    docs = ["Time 2014 officials met.", "Time 2014 Kabul hosts IRAN talks.", "x"]
    assert recall_at_k(docs, ["Iran"], 1) == 0.0
    assert recall_at_k(docs, ["Iran"], 2) == 1.0  # case-insensitive
    assert recall_at_k(docs, ["John Kerry", "kabul"], 10) == 1.0
    assert recall_at_k([], ["Iran"], 10) == 0.0
    assert recall_at_k(docs, [""], 10) == 0.0
    with pytest.raises(ValueError):
        recall_at_k(docs, ["Iran"], 0)


def test_recall_at_k_agrees_with_the_retrieval_stage():
    """The table's R@10 is the retrieval stage's strict Recall@10 on the same queries."""
    from rulerag.generation.samples import united_documents
    from rulerag.retrieval.metrics import recall_at_k as stage_recall

    contents = {f"D{i}": f"doc {i} about E{i % 7}" for i in range(40)}
    rows = []
    for q in range(12):
        for rule in ("", "R1", "R2"):
            for rank in range(1, 7):
                doc = (q * 5 + rank * (3 if rule else 1) + len(rule)) % 40
                rows.append((f"q{q}", rule, rank, f"D{doc}", 10.0 - rank + (q % 3) * 0.1))
    run = run_frame(rows)
    answers = {f"q{q}": [f"E{q % 7}", f"E{(q + 3) % 7}"] for q in range(12)}
    united = united_documents(run)
    for k in (1, 5, 10):
        ours = sum(
            recall_at_k([contents[d] for d in united[q]], answers[q], k) for q in answers
        ) / len(answers)
        assert ours == pytest.approx(stage_recall(run, contents, answers, ks=[k])[f"recall_at_{k}"])


def test_score_and_aggregate():
    a = score_prediction("Answer: Kabul\n", ["Kabul"], ["Kabul is big"], ks=(1, 10))
    b = score_prediction("Iran", ["Kabul"], ["nothing here"], ks=(1, 10))
    c = score_prediction("Kabul", ["Kabul"], None, ks=(10,))
    assert a == {
        "prediction": "Kabul",
        "em": 1.0,
        "token_f1": 1.0,
        "recall_at_1": 1.0,
        "recall_at_10": 1.0,
    }
    assert c["recall_at_10"] is None
    summary = aggregate([a, b])
    assert summary == {
        "queries": 2,
        "em": 0.5,
        "token_f1": 0.5,
        "recall_at_1": 0.5,
        "recall_at_10": 0.5,
    }
    assert aggregate([c])["recall_at_10"] is None


def test_results_table_and_markdown(tmp_path):
    metrics = {
        "standard_rag": {"queries": 100, "em": 0.05, "token_f1": 0.1, "recall_at_10": 0.3},
        "rulerag_ft": {"queries": 100, "em": 0.2049, "token_f1": 0.25, "recall_at_10": 0.5},
        "standard_prompting": {"queries": 100, "em": 0.0, "token_f1": 0.02, "recall_at_10": None},
        "gpt_icl": {"queries": 100, "em": 0.1, "token_f1": 0.1, "recall_at_10": 0.3},
    }
    table = results_table(metrics, "icews14")
    assert list(table["config"]) == [
        "standard_prompting",
        "standard_rag",
        "rulerag_ft",
        "gpt_icl",
    ]
    ft = table.set_index("config").loc["rulerag_ft"]
    assert ft["EM"] == 20.5 and ft["paper EM"] == 20.5 and ft["R@10"] == 50.0
    assert ft["paper T-F1"] == 38.9 and ft["paper R@10"] == 45.1  # Table 2, RuleQA-I
    prompting = table.set_index("config").loc["standard_prompting"]
    assert pd.isna(prompting["paper R@10"]) and prompting["paper EM"] == 1.5
    assert table.set_index("config").loc["gpt_icl", "group"] == "Other"
    ordered = results_table(metrics, "icews14", order=["rulerag_ft", "rulerag_icl"])
    assert list(ordered["config"]) == ["rulerag_ft", "rulerag_icl"]
    assert ordered.set_index("config").loc["rulerag_icl", "paper EM"] == 9.8
    text = to_markdown(table, "ICEWS14", notes=["n"])
    assert "| group | configuration | queries | R@10 | EM | T-F1 |" in text
    assert "| RuleRAG-FT | RGFT-retriever + RGFT-generator | 100 | 50.0 | 20.5 | 25.0 |" in text
    assert "| Standard Prompting | generator alone (no retrieval) | 100 | – | 0.0 | 2.0 |" in text
    plot_results(table, tmp_path / "r.png", "t")
    assert (tmp_path / "r.png").stat().st_size > 1000
