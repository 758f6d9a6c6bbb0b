"""Input that used to pass silently (exit 0) or end in a bare traceback now fails with the
file, line, field or key to fix: KG files, custom-KG settings, imported rule files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rulerag.errors import InputError
from rulerag.kg import readers
from rulerag.kg.errors import KGFormatError, UnknownDatasetError
from rulerag.kg.lines import MAX_LINE_CHARS
from rulerag.kg.registry import get_spec
from rulerag.kg.settings import ingest_settings
from rulerag.rules.mining import import_rules
from rulerag.rules.settings import RuleImport
from rulerag.settings import SettingsError
from tests.helpers import ingest_into
from tests.unit.test_bad_input import expect_error, write_tlogic


def test_a_kg_with_only_headers_is_an_error_and_keeps_the_old_outputs(tmp_path: Path) -> None:
    source, out = tmp_path / "src", tmp_path / "out"
    source.mkdir()
    (source / "train.tsv").write_text("a\tr\tb\nb\tr\tc\n")
    spec = get_spec("mykg", ingest_settings({"custom": {"mykg": {"path": str(source)}}}))
    ingest_into(spec, out, data_dir=None, download_dir=tmp_path / "dl")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for split in ("train", "valid", "test"):
        (source / f"{split}.tsv").write_text("head\trelation\ttail\n")
    with pytest.raises(KGFormatError, match="no facts in any split"):
        ingest_into(spec, out, data_dir=None, download_dir=tmp_path / "dl")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("E1\x00\tr\tE2\n", "NUL byte at column 3"),
        ("E1\t\tE2\n", "field 2 of 3 is empty"),
        ("  \tr\tE2\n", "field 1 of 3 is empty"),
    ],
)
def test_nul_bytes_and_empty_fields_name_the_line(tmp_path: Path, line: str, match: str) -> None:
    (tmp_path / "train.tsv").write_text("a\tr\tb\n" + line)
    expect_error(lambda: readers.read_generic(tmp_path), match, "train.tsv", 2)


def test_nul_bytes_in_a_benchmark_format_name_the_line(tmp_path: Path) -> None:
    write_tlogic(tmp_path, "A_B\tMake_a_visit\tC\t2014-01-02\nA\x00\tMake_a_visit\tC\t2014-01-02\n")
    expect_error(lambda: readers.read_tlogic(tmp_path), "NUL byte", "train.txt", 2)


def test_a_split_that_is_a_directory_or_a_looping_symlink_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "train.tsv").write_text("a\tr\tb\n")
    (tmp_path / "valid.tsv").mkdir()
    expect_error(lambda: readers.read_generic(tmp_path), "is a directory", "valid.tsv", None)
    os.rmdir(tmp_path / "valid.tsv")
    os.symlink("test.tsv", tmp_path / "test.tsv")  # a symlink to itself
    expect_error(lambda: readers.read_generic(tmp_path), "symlink loop", "test.tsv", None)
    os.unlink(tmp_path / "test.tsv")
    os.symlink(tmp_path / "gone.tsv", tmp_path / "test.tsv")
    expect_error(lambda: readers.read_generic(tmp_path), "broken symlink", "test.tsv", None)


@pytest.mark.parametrize("quoted_format", [True, False])
def test_a_10_mb_line_names_the_line(tmp_path: Path, quoted_format: bool) -> None:
    """A csv field over 131,072 characters used to end in a bare `_csv.Error` traceback."""
    huge = "x" * 10_000_000
    if quoted_format:
        (tmp_path / "train.csv").write_text(f"a,r,b\n{huge},r,b\n")
        read = lambda: readers.read_generic(tmp_path, delimiter=",")  # noqa: E731
        name = "train.csv"
    else:
        write_tlogic(tmp_path, f"A_B\tMake_a_visit\tC\t2014-01-02\n{huge}\n")
        read = lambda: readers.read_tlogic(tmp_path)  # noqa: E731
        name = "train.txt"
    expect_error(read, f"at most {MAX_LINE_CHARS:,}", name, 2)


def test_broken_csv_quoting_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text('a,r,b\n"a"b,r,c\n')
    expect_error(
        lambda: readers.read_generic(tmp_path, delimiter=","), "not valid CSV", "train.csv", 2
    )


def test_custom_kg_settings_fail_naming_the_key(tmp_path: Path) -> None:
    """`delimiter: "::"` and a typo in a custom KG's keys used to end in a TypeError."""
    with pytest.raises(SettingsError, match=r"ingest\.custom\.mykg\.delimiter"):
        get_spec("mykg", ingest_settings({"custom": {"mykg": {"path": "/x", "delimiter": "::"}}}))
    with pytest.raises(SettingsError, match=r"ingest\.custom\.mykg: unknown key 'delimeter'"):
        get_spec("mykg", ingest_settings({"custom": {"mykg": {"path": "/x", "delimeter": ","}}}))
    with pytest.raises(SettingsError, match="invalid dataset name"):
        get_spec("../../x", ingest_settings({"custom": {"../../x": {"path": str(tmp_path)}}}))
    with pytest.raises(UnknownDatasetError, match="unknown dataset 'nope'"):
        get_spec("nope")


@pytest.mark.parametrize(
    ("fmt", "text", "match"),
    [
        ("amie", "this is not an AMIE file\nnor is this\n", "no rule could be read"),
        ("amie", "", "no rule could be read"),
        ("tlogic", "not json at all", "not a TLogic rules JSON"),
        ("tlogic", '{"0": [{"body_rels": [1]}]}', "head 0, rule 1: head_rel None"),
        ("tlogic", "{}", "no rule could be read"),
    ],
)
def test_importing_a_garbage_rule_file_is_an_error(
    tmp_path: Path, fmt: str, text: str, match: str
) -> None:
    """A garbage AMIE file used to give 0 rules, an empty bank and exit 0."""
    path = tmp_path / "rules.txt"
    path.write_text(text)
    with pytest.raises(InputError, match=match) as caught:
        import_rules(RuleImport(format=fmt, path=str(path)), {"r": 0}, 1)
    assert str(path) in str(caught.value)


def test_importing_a_missing_rule_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read an AMIE 3 rule table"):
        import_rules(RuleImport(format="amie", path=str(tmp_path / "none.tsv")), {"r": 0}, 1)
