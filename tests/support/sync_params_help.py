"""params.yaml's comments on the knobs from their settings fields' help (`settings_help`).

    python -m tests.support.sync_params_help           # rewrite params.yaml's comments
    python -m tests.support.sync_params_help --check   # exit 1 if a comment differs

A knob's help is written once, in its field (`field(default=..., metadata={"help": "..."})`);
params.yaml shows it either as the comment at the end of the key's line, continued on comment
lines aligned under it when it is longer than the line allows, or as the comment block on the
lines right above the key, at the key's indentation (the longer stories):

    index:
      threads: 0                   # torch threads; 0 = torch's default (all cores)
      # Dense dual encoders: an alias (minilm = all-MiniLM-L6-v2, ...
      dense:

A section's help is its settings class's `HELP` (a `ClassVar[str]`), shown as the block above
the section's key; `datasets`' is the help of `rulerag.params.Params.datasets`. The file
decides the style: a key with an end-of-line comment keeps one, a key with a block above keeps
the block; a key with neither gets an end-of-line comment when its help fits on the line, else
a block. Comparison is of the words (whitespace normalised), so a comment whose text is its
help is left byte for byte as it is wrapped; one that differs is rewritten from the help,
wrapped within `WIDTH` (a help with line breaks keeps them: lists and examples, each line
wrapped under its own indentation). Everything else in the file is left byte for byte.

Every comment in params.yaml is a help, or one of `NOTES` (a comment that documents no field:
the file's opening note, the values of a mapping knob), each with its reason; `--check` names
any other. tests/unit/test_params_help.py fails when a comment differs from its help.
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

from rulerag.params import SECTIONS, Params, section_loader
from rulerag.settings import is_param, settings_help

PROJECT = Path(__file__).resolve().parents[2]
PARAMS = PROJECT / "params.yaml"
WIDTH = 100  # the longest line a rewritten comment makes (ruff's, the project's)

#: the comments of params.yaml that are no field's help, by the key they stand above (() = the
#: note that opens the file), each with why; `sync` fails on any other comment and on an entry
#: here that stands above no comment
NOTES: dict[tuple[str, ...], str] = {
    (): "the file's opening note: how to vary any knob (dvc exp run -S, Airflow's run conf)",
    ("generation", "grid", "ve"): (
        "introduces the grid's chain-of-thought rows (ve, cok, rulerag_cok): entries of the "
        "mapping generation.grid, values rather than fields"
    ),
    ("generation", "profiles", "paper"): (
        "what the paper profile sets: an entry of the mapping generation.profiles (profile "
        "name -> overrides), a value rather than a field"
    ),
    ("r2ag", "variants", "r2ag"): (
        "the keys of a variant's entry, above the first entry of the mapping r2ag.variants "
        "(variant name -> R2AGVariant), a value rather than a field"
    ),
    ("r2ag", "profiles", "paper"): (
        "what the paper profile sets: an entry of the mapping r2ag.profiles, a value rather "
        "than a field"
    ),
    ("rule_retrieval", "profiles", "paper"): (
        "what the paper profile sets: an entry of the mapping rule_retrieval.profiles, a value "
        "rather than a field"
    ),
}


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


def section_help(cls: type) -> str | None:
    """A section's help: its settings class's own `HELP` (not one it inherits)."""
    return vars(cls).get("HELP")


def all_helps() -> dict[tuple[str, ...], str]:
    """Every knob with help, by its path in params.yaml: the top-level keys (`Params`' fields),
    each section (its class's `HELP`) and every field under it."""
    out = {
        (f.name,): f.metadata["help"] for f in dataclasses.fields(Params) if "help" in f.metadata
    }
    for section in SECTIONS:
        cls = section_class(section)
        if (text := section_help(cls)) is not None:
            out[(section,)] = text
        out.update(helps(cls, (section,)))
    return out


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


def is_comment(line: str) -> bool:
    """Whether a line holds a comment and nothing else."""
    return line.lstrip().startswith("#")


def block_above(lines: list[str], i: int) -> int:
    """The first line of the comment block right above key line `i` (its comment lines at the
    key's indentation, no blank line between); `i` when there is none."""
    indent = len(lines[i]) - len(lines[i].lstrip())
    start = i
    while start > 0 and is_comment(lines[start - 1]) and lines[start - 1].index("#") == indent:
        start -= 1
    return start


def block_text(lines: list[str]) -> str:
    """A comment block's words: its lines without their '#', joined, whitespace normalised."""
    return " ".join(" ".join(line.strip()[1:] for line in lines).split())


def written_block(text: str, indent: int) -> list[str]:
    """`text` as a comment block at `indent`, wrapped within `WIDTH`; each of its own lines
    wrapped on its own, continued under its indentation."""
    out = []
    for part in text.split("\n"):
        lead = " " * (len(part) - len(part.lstrip()))
        width = max(WIDTH - indent - 2 - len(lead), 30)
        chunks = textwrap.wrap(
            part.strip(), width, break_long_words=False, break_on_hyphens=False
        ) or [""]
        out += [f"{' ' * indent}# {lead}{chunk}".rstrip() for chunk in chunks]
    return out


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


def synced(lines: list[str], i: int, help_text: str) -> str | None:
    """Key line `i`'s comment against its help: None when its words are the help's, else the
    comment's words ('' for none), the comment then rewritten from the help in `lines`."""
    wanted = " ".join(help_text.split())
    content, column = split_comment(lines[i])
    start = block_above(lines, i)
    indent = len(lines[i]) - len(lines[i].lstrip())
    if column is None and start == i:  # no comment yet: at the end of the line if it fits
        column = neighbours_column(lines, i)
        line = written(content, wanted, column)
        if "\n" in help_text or len(line) > 1:
            lines[i:i] = written_block(help_text, indent)
        else:
            lines[i : i + 1] = line
        return ""
    if column is not None:
        comment, more = comment_at(lines, i)
        if comment == wanted:
            return None
        lines[i : i + 1 + more] = written(content, wanted, column)
        return comment or ""
    comment = block_text(lines[start:i])
    if comment == wanted:
        return None
    lines[start:i] = written_block(help_text, indent)
    return comment


def opening_note(lines: list[str]) -> int:
    """How many comment lines open the file (a note before its first key: `NOTES[()]`)."""
    n = 0
    while n < len(lines) and is_comment(lines[n]):
        n += 1
    return n if n < len(lines) and not _KEY.match(lines[n]) else 0


def explained(lines: list[str], located: dict[tuple[str, ...], int]) -> tuple[set[int], list[str]]:
    """The lines holding a help (end-of-line or block) or a `NOTES` entry's comment, and the
    entries of `NOTES` that stand above no comment."""
    known: set[int] = set()
    for i in located.values():
        if split_comment(lines[i])[1] is not None:  # its help is this comment, not a block
            known.update(range(i, i + 1 + comment_at(lines, i)[1]))
        else:
            known.update(range(block_above(lines, i), i))
    stale = []
    for key in NOTES:
        i = key_line(lines, key) if key else None
        start, stop = (block_above(lines, i), i) if i is not None else (0, opening_note(lines))
        if start == stop:
            stale.append(f"NOTES[{key!r}]: no comment stands there")
        known.update(range(start, stop))
    return known, stale


def sync(write: bool, path: Path = PARAMS) -> tuple[list[str], int]:
    """The keys whose comment differs from their help (rewritten when `write`) and the comments
    that are no help nor a `NOTES` entry; and how many keys with help were compared."""
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
        comment = synced(lines, i, help_text)
        if comment is not None:
            wanted = " ".join(help_text.split())
            changes.append(f"{'.'.join(key)}: comment {comment!r} is not its help {wanted!r}")
    if write and changes:
        path.write_text("\n".join(lines), encoding="utf-8")
    helped = {key: key_line(lines, key) for _, key, _ in located}
    known, stale = explained(lines, {k: i for k, i in helped.items() if i is not None})
    changes = sorted(changes) + stale
    changes += [
        f"{path.name}:{n + 1}: a comment that is no field's help nor in NOTES: {line.strip()!r}"
        for n, line in enumerate(lines)
        if split_comment(line)[1] is not None and n not in known
    ]
    return changes, checked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    changes, checked = sync(write=not args.check)
    done = f"params.yaml's {checked} help comments are their fields' help, plus {len(NOTES)} notes"
    print("\n".join(changes) or done)
    return 1 if args.check and changes else 0


if __name__ == "__main__":
    sys.exit(main())
