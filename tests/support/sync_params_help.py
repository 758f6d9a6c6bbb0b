"""params.yaml's comments on the knobs from their settings fields' help (`settings_help`).

    python -m tests.support.sync_params_help           # rewrite params.yaml's comments
    python -m tests.support.sync_params_help --check   # exit 1 if a comment differs

A knob's help is written once, in its field (`field(default=..., metadata={"help": "..."})`);
params.yaml shows it as the comment at the end of the key's line, continued on comment lines
aligned under it when it is longer than the line allows:

    index:
      threads: 0                   # torch threads; 0 = torch's default (all cores)

Only keys written on a line of their own (block style) carry a help comment; the comment blocks
above a key or a section (the wider story) are left as they are, as is everything else in the
file, byte for byte. tests/unit/test_params_help.py fails when a comment differs from its help.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import textwrap
import typing
from collections.abc import Iterator
from pathlib import Path

from rulerag.params import SECTIONS, section_loader
from rulerag.settings import is_param, settings_help

PROJECT = Path(__file__).resolve().parents[2]
PARAMS = PROJECT / "params.yaml"
WIDTH = 100  # the longest line a rewritten comment makes (ruff's, the project's)


def section_class(section: str) -> type:
    """The settings class of a params.yaml section (its loader's return type)."""
    return typing.get_type_hints(section_loader(section))["return"]


def helps(cls: type, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
    """(dotted key path, help) of every field under `cls` with help, nested classes too."""
    for key, text in settings_help(cls).items():
        yield (*path, key), text
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not is_param(f):  # params.yaml does not set it (`rulerag.settings.NOT_A_PARAM`)
            continue
        nested = hints[f.name]
        if dataclasses.is_dataclass(nested) and isinstance(nested, type):
            yield from helps(nested, (*path, f.name))


def all_helps() -> dict[tuple[str, ...], str]:
    """Every knob with help, by its path in params.yaml."""
    return {key: text for s in SECTIONS for key, text in helps(section_class(s), (s,))}


_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w]*):(?P<rest>.*)$")


def key_line(lines: list[str], path: tuple[str, ...]) -> int | None:
    """The index of the line where `path` (section, key, ...) is written in block style."""
    start, end, indent = 0, len(lines), 0
    found = None
    for depth, key in enumerate(path):
        found = None
        for i in range(start, end):
            match = _KEY.match(lines[i])
            if match and len(match["indent"]) == indent and match["key"] == key:
                found = i
                break
        if found is None:
            return None
        if depth == len(path) - 1:
            return found
        # the key's block: the lines after it indented deeper (comments and blanks inside)
        start, end = found + 1, found + 1
        while end < len(lines) and (
            not lines[end].strip()
            or lines[end].lstrip().startswith("#")
            or len(lines[end]) - len(lines[end].lstrip()) > indent
        ):
            end += 1
        indent += 2
    return found


def split_comment(line: str) -> tuple[str, int | None]:
    """A YAML line's content and the column of its comment's '#' (None: no comment). A '#'
    inside quotes, or not after a space, starts no comment."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1] == " "):
            return line[:i].rstrip(), i
    return line.rstrip(), None


def comment_at(lines: list[str], i: int) -> tuple[str | None, int]:
    """The comment of line `i` with its continuation lines (comment-only lines whose '#' is
    in the same column), as one string; and how many continuation lines there are."""
    _, column = split_comment(lines[i])
    if column is None:
        return None, 0
    parts = [lines[i][column + 1 :].strip()]
    more = 0
    while i + 1 + more < len(lines):
        nxt = lines[i + 1 + more]
        if nxt.strip().startswith("#") and len(nxt) - len(nxt.lstrip()) == column:
            parts.append(nxt[column + 1 :].strip())
            more += 1
        else:
            break
    return " ".join(p for p in parts if p), more


def written(content: str, text: str, column: int) -> list[str]:
    """A key line with `text` as its comment at `column` (or two spaces after the content),
    wrapped onto aligned comment lines within `WIDTH`."""
    column = max(column, len(content) + 2)
    width = max(WIDTH - column - 2, 30)
    chunks = textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)
    first = f"{content.ljust(column)}# {chunks[0]}"
    return [first] + [f"{' ' * column}# {chunk}" for chunk in chunks[1:]]


def neighbours_column(lines: list[str], i: int) -> int:
    """The column of the nearest key line's comment above or below line `i` (a comment added
    to a key lines up with its neighbours'), 0 when none is near."""
    for distance in range(1, 6):
        for j in (i - distance, i + distance):
            if 0 <= j < len(lines) and _KEY.match(lines[j]):
                column = split_comment(lines[j])[1]
                if column:
                    return column
    return 0


def sync(write: bool, path: Path = PARAMS) -> tuple[list[str], int]:
    """The keys whose comment differs from their help (rewritten when `write`), and how many
    keys with help were compared."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    changes, checked = [], 0
    # bottom-up, so that rewriting a comment keeps the line numbers of those above it
    located = []
    for key, help_text in all_helps().items():
        i = key_line(lines, key)
        if i is None:
            changes.append(f"{'.'.join(key)}: not written on a line of its own in {path.name}")
            continue
        located.append((i, key, help_text))
    for i, key, help_text in sorted(located, reverse=True):
        checked += 1
        comment, more = comment_at(lines, i)
        wanted = " ".join(help_text.split())
        if comment == wanted:
            continue
        changes.append(f"{'.'.join(key)}: comment {comment!r} is not its help {wanted!r}")
        content, column = split_comment(lines[i])
        if column is None:
            column = neighbours_column(lines, i)
        lines[i : i + 1 + more] = written(content, wanted, column)
    if write and changes:
        path.write_text("\n".join(lines), encoding="utf-8")
    return sorted(changes), checked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    changes, checked = sync(write=not args.check)
    print("\n".join(changes) or f"params.yaml's {checked} help comments are their fields' help")
    return 1 if args.check and changes else 0


if __name__ == "__main__":
    sys.exit(main())
