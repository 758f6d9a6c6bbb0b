"""How good a rule selection is: Recall@k of the gold rules and Match of the final answers.

Recall@k (the paper's): the share of queries with a gold rule among the top k selected. On
RuleQA a query's gold rules are the bank rules whose head is its relation (RuleRAG's own
matching), so `head` selection is the oracle and every other method is measured against it
without seeing the relation. Match (Rau et al., 2024, as the paper uses it): the gold answer
appears, case-insensitively, in the LLM's answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["match", "recall_at_k"]


def recall_at_k(
    ranked: Sequence[Sequence[str]], gold: Sequence[Iterable[str]], ks: Sequence[int]
) -> dict[int, float]:
    """k -> share of queries (0..1) whose top-k holds a gold rule; queries without gold rules
    are counted as misses (they are not skipped, so methods compare on the same queries)."""
    if len(ranked) != len(gold):
        raise ValueError("one ranking per query is needed")
    if not ranked:
        return {k: 0.0 for k in ks}
    gold_sets = [set(g) for g in gold]
    return {
        k: sum(bool(g & set(r[:k])) for r, g in zip(ranked, gold_sets, strict=True)) / len(ranked)
        for k in ks
    }


def match(outputs: Sequence[str], answers: Sequence[str]) -> float:
    """Share of outputs that contain their gold answer (case-insensitive, spaces collapsed)."""
    if len(outputs) != len(answers):
        raise ValueError("one output per answer is needed")
    if not outputs:
        return 0.0

    def norm(text: str) -> str:
        return " ".join(str(text).lower().split())

    return sum(norm(a) in norm(o) for o, a in zip(outputs, answers, strict=True)) / len(outputs)
