"""The canonical KG every reader produces and every later stage consumes.

facts:     head, relation, tail (int32 ids), time (nullable Int64), split (train/valid/test)
entities:  id (int32), name (readable), key (identifier in the source files)
relations: id (int32), name (readable), key (identifier in the source files)

Times are integers in the KG's `time_unit` so that later stages can compare and subtract them:
"day" = days since 1970-01-01 (ICEWS), "year" = calendar year, "index" = an opaque ordinal step
(RE-Net's YAGO and WIKI number their years 0, 1, ... without saying which year 0 is).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd

SPLITS: tuple[str, ...] = ("train", "valid", "test")
TimeUnit = Literal["day", "year", "index"]
TIME_UNITS: tuple[str, ...] = ("day", "year", "index")
EPOCH = dt.date(1970, 1, 1)

FACT_COLUMNS = ("head", "relation", "tail", "time", "split")


@dataclass
class KnowledgeGraph:
    """A KG in canonical form plus what the reader noticed while reading it."""

    facts: pd.DataFrame
    entities: pd.DataFrame
    relations: pd.DataFrame
    time_unit: TimeUnit | None = None
    #: granularity of one time step, e.g. "day" or "year" (for unit "index" the real meaning)
    time_granularity: str | None = None
    #: human-readable remarks (e.g. a split missing from the source)
    notes: list[str] = field(default_factory=list)
    #: raw lines read per split, before any repair
    lines_read: dict[str, int] = field(default_factory=dict)
    #: source files read, relative name -> sha256 (provenance)
    inputs: dict[str, str] = field(default_factory=dict)
    #: the file each split was read from (for messages that name file and line)
    split_files: dict[str, Path] = field(default_factory=dict)

    @property
    def temporal(self) -> bool:
        return self.time_unit is not None

    def split(self, name: str) -> pd.DataFrame:
        """The facts of one split (a view in file order)."""
        return self.facts[self.facts["split"] == name]


def days_to_iso(days: int) -> str:
    """Render a day-unit time as YYYY-MM-DD."""
    return (EPOCH + dt.timedelta(days=int(days))).isoformat()


def format_time(value: int | None, unit: TimeUnit | None) -> str | None:
    """Render a stored time for people and prompts: a date for days, the year for years, and
    `step 211` for an opaque ordinal step (a bare `211` reads as a year to a reader or an LLM;
    yearly KGs whose step-0 year is known are stored as years, see the registry)."""
    if value is None or pd.isna(value) or unit is None:
        return None
    if unit == "day":
        return days_to_iso(int(value))
    if unit == "index":
        return f"step {int(value)}"
    return str(int(value))


def make_facts(
    heads: list[int],
    relations: list[int],
    tails: list[int],
    times: list[int | None],
    splits: list[str],
) -> pd.DataFrame:
    """Build a facts frame with the canonical dtypes."""
    return pd.DataFrame(
        {
            "head": pd.array(heads, dtype="int32"),
            "relation": pd.array(relations, dtype="int32"),
            "tail": pd.array(tails, dtype="int32"),
            "time": pd.array(times, dtype="Int64"),
            "split": pd.array(splits, dtype="string"),
        }
    )


def make_vocab(ids: list[int], names: list[str], keys: list[str]) -> pd.DataFrame:
    """Build an entities/relations frame sorted by id."""
    frame = pd.DataFrame(
        {
            "id": pd.array(ids, dtype="int32"),
            "name": pd.array(names, dtype="string"),
            "key": pd.array(keys, dtype="string"),
        }
    )
    return frame.sort_values("id", kind="stable").reset_index(drop=True)
