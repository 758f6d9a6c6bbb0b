"""Strict line reading for KG text files: every problem is reported with file and line."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from rulerag.kg.errors import KGFormatError

Row = tuple[int, list[str]]  # (1-based line number, fields)

#: the longest line a KG file may have: a fact is three or four names, and a longer line is a
#: broken file (csv's own field limit, 131,072, would otherwise end in a bare `_csv.Error`)
MAX_LINE_CHARS = 100_000


def read_text(path: Path) -> str:
    """Decode a file as strict UTF-8; a bad byte is reported with its line and column."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        bad = data[err.start : err.end].hex()
        raise KGFormatError(
            path, f"not valid UTF-8 (byte 0x{bad} at column {column})", line
        ) from None
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise KGFormatError(path, "file is empty")
    return text


def read_rows(
    path: Path, columns: Collection[int], delimiter: str = "\t", quoted: bool = False
) -> list[Row]:
    """Split a delimited file into rows, checking that each has an allowed number of columns.

    `quoted` parses with the csv module (for users' CSV files with quoted fields); the KG
    benchmark files are plain tab-separated text where quotes are ordinary characters.
    """
    text = read_text(path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    expected = " or ".join(str(c) for c in sorted(columns))
    rows: list[Row] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.removesuffix("\r")
        if not line.strip():
            raise KGFormatError(path, "blank line", number)
        if len(line) > MAX_LINE_CHARS:
            raise KGFormatError(
                path, f"line of {len(line):,} characters (at most {MAX_LINE_CHARS:,})", number
            )
        if "\x00" in line:
            column = line.index("\x00") + 1
            raise KGFormatError(path, f"NUL byte at column {column} (a binary file?)", number)
        if quoted:
            try:
                fields = next(csv.reader(io.StringIO(line), delimiter=delimiter, strict=True))
            except csv.Error as err:
                raise KGFormatError(path, f"not valid CSV: {err}", number) from None
        else:
            fields = line.split(delimiter)
        if len(fields) not in columns:
            raise KGFormatError(
                path,
                f"expected {expected} columns separated by {delimiter!r}, found {len(fields)}",
                number,
            )
        fields = [f.strip() for f in fields]
        empty = [i for i, f in enumerate(fields, 1) if not f]
        if empty:
            raise KGFormatError(path, f"field {empty[0]} of {len(fields)} is empty", number)
        rows.append((number, fields))
    return rows


def read_json_map(path: Path) -> dict[str, int]:
    """Read a `{name: id}` JSON file (TLogic's entity2id.json and friends)."""
    try:
        data: Any = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise KGFormatError(path, f"invalid JSON: {err.msg}", err.lineno) from None
    if not isinstance(data, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in data.values()
    ):
        raise KGFormatError(path, "expected a JSON object mapping names to integer ids")
    _check_unique_ids(path, data)
    return data


def read_id_map(path: Path, columns: Collection[int] = (2,)) -> dict[str, int]:
    """Read `name<TAB>id[<TAB>...]` lines into a map; ids must be integers and unique."""
    mapping: dict[str, int] = {}
    for number, fields in read_rows(path, columns):
        name, raw_id = fields[0], fields[1]
        if not raw_id.lstrip("-").isdigit():
            raise KGFormatError(path, f"id {raw_id!r} is not an integer", number)
        if name in mapping:
            raise KGFormatError(path, f"name {name!r} is listed twice", number)
        mapping[name] = int(raw_id)
    _check_unique_ids(path, mapping)
    return mapping


def _check_unique_ids(path: Path, mapping: dict[str, int]) -> None:
    seen: dict[int, str] = {}
    for name, ident in mapping.items():
        if ident in seen:
            raise KGFormatError(path, f"id {ident} is used by both {seen[ident]!r} and {name!r}")
        seen[ident] = name
