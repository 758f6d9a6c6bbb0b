"""Document labels for R²AG's query-document matching (QDM) loss (paper §3.5, Eq. 8).

`answer`: a document is relevant when it names a gold answer as whole words, case-folded, the
same test as retrieval's Recall@k (`rulerag.retrieval.metrics`), so "new" does not label a
document about "new york". `oracle`: relevant when it is one of the benchmark's oracle
documents for the query (F_R's `oracle_doc_ids`: documents about the subject through a
selected rule's body relation).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from rulerag.retrieval.metrics import answer_pattern, contains_answer

__all__ = ["LABEL_MODES", "document_labels"]

LABEL_MODES = ("answer", "oracle")


def document_labels(
    texts: Sequence[str],
    *,
    mode: str = "answer",
    answers: Iterable[str] = (),
    doc_ids: Sequence[str] = (),
    oracle_ids: Iterable[str] = (),
) -> np.ndarray:
    """0/1 per document (float32), by `mode` (see the module notes)."""
    if mode == "answer":
        pattern = answer_pattern(answers)
        return np.array([contains_answer(t, pattern) for t in texts], dtype=np.float32)
    if mode == "oracle":
        if len(doc_ids) != len(texts):
            raise ValueError("oracle labels need one document id per document")
        oracle = set(oracle_ids)
        return np.array([d in oracle for d in doc_ids], dtype=np.float32)
    raise ValueError(f"label mode must be one of {LABEL_MODES}, not {mode!r}")
