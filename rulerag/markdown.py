"""Markdown tables, written one way for every report, card and benchmark.

GitHub's pipe tables, unpadded: `| a | b |` over `|---|---:|`. A cell is any value, written
with `str()`; `None` is a blank cell, written `| |` (a corner above row names, a section
row's empty columns), while an empty string is padded like any other cell (`|  |`, the
report's repeated group name). Cells are written as given: a writer whose cells may hold
`|` or a line break passes them through `escape`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["escape", "row", "rule", "table", "table_lines"]

# The line under the header: a left-aligned column, a right-aligned one (numbers), a centred one.
_RULES = {"l": "---", "r": "---:", "c": ":---:"}


def row(cells: Iterable[object]) -> str:
    """One line of a table; `None` is a blank cell (`| |`)."""
    return "|" + "|".join(" " if cell is None else f" {cell} " for cell in cells) + "|"


def rule(align: str) -> str:
    """The line under the header, one letter of `align` per column: `l` (`---`), `r` (`---:`)
    or `c` (`:---:`)."""
    unknown = set(align) - set(_RULES)
    if unknown:
        raise ValueError(f"alignment {align!r}: letters are l, r and c, not {sorted(unknown)}")
    return "|" + "|".join(_RULES[letter] for letter in align) + "|"


def table_lines(
    header: Sequence[object], rows: Iterable[Sequence[object]], align: str | None = None
) -> list[str]:
    """The table's lines: the header, its rule, one line per row. `align` holds a letter per
    column (see `rule`); left-aligned throughout when omitted. A row of another width than
    the header's is an error, since Markdown would cut or pad it silently."""
    align = "l" * len(header) if align is None else align
    if len(align) != len(header):
        raise ValueError(f"alignment {align!r} for {len(header)} columns")
    lines = [row(header), rule(align)]
    for cells in rows:
        if len(cells) != len(header):
            raise ValueError(f"a row of {len(cells)} cells under {len(header)} columns: {cells!r}")
        lines.append(row(cells))
    return lines


def table(
    header: Sequence[object], rows: Iterable[Sequence[object]], align: str | None = None
) -> str:
    """The table as one string, lines joined by newlines, no newline at its end."""
    return "\n".join(table_lines(header, rows, align))


def escape(text: object) -> str:
    """A cell's text that keeps its table intact: `|` escaped, line breaks made spaces."""
    return str(text).replace("|", "\\|").replace("\n", " ")
