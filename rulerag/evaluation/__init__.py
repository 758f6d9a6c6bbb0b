"""Metrics and result tables: answer extraction, EM, Token-F1, Recall@k, the Table 2 report.

Pure functions on strings and small tables, so the numbers a stage reports can be checked by
hand (tests/unit/test_generation_metrics.py) and recomputed from `predictions.jsonl`;
`grid_report` reads the row folders into stage `report`'s tables and claims.

The package re-exports `metrics`' public names, which `metrics.__all__` lists (one list).
"""

from rulerag.evaluation import metrics
from rulerag.evaluation.metrics import *  # noqa: F403 (the names metrics.__all__ lists)

__all__ = list(metrics.__all__)
