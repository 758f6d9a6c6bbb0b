"""The edges rules are grounded on: every fact with its inverse (`edges_with_inverses`), indexed
per relation and sorted by (subject, time) for `searchsorted` lookups (`EdgeIndex`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

__all__ = [
    "Adjacency",
    "EdgeIndex",
    "edges_with_inverses",
    "latest_per_group",
]


def edges_with_inverses(facts: pd.DataFrame, n_relations: int) -> pd.DataFrame:
    """Every fact as (sub, rel, obj, ts) plus its inverse (obj, rel + n, sub, ts); a static
    fact (no time) has ts 0."""
    forward = pd.DataFrame(
        {
            "sub": facts["head"].to_numpy(np.int64),
            "rel": facts["relation"].to_numpy(np.int64),
            "obj": facts["tail"].to_numpy(np.int64),
            "ts": pd.array(facts["time"], dtype="Int64").fillna(0).to_numpy(np.int64),
        }
    )
    inverse = forward.rename(columns={"sub": "obj", "obj": "sub"}).assign(
        rel=forward["rel"] + n_relations
    )
    return pd.concat([forward, inverse[forward.columns]], ignore_index=True).drop_duplicates()


@dataclass(frozen=True)
class Adjacency:
    """One relation's edges sorted by (subject, time): `code` = sub * span + (ts - t_min), so
    the edges of an entity within a time range are one `searchsorted` away."""

    code: np.ndarray
    obj: np.ndarray
    ts: np.ndarray


@dataclass(frozen=True)
class EdgeIndex:
    """A KG's edges per relation, sorted by (subject, time) for `searchsorted` lookups: what
    rules are grounded on (`apply_rules`, and `rule_predictions` for SAFRAN's clustering)."""

    by_relation: dict[int, Adjacency]
    t_min: int
    span: int
    n_entities: int  # above every entity id (codes key * n_entities + entity)
    _pairs: dict[int, np.ndarray] = field(default_factory=dict)
    _by_object: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def pairs(self, relation: int) -> np.ndarray:
        """The relation's (sub, obj) pairs as codes sub * n_entities + obj (cached)."""
        if relation not in self._pairs:
            adjacency = self.by_relation[relation]
            sub = adjacency.code // self.span
            self._pairs[relation] = np.unique(sub * self.n_entities + adjacency.obj)
        return self._pairs[relation]

    def by_object(self, relation: int) -> tuple[np.ndarray, np.ndarray]:
        """The relation's (objects, subjects), sorted by object (stable): who reaches a given
        entity, one `searchsorted` away (cached: every head relation's backward-read rules
        look their body relations up here)."""
        if relation not in self._by_object:
            adjacency = self.by_relation[relation]
            order = np.argsort(adjacency.obj, kind="stable")
            self._by_object[relation] = (adjacency.obj[order], adjacency.code[order] // self.span)
        return self._by_object[relation]

    @classmethod
    def build(cls, edges: pd.DataFrame) -> EdgeIndex:
        ts = edges["ts"].to_numpy(np.int64)
        t_min = int(ts.min()) if len(ts) else 0
        span = (int(ts.max()) - t_min + 1) if len(ts) else 1
        code = edges["sub"].to_numpy(np.int64) * span + (ts - t_min)
        rel = edges["rel"].to_numpy(np.int64)
        order = np.lexsort((code, rel))
        rel, code = rel[order], code[order]
        obj, ts = edges["obj"].to_numpy(np.int64)[order], ts[order]
        cuts = np.flatnonzero(np.diff(rel)) + 1
        by_relation = {}
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(rel)], strict=True):
            if hi > lo:
                by_relation[int(rel[lo])] = Adjacency(code[lo:hi], obj[lo:hi], ts[lo:hi])
        top = max(int(edges["sub"].max()), int(edges["obj"].max())) + 1 if len(edges) else 1
        return cls(by_relation, t_min, span, top)

    def ranges(
        self, adjacency: Adjacency, ents: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """[start, end) of each entity's edges with lo <= time < hi."""
        base = ents * self.span
        first = np.clip(lo - self.t_min, 0, self.span)
        stop = np.clip(hi - self.t_min, 0, self.span)
        start = np.searchsorted(adjacency.code, base + first, side="left")
        end = np.searchsorted(adjacency.code, base + stop, side="left")
        return start, np.maximum(end - start, 0)


def latest_per_group(columns: Sequence[np.ndarray], t0: np.ndarray) -> np.ndarray:
    """Row indices keeping, of the rows equal in `columns`, the one with the largest t0."""
    order = np.lexsort((-t0, *columns[::-1]))
    keep = np.ones(len(order), dtype=bool)
    if len(order) > 1:
        same = np.ones(len(order) - 1, dtype=bool)
        for column in columns:
            ordered = column[order]
            same &= ordered[1:] == ordered[:-1]
        keep[1:] = ~same
    return order[keep]
