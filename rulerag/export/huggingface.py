"""RuleQA as a folder that `datasets.load_dataset(folder, config)` reads as it is.

One data file per config (`corpus`, `rules`, `test`, `f_r`, `f_g`), Parquet or JSON Lines, and
a README.md whose YAML header is the Hugging Face dataset card's: `configs` (which file is which
config and split) and `dataset_info` (features and sizes), so the loader takes the features
from the card instead of guessing them. `checksums.sha256` lists every other file in
`sha256sum -c` form.

The library `datasets` is not needed to write the folder (it is a dev extra, for the test that
loads it): features are derived from the Arrow schema here, in the card's YAML vocabulary
(`dtype: string`, `list: string`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rulerag.io import sha256_file

__all__ = [
    "CHECKSUMS",
    "CONFIGS",
    "ConfigTable",
    "checksum_lines",
    "config_split",
    "frame_table",
    "records_table",
    "write_table",
    "yaml_features",
]

#: the configs, in the card's order, with the one split each holds
CONFIGS: tuple[tuple[str, str], ...] = (
    ("corpus", "corpus"),
    ("rules", "rules"),
    ("test", "test"),
    ("f_r", "train"),
    ("f_g", "train"),
)
CHECKSUMS = "checksums.sha256"

#: Arrow types as the card's YAML names them (datasets' `Value` dtypes)
_DTYPES: dict[pa.DataType, str] = {
    pa.string(): "string",
    pa.bool_(): "bool",
    pa.int8(): "int8",
    pa.int16(): "int16",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.float32(): "float32",
    pa.float64(): "float64",
    pa.null(): "null",
}


def config_split(config: str) -> str:
    """The split a config's file is (`test` for the test queries, `train` for F_R / F_G)."""
    return dict(CONFIGS)[config]


@dataclass(frozen=True)
class ConfigTable:
    """One config's rows as an Arrow table (plain string and list types, no pandas metadata)."""

    name: str
    table: pa.Table

    @property
    def rows(self) -> int:
        return self.table.num_rows

    def filename(self, fmt: str) -> str:
        return f"{self.name}.{fmt}"


def _plain_type(kind: pa.DataType) -> pa.DataType:
    """large_string -> string, large_list -> list (one vocabulary for the card's features)."""
    if pa.types.is_large_string(kind) or pa.types.is_string(kind):
        return pa.string()
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(_plain_type(kind.value_type))
    return kind


def _plain(table: pa.Table) -> pa.Table:
    """The table with plain types, NaN floats as nulls (JSON has no NaN; a rule's PCA confidence
    is NaN where it does not apply) and no schema metadata (pandas', the stages' provenance)."""
    columns = []
    for column in table.columns:
        if pa.types.is_floating(column.type):
            column = pc.if_else(pc.is_nan(column), pa.scalar(None, column.type), column)
        columns.append(column)
    plain = pa.table(columns, names=table.column_names)
    schema = pa.schema([pa.field(f.name, _plain_type(f.type)) for f in plain.schema])
    return plain.cast(schema)


def frame_table(name: str, frame: Any) -> ConfigTable:
    """A pandas frame (corpus.parquet, bank.parquet) as a config table."""
    return ConfigTable(name, _plain(pa.Table.from_pandas(frame, preserve_index=False)))


def records_table(name: str, records: Sequence[Mapping[str, Any]]) -> ConfigTable:
    """JSON records (test / f_r / f_g lines) as a config table; columns in the first record's
    key order, every record's keys included."""
    keys = list(dict.fromkeys(k for record in records for k in record))
    table = pa.Table.from_pydict({key: [r.get(key) for r in records] for key in keys})
    return ConfigTable(name, _plain(table))


def yaml_features(schema: pa.Schema) -> list[dict[str, Any]]:
    """The card's `features` list for `schema` (as `datasets.Features._to_yaml_list` writes:
    `{name, dtype}` for a value, `{name, list: dtype}` for a list of values)."""
    features = []
    for field in schema:
        kind = field.type
        if pa.types.is_list(kind):
            features.append({"name": field.name, "list": _dtype(kind.value_type, field.name)})
        else:
            features.append({"name": field.name, "dtype": _dtype(kind, field.name)})
    return features


def _dtype(kind: pa.DataType, name: str) -> str:
    try:
        return _DTYPES[kind]
    except KeyError:
        raise ValueError(f"column {name!r}: no card dtype for Arrow type {kind}") from None


def write_table(config: ConfigTable, folder: Path, fmt: str) -> Path:
    """Write one config's file (`<name>.parquet` or `<name>.jsonl`) into `folder`."""
    path = Path(folder) / config.filename(fmt)
    if fmt == "parquet":
        pq.write_table(config.table, path, compression="zstd")
    elif fmt == "jsonl":
        with open(path, "w", encoding="utf-8") as handle:
            for row in config.table.to_pylist():
                handle.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
    else:
        raise ValueError(f"format must be parquet or jsonl, not {fmt!r}")
    return path


def card_header(
    tables: Sequence[ConfigTable], fmt: str, pretty_name: str, license_name: str
) -> dict[str, Any]:
    """The card's YAML header: configs (file and split of each), dataset_info (features,
    rows and Arrow bytes of each split), and the card fields the Hub indexes."""
    rows = sum(t.rows for t in tables)
    return {
        "pretty_name": pretty_name,
        "license": "other",
        "license_name": license_name,
        "language": ["en"],
        "task_categories": ["question-answering", "text-retrieval"],
        "size_categories": [_size_category(rows)],
        "configs": [
            {
                "config_name": t.name,
                "data_files": [{"split": config_split(t.name), "path": t.filename(fmt)}],
            }
            for t in tables
        ],
        "dataset_info": [
            {
                "config_name": t.name,
                "features": yaml_features(t.table.schema),
                "splits": [
                    {
                        "name": config_split(t.name),
                        "num_bytes": int(t.table.nbytes),
                        "num_examples": t.rows,
                    }
                ],
            }
            for t in tables
        ],
    }


def _size_category(rows: int) -> str:
    """The Hub's size bucket (`10K<n<100K`) for a row count."""
    bounds = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")]
    bounds += [(1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")]
    for bound, label in bounds:
        if rows < bound:
            return label
    return f"10M<n<{10 ** (int(math.log10(rows)) + 1)}"


def checksum_lines(folder: Path) -> str:
    """`sha256sum` lines of every file in `folder` (sorted, recursively), for `sha256sum -c`."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != CHECKSUMS)
    return "".join(f"{sha256_file(p)}  {p.relative_to(folder).as_posix()}\n" for p in files)
