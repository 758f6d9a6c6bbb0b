"""Rule retrieval on a RuleQA benchmark: the bank as the library, test queries with gold rules.

A query's gold rules are the bank rules whose head is its relation: RuleRAG's own matching
(`head` selection), so that row is the oracle (Recall@k is 100 whenever the bank has a rule
for the relation) and every other method is measured against it without seeing the relation.
Self-induction demonstrations are F_R items (a query and a rule of its relation), never test
queries.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pandas as pd

from rulerag.io import read_jsonl
from rulerag.rule_retrieval.experiment import RuleRetrievalTask
from rulerag.rule_retrieval.library import RuleLibrary

__all__ = ["reference_rows", "ruleqa_task"]


def ruleqa_task(
    dataset_dir: Path, queries: int | None, shots: int, seed: int
) -> tuple[RuleRetrievalTask, pd.DataFrame, list[dict[str, Any]]]:
    """(the task, the bank, the sampled test records) for `data/<dataset>/`."""
    base = Path(dataset_dir)
    bank = pd.read_parquet(base / "rules" / "bank.parquet")
    relations = pd.read_parquet(base / "kg" / "relations.parquet")
    names = dict(zip(relations["id"], relations["name"], strict=True))
    library = RuleLibrary.from_bank(bank, names)
    test = read_jsonl(base / "benchmark" / "test.jsonl")
    rng = random.Random(seed)
    if queries is not None and queries < len(test):
        test = [test[i] for i in sorted(rng.sample(range(len(test)), queries))]
    by_head: dict[int, set[str]] = {}
    for rule_id, head in zip(bank["rule_id"], bank["head_relation"], strict=True):
        by_head.setdefault(int(head), set()).add(str(rule_id))
    items = [r for r in read_jsonl(base / "benchmark" / "f_r.jsonl") if r.get("rule_text")]
    demos = rng.sample(items, min(shots, len(items)))
    task = RuleRetrievalTask(
        library=library,
        qids=tuple(str(r["qid"]) for r in test),
        queries=tuple(str(r["query"]) for r in test),
        gold=tuple(frozenset(by_head.get(int(r["relation"]), ())) for r in test),
        shots=tuple((str(d["query"]), str(d["rule_text"])) for d in demos),
    )
    return task, bank, test


def reference_rows(
    task: RuleRetrievalTask,
    bank: pd.DataFrame,
    test: list[dict[str, Any]],
    top_k: int,
    similarity: tuple[int, float] | None,
) -> list[dict[str, Any]]:
    """RuleRAG's own selections as rows beside the retrieval methods: `head` (the oracle) and,
    given (N, θ), `similarity` (Sentence-BERT over the bank's texts, as build_benchmark)."""
    from rulerag.rules.selection import minilm_encoder, select_by_head, select_by_similarity

    rows = [
        {"method": "head", "ranked": select_by_head([r["relation"] for r in test], bank, top_k)}
    ]
    if similarity is not None:
        top_n, threshold = similarity
        ranked = select_by_similarity(task.queries, bank, minilm_encoder(), top_n, threshold)
        rows.append({"method": "similarity", "ranked": ranked})
    return rows
