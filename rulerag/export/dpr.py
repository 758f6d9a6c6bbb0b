"""F_R as retriever training data in DPR's JSON format (one file per variant).

DPR's `biencoder_data` (and Tevatron's and sentence-transformers' DPR readers) take a JSON list
of `{"question", "answers", "positive_ctxs", "negative_ctxs", "hard_negative_ctxs"}`, each
context a `{"title", "text", "passage_id"}`. The items are the ones `train_retriever` trains on
(`rulerag.retrieval.training.make_items`): `rgft` one per (query, rule) with the question
`q ∘ r` (the rule in `retrieve.rule_query`'s form), `ssft` one per query with `q` alone; the
positives are the oracle documents. Hard negatives are the untuned retriever's top list for the
question minus every oracle document of the query (under any rule: what RGFT never uses as a
negative). `negative_ctxs` stays empty: the paper trains with in-batch negatives. Documents have
no title (a KG link is one sentence), so `title` is "".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rulerag.retrieval.training import TrainItem

__all__ = ["DPR_VARIANTS", "context", "dpr_records"]

#: variant -> whether its questions carry the rule (train_retriever's modes)
DPR_VARIANTS: dict[str, bool] = {"rgft": True, "ssft": False}


def context(doc_id: str, text: str) -> dict[str, str]:
    """One DPR context."""
    return {"title": "", "text": text, "passage_id": doc_id}


def dpr_records(
    items: Sequence[TrainItem],
    answers: Mapping[str, Sequence[str]],
    doc_ids: Sequence[str],
    contents: Sequence[str],
    top_rows: np.ndarray,
    hard_negatives: int,
) -> list[dict[str, Any]]:
    """DPR records of `items`: `top_rows[i]` is the untuned retriever's ranked corpus rows for
    item i (-1 where it found fewer); `answers` the gold answers by query id."""
    if len(top_rows) != len(items):
        raise ValueError(f"{len(top_rows)} top lists for {len(items)} items")
    records = []
    for item, rows in zip(items, top_rows, strict=True):
        hard = [int(r) for r in rows if r >= 0 and int(r) not in item.answers_rows]
        records.append(
            {
                "question": item.text,
                "answers": list(answers.get(item.qid, ())),
                "positive_ctxs": [context(doc_ids[r], contents[r]) for r in item.positives],
                "negative_ctxs": [],
                "hard_negative_ctxs": [
                    context(doc_ids[r], contents[r]) for r in hard[:hard_negatives]
                ],
                "qid": item.qid,
                "item_id": item.item_id,
            }
        )
    return records
