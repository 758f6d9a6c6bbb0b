"""The fake OpenAI-compatible server (`rulerag.fake_openai`, which the benchmarks use
too), and the answers a chat LLM gives to rule retrieval's two prompts."""

from __future__ import annotations

from rulerag.fake_openai import FakeOpenAI, RawReply
from rulerag.rule_retrieval.prompts import R3_TEMPLATE_HEAD

__all__ = ["FakeOpenAI", "RawReply", "fake_rule_llm"]


def fake_rule_llm(last: str) -> str:
    """A chat API's answers to the two prompts: a ranking for R³, a rule for self-induction."""
    if last.startswith(R3_TEMPLATE_HEAD):
        return "[2] > [1]"
    return "Make a visit leads to Host a visit"
