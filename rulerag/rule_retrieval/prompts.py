"""The SIAR + R³ paper's two prompts (its Appendix A, word for word) and the parsing of their
answers.

Self-induction: an instruction, few-shot demonstrations `query: {q} rule: {r}`, then the
query; the answer's first line is the self-induced rule. R³ (after RankGPT): the numbered
candidate rules and the query, the answer a ranking `[2] > [1] > ...`. Small models answer
with missing, repeated or invented identifiers; `parse_ranking` keeps the valid ones in the
order given and appends the rest in the retriever's order, and says what it had to repair.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "R3_TEMPLATE_HEAD",
    "SI_INSTRUCTION",
    "Ranking",
    "induced_rule",
    "parse_ranking",
    "r3_prompt",
    "si_prompt",
]

SI_INSTRUCTION = (
    "You are given a Query. Please write the inferential rule may help answer the question. "
    "The rule should summarize and abstract the facts in the query and catch the underlying "
    "logic. I will give some examples. Just output the rule and do not output anything else."
)

R3_TEMPLATE_HEAD = (
    "You are an intelligent assistant that can rank rules based on their relevancy to the "
    "query. If the abstract knowledge in a rule can be instantiated into the facts in query, "
    "that rule is more relevant. If a rule can be applied to the query and thus be helpful for "
    "reasoning, that rule is more relevant. I will provide you with {num} rules, each "
    "indicated by a numerical identifier []. Rank the rules based on their relevance to the "
    "query: {query}."
)
R3_TEMPLATE_TAIL = (
    "Query: {query}.\n"
    "Rank the {num} rules above based on their relevance to the query. All the rules should be "
    "included and listed using identifiers, in descending order of relevance. The output "
    "format should be [] > [], e.g., [2] > [1], Only respond with the ranking results, do not "
    "say any word or explain."
)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def si_prompt(query: str, shots: Sequence[tuple[str, str]]) -> str:
    """The self-induction prompt: instruction, `query: ... rule: ...` demonstrations, query."""
    lines = [SI_INSTRUCTION, ""]
    lines += [f"query: {_one_line(q)} rule: {_one_line(r)}" for q, r in shots]
    lines.append(f"query: {_one_line(query)} rule:")
    return "\n".join(lines)


#: what small models put before the rule despite "just output the rule": `rule:`, `The rule
#: is:`, `The inferential rule to be applied is:`
_PREAMBLE = re.compile(
    r"^\s*(?:the\s+)?(?:inferential\s+)?rule(?:\s+(?:to\s+be\s+applied|would\s+be))?"
    r"(?:\s+is)?\s*:\s*",
    re.IGNORECASE,
)


def induced_rule(generation: str) -> str:
    """The self-induced rule in a generation: its first line with content, without a label
    such as `rule:` or `The rule is:`. A line that only announces the rule (it ends with a
    colon, e.g. SmolLM2's "The inferential rule that can be applied to the given query is:")
    is skipped: the rule is on the next line."""
    for line in generation.splitlines():
        line = _PREAMBLE.sub("", line.strip()).strip()
        if line and not line.endswith(":"):
            return line
    return ""


def r3_prompt(query: str, rules: Sequence[str]) -> str:
    """The R³ prompt for the candidate `rules` (numbered from 1 in the retriever's order)."""
    query = _one_line(query).rstrip(".")
    lines = [R3_TEMPLATE_HEAD.format(num=len(rules), query=query)]
    lines += [f"[{i}] {_one_line(rule)}" for i, rule in enumerate(rules, 1)]
    lines.append(R3_TEMPLATE_TAIL.format(num=len(rules), query=query))
    return "\n".join(lines)


@dataclass(frozen=True)
class Ranking:
    """A parsed R³ answer: `order` holds 0-based candidate positions, all of them once."""

    order: tuple[int, ...]
    listed: int  # valid identifiers the model gave
    missing: int  # candidates it left out (appended in the retriever's order)
    repeated: int
    invented: int  # identifiers outside 1..n

    @property
    def repaired(self) -> bool:
        return bool(self.missing or self.repeated or self.invented)


_ID = re.compile(r"\[\s*(\d+)\s*\]|(?<![\w.])(\d+)(?![\w.])")


def parse_ranking(text: str, n: int) -> Ranking:
    """Candidate positions in the order the model ranked them (`[3] > [1] > [2]`; bare
    numbers are accepted too), then every candidate it did not name in retriever order."""
    order: list[int] = []
    repeated = invented = 0
    for bracketed, bare in _ID.findall(text):
        number = int(bracketed or bare)
        if not 1 <= number <= n:
            invented += 1
        elif number - 1 in order:
            repeated += 1
        else:
            order.append(number - 1)
    listed = len(order)
    order += [i for i in range(n) if i not in set(order)]
    return Ranking(tuple(order), listed, n - listed, repeated, invented)
