"""Strict line reading for KG text files: every problem is reported with file and line."""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import re
import stat
from collections.abc import Collection
from pathlib import Path
from typing import Any

from rulerag.kg.errors import KGFormatError

Row = tuple[int, list[str]]  # (1-based line number, fields)

#: the longest line a KG file may have: a fact is three or four names, and a longer line is a
#: broken file (csv's own field limit, 131,072, would otherwise end in a bare `_csv.Error`)
MAX_LINE_CHARS = 100_000

#: characters no name or field may hold: C0 controls but the tab (NUL means a binary file; a
#: lone CR or a vertical tab is a broken line break), DEL, C1 controls (mis-decoded bytes) and
#: Unicode's line and paragraph separators (other tools split lines there); they would become
#: entities no prompt or id map can show
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def control_character(text: str) -> str | None:
    """Why `text` cannot be a name or a line of a KG file (with the 1-based column), else None."""
    found = _CONTROL.search(text)
    if found is None:
        return None
    char, column = found.group(), found.start() + 1
    if char == "\x00":
        return f"NUL byte at column {column} (a binary file?)"
    return f"control character U+{ord(char):04X} at column {column}"


def regular_file(path: Path, *, optional: bool = False) -> bool:
    """Whether `path` is a regular file (or a symlink to one) that a reader may open.

    Anything else at that name (a folder, a symlink to nothing or in a loop, a FIFO or device)
    is a mistake to report, not a file to skip: KGFormatError saying what is there. A missing
    path is False when `optional` (an optional split or id map), else KGFormatError too.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise KGFormatError(path, "is a symlink loop; it must be a regular file") from None
        if err.errno != errno.ENOENT:
            raise KGFormatError(path, f"cannot be read: {err.strerror}") from None
        if os.path.islink(path):
            raise KGFormatError(
                path, f"is a broken symlink (to {os.readlink(path)}, which does not exist)"
            ) from None
        if optional:
            return False
        raise KGFormatError(path, "is missing") from None
    if stat.S_ISREG(mode):
        return True
    what = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, socket or device)"
    raise KGFormatError(path, f"is {what}; it must be a regular file")


def read_text(path: Path) -> str:
    """Decode a file as strict UTF-8; a bad byte is reported with its line and column."""
    regular_file(path)
    try:
        data = Path(path).read_bytes()
    except OSError as err:  # e.g. permission denied: still the user's file to fix
        raise KGFormatError(path, f"cannot be read: {err.strerror}") from None
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
        problem = control_character(line)
        if problem is not None:
            raise KGFormatError(path, problem, number)
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
    for name in data:  # read_rows checks the fields of text maps; JSON keys need the same
        problem = "is empty" if not name.strip() else control_character(name)
        if problem is not None:
            raise KGFormatError(path, f"name {name[:80]!r}: {problem}")
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
