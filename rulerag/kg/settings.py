"""params.yaml's `ingest` section as typed settings (read strictly): how KGs are read and
repaired, and users' own KGs (`ingest.custom`).

The registry (`registry.py`: the known KGs, `get_spec`) reads these settings; they look the
registry up only when checked or asked (`IngestSettings.__post_init__`, `kind`), so importing
them imports no reader.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from annotated_types import MaxLen, MinLen

from rulerag.settings import DatasetName, Fraction, load_settings

__all__ = ["CustomKG", "DuplicatePolicy", "IngestSettings", "ingest_settings"]


@dataclass(frozen=True)
class CustomKG:
    """A user's own KG (params.yaml `ingest.custom.<name>`): a folder of train/valid/test files
    read by `readers.read_generic`."""

    path: str  # not blank ("" would be the working directory): see __post_init__
    delimiter: Annotated[str, MinLen(1), MaxLen(1)] = "\t"  # one character, as csv wants
    #: a strptime format (unit: day), "year", "int" (an opaque step), or None (a static KG)
    time_format: str | None = None

    def __post_init__(self) -> None:
        """Refuse values the types let through but no file can be read with, here (naming the
        key) rather than as a confusing error on every line of the KG (pydantic reports a
        ValueError raised here as a settings error of this entry)."""
        if not self.path.strip():
            raise ValueError(f"path {self.path!r} is blank")
        if self.delimiter.isalnum() or self.delimiter in _BAD_DELIMITERS:
            raise ValueError(
                f"delimiter {self.delimiter!r} cannot separate fields (letters, digits, "
                "the quote, line breaks and NUL are refused; use e.g. a tab or ',')"
            )
        if self.time_format is not None and self.time_format not in ("year", "int"):
            _check_date_format(self.time_format)


#: delimiters that would split names, lines or quoted fields instead of columns
_BAD_DELIMITERS = frozenset('"\r\n\x00')


def _check_date_format(fmt: str) -> None:
    """A strptime format must read back the year of a date it wrote: `%Q` (a bad directive) or
    `yyyy-mm-dd` (no directive at all) would fail, or give 1900, on every line of the KG."""
    sample = dt.date(2001, 2, 3)
    try:
        year = dt.datetime.strptime(sample.strftime(fmt), fmt).year
    except ValueError as err:
        raise ValueError(f"time_format {fmt!r} is not a strptime format: {err}") from None
    if year != sample.year:
        raise ValueError(
            f"time_format {fmt!r} has no year (%Y or %y): use a strptime format such as "
            "'%Y-%m-%d', or 'year' / 'int' for integer times"
        )


#: exact duplicate facts: drop (count them), keep, or fail (`ingest.repair`)
DuplicatePolicy = Literal["drop", "keep", "error"]


@dataclass(frozen=True)
class IngestSettings:
    """params.yaml `ingest`."""

    HELP: ClassVar[str] = (
        "Stage `ingest`: read a KG (local mirror RULERAG_DATA_DIR, else download) into "
        "data/<dataset>/kg/{facts,entities,relations}.parquet + stats.json."
    )

    #: exact duplicate facts: drop (count them in stats.json), keep, or error (see `repair`)
    duplicates: DuplicatePolicy = field(
        default="drop",
        metadata={
            "help": (
                "Exact duplicate facts (same head, relation, tail and time within one split):\n"
                "  drop  - keep the first, count the rest in stats.json (duplicates_dropped)\n"
                "  keep  - keep every line as read\n"
                "  error - fail, naming the file and both lines"
            )
        },
    )
    #: which source format to read, by dataset name (default: the first found in the mirror)
    source: dict[DatasetName, str] = field(
        default_factory=dict,
        metadata={
            "help": (
                "Which source format to read when a dataset has several, by dataset name, e.g.\n"
                "  source: {icews14: xerte}\n"
                "Datasets not named here use the first source of the registry found in the mirror."
            )
        },
    )
    #: users' own KGs, by name
    custom: dict[DatasetName, CustomKG] = field(
        default_factory=dict,
        metadata={
            "help": (
                "Users' own KGs, name -> spec. A directory holding train/valid/test files "
                "(.tsv/.csv/.txt) with columns head, relation, tail[, time]:\n"
                "  custom:\n"
                '    mykg: {path: /data/mykg, delimiter: "\\t", time_format: "%Y-%m-%d"}\n'
                'time_format: a strptime format (unit: day), "year", "int" (opaque step), or '
                "null (static)."
            )
        },
    )
    #: a temporal KG without a train split: the earliest time steps of valid holding this share
    #: of its facts become train (`ingest.derive_train`); None leaves the KG without train
    train_from_valid: Fraction | None = field(
        default=0.7,
        metadata={
            "help": (
                "A temporal KG published without its train split (WIKI: RE-Net's train.txt, "
                "539,286 facts, is not reachable here): the earliest whole years of valid holding "
                "this share of its facts become train (mining, corpus), the later years stay valid "
                "(F_R / F_G), test is untouched. WIKI with 0.7: train 1997-2005 (52,857 facts), "
                "valid 2006-2007 (13,636), test 2008-2017. null: ingest the splits as published. A "
                "KG with a train file never changes."
            )
        },
    )

    def __post_init__(self) -> None:
        """`source` names, for each dataset, one of its sources (a custom KG has one); a custom
        KG may not take a registry KG's name (it would silently replace that KG)."""
        from rulerag.kg.registry import DATASETS, known_datasets

        taken = sorted(set(self.custom) & set(DATASETS))
        if taken:
            raise ValueError(
                f"custom: {taken} already name KGs of the registry; give your KG another name"
            )
        for name, source in self.source.items():
            if name in self.custom:
                known = ["generic"]
            elif name in DATASETS:
                known = [s.name for s in DATASETS[name].sources]
            else:
                raise ValueError(
                    f"source: unknown dataset {name!r} ({', '.join(known_datasets(self))})"
                )
            if source not in known:
                raise ValueError(
                    f"source.{name}: {source!r} is not one of {name}'s sources {known}"
                )

    def known_datasets(self) -> list[str]:
        """The registry's KGs and `custom`'s, by name."""
        from rulerag.kg.registry import known_datasets

        return known_datasets(self)

    def kind(self, name: str) -> str:
        """ "temporal" or "static": a known dataset's kind (`get_spec`)."""
        from rulerag.kg.registry import get_spec

        return get_spec(name, self).kind


def ingest_settings(section: Mapping[str, Any] | None) -> IngestSettings:
    """params.yaml's `ingest` section as typed settings, strictly; a custom KG's name must be
    a dataset name (`DatasetName`: it becomes data/<name>/ wherever the section is read)."""
    return load_settings(IngestSettings, section, "ingest")
