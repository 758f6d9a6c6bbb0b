"""Metrics and result tables: answer extraction, EM, Token-F1, Recall@k, the Table 2 report.

Pure functions on strings and small tables, so the numbers a stage reports can be checked by
hand (tests/unit/test_generation_metrics.py) and recomputed from `predictions.jsonl`;
`grid_report` reads the row folders into stage `report`'s tables and claims.
"""

from rulerag.evaluation.metrics import (
    aggregate,
    exact_match,
    extract_answer,
    normalize_answer,
    recall_at_k,
    score_prediction,
    token_f1,
)

__all__ = [
    "aggregate",
    "exact_match",
    "extract_answer",
    "normalize_answer",
    "recall_at_k",
    "score_prediction",
    "token_f1",
]
