"""The one Markdown-table writer (`rulerag.markdown`) every report, card and benchmark uses."""

from __future__ import annotations

import pytest

from rulerag import markdown


def test_a_table_is_its_header_its_rule_and_a_line_per_row() -> None:
    text = markdown.table(["row", "EM"], [["standard_rag", "12.5"], ["rulerag_ft", 17]])
    assert text == "| row | EM |\n|---|---|\n| standard_rag | 12.5 |\n| rulerag_ft | 17 |"


def test_alignment_letters_write_the_rule_under_the_header() -> None:
    assert markdown.rule("lrc") == "|---|---:|:---:|"
    lines = markdown.table_lines(["name", "n"], [["a", 1]], align="lr")
    assert lines[1] == "|---|---:|"


def test_an_unknown_alignment_letter_or_a_wrong_count_is_an_error() -> None:
    with pytest.raises(ValueError, match="letters"):
        markdown.rule("lx")
    with pytest.raises(ValueError, match="2 columns"):
        markdown.table(["a", "b"], [], align="lrr")


def test_a_row_of_another_width_than_the_header_is_an_error() -> None:
    with pytest.raises(ValueError, match="3 cells under 2 columns"):
        markdown.table(["a", "b"], [["1", "2", "3"]])


def test_none_is_a_bare_blank_cell_an_empty_string_a_padded_one() -> None:
    # `| |`: a corner above row names, a section row's empty columns; `|  |`: the report's
    # group name left out on the rows after its first
    assert markdown.row([None, "MRR"]) == "| | MRR |"
    assert markdown.row(["**bm25**", None, None]) == "| **bm25** | | |"
    assert markdown.row(["", "x"]) == "|  | x |"


def test_a_table_without_rows_is_its_header_and_rule() -> None:
    assert markdown.table(["a", "b"], [], align="lr") == "| a | b |\n|---|---:|"


def test_cells_are_written_as_given_and_escape_keeps_a_table_intact() -> None:
    assert markdown.row(["a|b"]) == "| a|b |"
    assert markdown.escape("exit 1 | stderr:\nTraceback") == "exit 1 \\| stderr: Traceback"
    assert markdown.row([markdown.escape("x|y")]) == "| x\\|y |"
