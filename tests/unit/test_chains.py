"""VE, CoK and RuleRAG-CoK (rulerag/generation/chains.py) with a scripted LLM and searcher:
the self-consistency gate, VE's independent per-sentence edits, CoK's progressive correction,
and the rules in RuleRAG-CoK's prompts and searches."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from rulerag.generation.chains import (
    ANSWER_CUE,
    ChainGenerator,
    Demo,
    answer_of,
    cot_prompt,
    demos_from_items,
    split_rationale,
    vote,
)
from rulerag.generation.prompts import Sample
from rulerag.generation.settings import ChainSettings

DEMOS = [
    Demo("what does A Consult ?", "[E1, Meet, E2] leads to [E1, Consult, E2]",
         "2014-01-01 A Meet B.", "A Consult B", "B"),
    Demo("what does C Consult ?", "[E1, Meet, E2] leads to [E1, Consult, E2]",
         "2014-01-02 C Meet D.", "C Consult D", "D"),
    Demo("what does E Praise ?", "[E1, Visit, E2] leads to [E1, Praise, E2]",
         "2014-01-03 E Visit F.", "E Praise F", "F"),
]  # fmt: skip
CORPUS = {"d1": "2014-02-01 Iran Meet Oman.", "d2": "2014-02-02 Iran Meet Qatar.", "d3": "x."}
RULE = "[E1, Meet, E2] leads to [E1, Consult, E2]"


class Searcher:
    """Scripted retrieval: d1 first for texts naming Oman or a rule, else d2."""

    corpus_ids = ("d1", "d2", "d3")

    def __init__(self) -> None:
        self.texts: list[str] = []

    def search(self, texts: Sequence[str], k: int, show_progress: bool = False):
        self.texts += list(texts)
        rows = [[0, 1, 2] if ("Oman" in t or "leads to" in t) else [1, 0, 2] for t in texts]
        return np.asarray(rows)[:, :k], np.tile(np.asarray([3.0, 2.0, 1.0])[:k], (len(texts), 1))


class LLM:
    """Scripted completions keyed on what the prompt asks; records every call."""

    def __init__(self, drafts: list[str]) -> None:
        self.drafts = drafts
        self.calls: list[tuple[str, int, float]] = []

    def __call__(self, prompts, n, temperature, max_new_tokens):
        out = []
        for prompt in prompts:
            self.calls.append((prompt, n, temperature))
            if prompt.endswith("Question:"):
                reply = "whom does Iran Meet ?"
            elif prompt.endswith("Edited sentence:"):
                reply = "Iran Meet Oman."
            elif prompt.endswith("\nA:") and "Q: whom does Iran Meet ?" in prompt:
                reply = "Iran Meet Oman."  # VE: a verifying question answered from documents
            elif prompt.endswith(ANSWER_CUE):
                reply = " The answer is Oman. First, more text"  # the cue repeated, run on
            elif prompt.endswith("Second,"):
                reply = " Iran Consult Oman. The answer is Oman."
            else:  # the chain-of-thought prompt: the scripted drafts
                out.append((self.drafts * n)[:n])
                continue
            out.append([reply] * n)
        return out


def sample(rules: tuple[str, ...] = ()) -> Sample:
    return Sample("q1", "what does Iran Consult ?", ("Oman",), rules=rules)


def make(method: str, drafts: list[str], rules: bool = False):
    llm, searcher = LLM(drafts), Searcher()
    chain = ChainGenerator(
        llm,
        searcher,
        CORPUS,
        DEMOS,
        method=method,
        rules=rules,
        settings=ChainSettings(documents=2),
    )
    return chain, llm, searcher


def test_parsing_and_voting() -> None:
    text = "First, Iran Meet Qatar. Second, Iran Consult Qatar. The answer is Qatar."
    assert answer_of(text) == "Qatar" and answer_of("no cue") is None
    assert split_rationale(text) == ["Iran Meet Qatar.", "Iran Consult Qatar."]
    drafts = ["... The answer is Oman.", "no answer", "The answer is oman", "The answer is Qatar."]
    assert vote(drafts) == ("Oman", 2 / 3, "... The answer is Oman.")
    assert vote(drafts, voters=2)[1] == 1.0  # only the first two that state an answer vote
    assert vote(drafts[::-1], voters=2)[:2] == ("Qatar", 0.5)
    prompt = cot_prompt(DEMOS, "what does Iran Consult ?", [RULE], with_rules=True)
    assert prompt.count("Rules: ") == 4 and prompt.endswith("Q: what does Iran Consult ?\nA:")
    assert "Second, by the rule [E1, Meet, E2]" in prompt
    assert "Rules:" not in cot_prompt(DEMOS, "q", [RULE], with_rules=False)


def test_demonstrations_come_from_items_with_an_oracle_document() -> None:
    items = [
        {"query": "q1", "rule_text": RULE, "answers": ["Oman"], "oracle_doc_ids": ["d1"],
         "head_name": "Iran", "relation_name": "Consult"},
        {"query": "q2", "rule_text": RULE, "answers": ["X"], "oracle_doc_ids": ["missing"]},
        {"query": "q1", "rule_text": RULE, "answers": ["Oman"], "oracle_doc_ids": ["d2"]},
    ]  # fmt: skip
    (demo,) = demos_from_items(items, CORPUS, n=3, seed=1)
    assert demo.fact == "Iran Consult Oman" and demo.document == "2014-02-01 Iran Meet Oman."


def test_a_consistent_majority_is_answered_without_retrieval() -> None:
    chain, llm, searcher = make("ve", ["First, a. The answer is Oman."] * 4 + ["The answer is X."])
    assert chain.generate_samples([sample()], ["p"]) == ["The answer is Oman."]
    assert len(llm.calls) == 1 and llm.calls[0][1:] == (5, 0.7)  # VE's 5 samples
    assert searcher.texts == []


def test_verify_and_edit_checks_each_sentence_on_its_own() -> None:
    drafts = [
        "First, Iran Meet Qatar. Second, Iran Consult Qatar. The answer is Qatar.",
        "The answer is Oman.",
        "The answer is Iraq.",
    ]
    chain, llm, searcher = make("ve", drafts)
    (answer,) = chain.generate_samples([sample()], ["p"])
    assert answer == "The answer is Oman."
    assert searcher.texts == ["whom does Iran Meet ?"] * 2  # one verifying question a sentence
    answering = [p for p, _, _ in llm.calls if p.endswith("\nA:") and "Iran Meet Oman." in p]
    assert len(answering) == 2  # each answered from its own documents
    final = llm.calls[-1][0]
    assert final.endswith("A: First, Iran Meet Oman. Second, Iran Meet Oman. The answer is")
    assert chain.traces[0]["consistency"] == pytest.approx(2 / 5)  # Qatar, Oman, Iraq, Qatar, Oman


def test_chain_of_knowledge_corrects_progressively() -> None:
    drafts = ["First, Iran Meet Qatar. Second, Iran Consult Qatar. The answer is Qatar."] * 2
    drafts += ["no answer", "The answer is Oman.", "The answer is Iraq.", "The answer is X."]
    chain, llm, _ = make("cok", drafts)
    (answer,) = chain.generate_samples([sample()], ["p"])
    assert answer == "The answer is Oman."
    assert llm.calls[0][1] == 10  # CoK draws 10 samples
    assert chain.traces[0]["consistency"] == 0.4  # Qatar twice among the first 5 answers
    regenerated = [p for p, _, _ in llm.calls if p.endswith("Second,")]
    assert len(regenerated) == 1 and regenerated[0].endswith("A: First, Iran Meet Oman. Second,")
    edits = [p for p, _, _ in llm.calls if p.endswith("Edited sentence:")]
    assert [e.split("Sentence: ")[-1].split("\n")[0] for e in edits] == [
        "Iran Meet Qatar.",  # rationale 1 as drafted
        "Iran Consult Oman.",  # rationale 2 as regenerated after the edited rationale 1
    ]
    assert all("Rule:" not in e.split("Knowledge: ")[-1] for e in edits)


def test_rulerag_cok_shows_and_searches_with_the_rules() -> None:
    drafts = ["First, Iran Meet Qatar. Second, x. The answer is Qatar.", "The answer is Oman."]
    drafts += ["The answer is Iraq.", "The answer is X.", "The answer is Y."]
    chain, llm, searcher = make("cok", drafts, rules=True)
    query = sample((RULE,))
    chain.generate_samples([query], [chain.render(None, "rule", query)])
    assert searcher.texts and all(t.endswith(RULE) for t in searcher.texts)  # q ∘ r
    assert llm.calls[0][0].count("Rules: ") == 4
    edits = [p for p, _, _ in llm.calls if p.endswith("Edited sentence:")]
    assert edits and all(f"Rule: {RULE}" in e for e in edits)
    assert "2014-02-01 Iran Meet Oman." in edits[0]  # the rule-guided search's best document


def test_the_api_llm_asks_n_times_at_the_chains_temperature_and_restores_it() -> None:
    from rulerag.generation.chains import api_llm

    class Api:
        temperature, max_tokens = 0.0, 10
        seen: list[tuple[str, float, int]] = []

        def generate(self, prompts):
            self.seen += [(p, self.temperature, self.max_tokens) for p in prompts]
            return [f"{p}#{i}" for i, p in enumerate(prompts)]

    api = Api()
    out = api_llm(api)(["a", "b"], 3, 0.7, 144)
    assert out == [["a#0", "a#1", "a#2"], ["b#3", "b#4", "b#5"]]
    assert {(t, m) for _, t, m in api.seen} == {(0.7, 144)}
    assert (api.temperature, api.max_tokens) == (0.0, 10)


@pytest.mark.slow
def test_local_sampling_gives_n_generations_and_greedy_repeats_generate() -> None:
    import torch

    from rulerag.generation.local import LocalGenerator

    torch.manual_seed(0)
    model = LocalGenerator.from_pretrained("smollm2", max_new_tokens=6, chat_template=False)
    prompts = ["Q: what does Iran Consult ?\nA:", "Q: who meets Oman ?\nA:"]
    sampled = model.sample(prompts, 4, 1.5, max_new_tokens=6)
    assert [len(texts) for texts in sampled] == [4, 4]
    assert len({t for texts in sampled for t in texts}) > 2  # sampling, not one text repeated
    greedy = model.sample(prompts, 2, 0.0)
    assert greedy == [[text, text] for text in model.generate(prompts)]
