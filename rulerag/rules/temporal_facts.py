"""A temporal KG's facts as the temporal miners index them: one checked read for both.

TLogic's walk miner (`temporal_miner`) and the exact miner of rules with constants
(`temporal_constants`) index the same distinct (head, relation, tail, time) facts, and both
must refuse a fact without a time or with an id outside the declared ranges before any
composite key is built from them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["temporal_fact_arrays"]


def temporal_fact_arrays(
    facts: pd.DataFrame, n_entities: int, n_relations: int, needed_by: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct facts' head, relation, tail and time as int64 arrays.

    Raises ValueError, naming `needed_by` (what needs the times), for a fact without a time,
    and for entity or relation ids outside [0, n_entities) and [0, n_relations)."""
    cols = facts[["head", "relation", "tail", "time"]]
    if cols["time"].isna().any():
        raise ValueError(f"{needed_by} needs a time on every fact (found a null time)")
    cols = cols.drop_duplicates()
    h = cols["head"].to_numpy(np.int64)
    r = cols["relation"].to_numpy(np.int64)
    o = cols["tail"].to_numpy(np.int64)
    t = cols["time"].to_numpy(np.int64)
    if len(h) and (min(h.min(), o.min()) < 0 or max(h.max(), o.max()) >= n_entities):
        raise ValueError(f"entity ids must lie in [0, {n_entities})")
    if len(r) and (r.min() < 0 or r.max() >= n_relations):
        raise ValueError(f"relation ids must lie in [0, {n_relations})")
    return h, r, o, t
