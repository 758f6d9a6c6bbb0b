"""Mined rules read as columns: `RuleTable`, a `Sequence[Rule]` over a rules frame that builds a
`Rule` object only when one is asked for, and `ConstantRules`, the rules with constants of one
head relation in TLogic's ids as arrays (what `constant_firings` fires).

FB15k-237 with AnyBURL's rules with constants has 6.9 million rules. As `Rule` objects they
took 5 GB and their `AppliedRule` copies (read forwards and backwards) 3.8 GB more, before a
single query was answered (`apply_rules` peaked at 14.2 GB). Rule application fires rules with
constants in bulk, as arrays, anyway: here they go from the frame's columns to those arrays
without an object per rule, and only the few thousand closed rules (which are grounded one at
a time) and the rules an answer names become objects.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, overload

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from rulerag.rules.bank import STAT_COLUMNS, rule_of_row
from rulerag.rules.rule import Rule

if TYPE_CHECKING:
    from rulerag.rules.applied_rule import AppliedRule

__all__ = [
    "RULE_TABLE_COLUMNS",
    "ConstantRules",
    "RuleTable",
]

#: the columns of a rules frame a `Rule` is built from (the others, e.g. `text`, are derived)
RULE_TABLE_COLUMNS = ("head_relation", "body", "temporal", "var_constraints", *STAT_COLUMNS,
                      "constants")  # fmt: skip
#: `Rule.body_json` of at most one atom, `Rule.constants_json` of one or two pairs
_BODY = r"^\[(?:\[(?P<rel>\d+), (?P<sub>\d+), (?P<obj>\d+)\])?\]$"
_CONSTANTS = r"^\[\[(?P<v1>\d+), (?P<e1>\d+)\](?:, \[(?P<v2>\d+), (?P<e2>\d+)\])?\]$"


class RuleTable(Sequence[Rule]):
    """The rules of a rules frame (`bank.rules_frame`'s columns, `RULE_TABLE_COLUMNS` at
    least), in its row order, each built into a `Rule` when asked for. `closed` are the
    positions of the rules without constants, `constant_columns` the others as arrays."""

    def __init__(self, frame: pd.DataFrame) -> None:
        missing = [c for c in RULE_TABLE_COLUMNS[:-1] if c not in frame.columns]
        if missing:
            raise ValueError(f"a rules frame without the columns {missing}")
        self._frame = frame.reset_index(drop=True)
        self._has_constants = "constants" in frame.columns
        #: per row, whether the rule has constants (a frame without the column has none)
        self._constant = (
            (self._frame["constants"] != "[]").to_numpy(bool)
            if self._has_constants
            else np.zeros(len(frame), bool)
        )
        self.closed = np.flatnonzero(~self._constant)

    def __len__(self) -> int:
        return len(self._frame)

    @overload
    def __getitem__(self, index: int) -> Rule: ...
    @overload
    def __getitem__(self, index: slice) -> list[Rule]: ...
    def __getitem__(self, index: int | slice) -> Rule | list[Rule]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        row = self._frame.iloc[index]
        return rule_of_row(
            row["head_relation"], row["body"], row["temporal"], row["var_constraints"],
            [row[c] for c in STAT_COLUMNS], row["constants"] if self._has_constants else None,
        )  # fmt: skip

    def __iter__(self) -> Iterator[Rule]:
        return self.rules(np.arange(len(self)))

    def rules(self, positions: np.ndarray) -> Iterator[Rule]:
        """The rules at `positions`, built one at a time."""
        part = self._frame.iloc[positions]
        columns = [part[c] for c in RULE_TABLE_COLUMNS[:4]] + [part[c] for c in STAT_COLUMNS]
        constants = part["constants"] if self._has_constants else [None] * len(part)
        for values in zip(*columns, constants, strict=True):
            yield rule_of_row(*values[:4], values[4:-1], values[-1])

    def constant_columns(self) -> dict[str, np.ndarray]:
        """The rules with constants whose shape the arrays hold (one body atom at most, one
        or two constants) as columns: position, head_relation, temporal, length, the body atom
        (body_rel, body_sub, body_obj; -1 without one), the constants (v1, e1, v2, e2; -1 for
        an absent second), confidence, pca_confidence, std_confidence, body_support (NaN when
        not given). Rules with constants of another shape are in `odd` (positions)."""
        frame = self._frame
        if not self._has_constants:
            return {"position": np.zeros(0, np.int64), "odd": np.zeros(0, np.int64)}
        positions = np.flatnonzero(self._constant)
        part = frame.iloc[positions]
        body = _groups(part["body"], _BODY, ("rel", "sub", "obj"))
        constants = _groups(part["constants"], _CONSTANTS, ("v1", "e1", "v2", "e2"))
        fits = body.pop("match") & constants.pop("match")
        out: dict[str, np.ndarray] = {
            "position": positions[fits],
            "head_relation": part["head_relation"].to_numpy(np.int64)[fits],
            "temporal": part["temporal"].to_numpy(bool)[fits],
        }
        for name, values in body.items():
            out[f"body_{name}"] = values[fits]
        for name, values in constants.items():
            out[name] = values[fits]
        out["length"] = (out["body_rel"] >= 0).astype(np.int64)
        for name in ("confidence", "pca_confidence", "std_confidence", "body_support"):
            out[name] = part[name].to_numpy(np.float64, na_value=np.nan)[fits]
        out["odd"] = positions[~fits]
        return out


def _groups(column: pd.Series, pattern: str, names: Sequence[str]) -> dict[str, np.ndarray]:
    """The pattern's named groups of every string as int64 (-1 where a group did not take
    part), and `match`: whether the whole string matched."""
    strings = pa.array(column)  # the frame's own Arrow strings where it has them: no copy
    if not (pa.types.is_string(strings.type) or pa.types.is_large_string(strings.type)):
        strings = pa.array(column.astype(str).to_numpy(object), pa.string())
    found = pc.extract_regex(strings, pattern)
    out = {"match": pc.is_valid(found).to_numpy(zero_copy_only=False)}
    for name in names:
        text = pc.struct_field(found, name).fill_null("")
        values = pc.if_else(pc.equal(text, ""), "-1", text)
        out[name] = pc.cast(values, pa.int64()).to_numpy(zero_copy_only=False)
    return out


@dataclass(frozen=True)
class ConstantRules:
    """Rules with constants of one head relation (TLogic ids), in application order, as
    arrays: the rule each came from (`index`, its position in the input rules), the head
    constant (the candidate it gives), the body relation (-1: no body) and the body's
    constant (-1: none, an ac2 or zero-body rule), the confidence, and whether it is a static
    rule read backwards (`AppliedRule.reversed`)."""

    index: np.ndarray
    constant: np.ndarray
    body: np.ndarray
    body_constant: np.ndarray
    confidence: np.ndarray
    reverse: np.ndarray

    def __len__(self) -> int:
        return len(self.index)

    @classmethod
    def of(cls, rules: Sequence[AppliedRule]) -> ConstantRules:
        """The arrays of `AppliedRule`s with constants, in their order."""
        return cls(
            np.array([r.index for r in rules], np.int64),
            np.array([r.constant for r in rules], np.int64),
            np.array([r.body[0] if r.body else -1 for r in rules], np.int64),
            np.array([-1 if r.body_constant is None else r.body_constant for r in rules], np.int64),
            np.array([r.confidence for r in rules], np.float64),
            np.array([r.reverse for r in rules], bool),
        )

    @classmethod
    def concat(cls, parts: Sequence[ConstantRules]) -> ConstantRules:
        """`parts` one after the other."""
        names = [f.name for f in fields(cls)]
        if not parts:
            return cls.of([])
        return cls(*(np.concatenate([getattr(p, n) for p in parts]) for n in names))

    def take(self, rows: np.ndarray) -> ConstantRules:
        """The rules at `rows` (positions or a mask), in that order."""
        return ConstantRules(*(getattr(self, f.name)[rows] for f in fields(self)))
