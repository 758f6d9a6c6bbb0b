"""Hostile input that still passed (or ended in a traceback) after test_hostile_input.py's fixes:
control characters, empty names in JSON id maps, optional files that are folders or broken
symlinks, custom-KG values no file can be read with, custom names that are not identifiers
where the section is read, and rule files whose entries are malformed but were read anyway."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rulerag.errors import InputError
from rulerag.kg import readers
from rulerag.kg.errors import KGFormatError
from rulerag.kg.ingest import locate
from rulerag.kg.registry import get_spec
from rulerag.kg.settings import ingest_settings
from rulerag.rules.amie_io import AmieFormatError, read_amie_tsv
from rulerag.rules.mining import import_rules
from rulerag.rules.settings import RuleImport
from rulerag.rules.tlogic_io import read_tlogic_json
from rulerag.settings import SettingsError
from tests.helpers import ingest_into
from tests.unit.test_bad_input import expect_error, write_tlogic

AMIE_HEADER = (
    "Rule\tHead Coverage\tStd Confidence\tPCA Confidence\tPositive Examples\tBody size"
    "\tPCA Body size\tFunctional variable\n"
)
AMIE_RULE = "?a  r  ?b   => ?a  s  ?b"


@pytest.mark.parametrize(
    ("field", "match"),
    [
        ("E\x01", "control character U\\+0001 at column 2"),
        ("E\rX", "control character U\\+000D at column 2"),  # a lone CR: a broken line break
        ("E\u2028X", "control character U\\+2028 at column 2"),
        ("E\x7f", "control character U\\+007F at column 2"),
    ],
)
def test_control_characters_in_a_field_name_the_line(
    tmp_path: Path, field: str, match: str
) -> None:
    (tmp_path / "train.tsv").write_text(f"a\tr\tb\n{field}\tr\tb\n", newline="")
    expect_error(lambda: readers.read_generic(tmp_path), match, "train.tsv", 2)


@pytest.mark.parametrize(
    ("name", "match"), [("", "is empty"), ("  ", "is empty"), ("C\x00", "NUL")]
)
def test_a_json_id_map_name_that_is_empty_or_binary_names_the_file(
    tmp_path: Path, name: str, match: str
) -> None:
    """Such keys used to become entities '' and 'C\\x00' of the ingested KG."""
    folder = write_tlogic(tmp_path)
    (folder / "entity2id.json").write_text(json.dumps({"A_B": 0, "C": 1, name: 2}))
    err = expect_error(lambda: readers.read_tlogic(tmp_path), match, "entity2id.json", None)
    assert repr(name) in str(err)


@pytest.mark.parametrize("key", ["___", "<>"])
def test_an_entity_whose_readable_name_would_be_empty_keeps_its_key(
    tmp_path: Path, key: str
) -> None:
    write_tlogic(tmp_path, f"{key}\tMake_a_visit\tC\t2014-01-02\n", with_maps=False)
    kg = readers.read_tlogic(tmp_path)
    assert "" not in set(kg.entities["name"])
    assert kg.entities.set_index("key").at[key, "name"] == key


@pytest.mark.parametrize("what", ["directory", "broken symlink", "symlink loop"])
def test_an_optional_id_map_that_is_no_file_is_an_error_not_absent(
    tmp_path: Path, what: str
) -> None:
    """TLogic's entity2id.json is optional; a folder or bad symlink there was read as "no map"
    and the KG got other ids than the user's map gives, silently."""
    folder = write_tlogic(tmp_path)
    path = folder / "entity2id.json"
    path.unlink()
    if what == "directory":
        path.mkdir()
    else:
        os.symlink(path if what == "symlink loop" else folder / "gone.json", path)
    expect_error(lambda: readers.read_tlogic(tmp_path), what, "entity2id.json", None)


def _nell(tmp_path: Path) -> Path:
    folder = tmp_path / "pp413_NELL-995"
    folder.mkdir()
    (folder / "train.txt").write_text("concept_a_b\tconcept:r\tconcept_a_c\n")
    return tmp_path / "KBGAT_NELL-995"


def test_nell_ids_folder_that_is_a_broken_symlink_is_an_error(tmp_path: Path) -> None:
    os.symlink(tmp_path / "gone", _nell(tmp_path))
    expect_error(lambda: readers.read_nell(tmp_path), "not a folder", "KBGAT_NELL-995", None)


def test_nell_ids_folder_without_its_maps_names_the_missing_file(tmp_path: Path) -> None:
    """Used to end in a bare FileNotFoundError traceback."""
    _nell(tmp_path).mkdir()
    expect_error(lambda: readers.read_nell(tmp_path), "is missing", "entity2id.txt", None)


def test_a_split_that_is_a_fifo_says_so(tmp_path: Path) -> None:
    """Was reported as "a broken or looping symlink"."""
    (tmp_path / "train.tsv").write_text("a\tr\tb\n")
    os.mkfifo(tmp_path / "valid.tsv")
    expect_error(lambda: readers.read_generic(tmp_path), "FIFO", "valid.tsv", None)


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"delimiter": '"'}, "delimiter '\"' cannot separate fields"),
        ({"delimiter": "\n"}, "delimiter '\\\\n' cannot separate fields"),
        ({"delimiter": "a"}, "delimiter 'a' cannot separate fields"),
        ({"time_format": "%Q"}, "time_format '%Q' is not a strptime format"),
        ({"time_format": "yyyy-mm-dd"}, "time_format 'yyyy-mm-dd' has no year"),
        ({"path": ""}, "path '' is blank"),
        ({"path": "  "}, "path '  ' is blank"),
    ],
)
def test_custom_kg_values_no_file_can_be_read_with_are_settings_errors(
    entry: dict[str, str], match: str
) -> None:
    """These used to fail on every line of the KG (or read the working directory, for "")."""
    params = {"ingest": {"custom": {"mykg": {"path": "/x", **entry}}}}
    with pytest.raises(SettingsError, match=r"ingest\.custom\.mykg") as caught:
        get_spec("mykg", ingest_settings(params["ingest"]))
    assert caught.match(match)


def test_every_reader_of_the_custom_section_refuses_a_name_that_is_not_an_identifier() -> None:
    """known_datasets (the params check, the Airflow DAG) listed `a;b` as a dataset."""
    with pytest.raises(SettingsError, match="invalid dataset name 'a;b'"):
        ingest_settings({"custom": {"a;b": {"path": "/x"}}})


def test_custom_kg_delimiters_that_work_are_accepted() -> None:
    for delimiter in ("\t", ",", ";", "|", " "):
        params = {"ingest": {"custom": {"mykg": {"path": "/x", "delimiter": delimiter}}}}
        assert get_spec("mykg", ingest_settings(params["ingest"])).name == "mykg"
    params = {"ingest": {"custom": {"mykg": {"path": "/x", "time_format": "%d/%m/%y"}}}}
    assert get_spec("mykg", ingest_settings(params["ingest"])).kind == "temporal"


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"head_rel": 0, "body_rels": "12"}, "body_rels '12' is not a non-empty list"),
        ({"head_rel": 0, "body_rels": [1.7]}, r"body_rels \[1.7\]"),
        ({"head_rel": 0, "body_rels": []}, r"body_rels \[\]"),
        ({"head_rel": 1, "body_rels": [1]}, "head_rel 1 is not the head id 0"),
        ({"head_rel": 0, "body_rels": [1], "conf": True}, r"conf True is not a number in \[0, 1\]"),
        ({"head_rel": 0, "body_rels": [1], "conf": 7}, "conf 7 is not"),
        ({"head_rel": 0, "body_rels": [1], "rule_supp": -1}, "rule_supp -1 is not a count"),
        ({"head_rel": 0, "body_rels": [1], "var_constraints": [[9]]}, "var_constraints"),
        ({"head_rel": 0, "body_rels": [9]}, "relation id 9 is outside"),
        ("rule", "expected an object"),
    ],
)
def test_a_malformed_tlogic_rule_names_the_file_and_the_rule(
    tmp_path: Path, entry: object, match: str
) -> None:
    """Each of these used to be read (as a different rule) or end in a bare traceback."""
    good = {"head_rel": 0, "body_rels": [1], "conf": 0.5, "rule_supp": 1, "body_supp": 2}
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"0": [good, entry]}))
    with pytest.raises(InputError, match=match) as caught:
        read_tlogic_json(path, 3)
    assert str(caught.value).startswith(f"{path}: head 0, rule 2: ")


def test_a_tlogic_file_that_is_not_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "rules.json"
    path.write_text('{"0": [\n  {"head_rel": 0,, }\n]}')
    with pytest.raises(InputError, match="not a TLogic rules JSON") as caught:
        read_tlogic_json(path, 3)
    assert getattr(caught.value, "line", None) == 2
    assert str(caught.value).startswith(f"{path}:2: ")


@pytest.mark.parametrize(
    ("stats", "match"),
    [
        ("abc\t0.5\t0.5\t3\t4\t4\t?a", "column 'Head Coverage': 'abc' is not a number"),
        ("0,5\t0.5\t0.5\t3\t4\t4\t?a", "'0,5' is not a number"),  # a German-locale AMIE
        ("0.5\t0.5\t0.5\t-3\t4\t4\t?a", "column 'Positive Examples': '-3' is negative"),
    ],
)
def test_an_amie_rule_with_a_broken_statistic_names_the_line(
    tmp_path: Path, stats: str, match: str
) -> None:
    """The statistic used to be read as "no value", ranking the rule silently wrong."""
    path = tmp_path / "amie.tsv"
    path.write_text(f"{AMIE_HEADER}{AMIE_RULE}\t0.5\t0.5\t0.5\t3\t4\t4\t?a\n{AMIE_RULE}\t{stats}\n")
    with pytest.raises(AmieFormatError, match=match) as caught:
        read_amie_tsv(path, {"r": 0, "s": 1})
    assert (caught.value.path, caught.value.line) == (path, 3)


def test_an_amie_rule_without_its_arrow_names_the_line(tmp_path: Path) -> None:
    """A rule-like line without `=>` used to be skipped as a log line: one rule fewer."""
    path = tmp_path / "amie.tsv"
    path.write_text(f"{AMIE_HEADER}{AMIE_RULE}\t0.5\n?a  r  ?b  ?a  s  ?b\t0.5\nMining done\n")
    with pytest.raises(AmieFormatError, match="a rule without '=>'") as caught:
        import_rules(RuleImport(format="amie", path=str(path)), {"r": 0, "s": 1}, 2)
    assert caught.value.line == 3


def test_amie_log_lines_nan_and_infinity_still_read(tmp_path: Path) -> None:
    """What AMIE really writes keeps working: log lines around the table, NaN as U+FFFD, ∞."""
    path = tmp_path / "amie.tsv"
    path.write_text(
        "Using HeadCoverage as pruning metric\n"
        f"{AMIE_HEADER}{AMIE_RULE}\t0.5\t\ufffd\t∞\t3\t0\t0\t?a\nMining done in 0.28 s\n"
    )
    (rule,) = read_amie_tsv(path, {"r": 0, "s": 1})
    assert rule.std_confidence is None and rule.pca_confidence == float("inf")
    assert rule.support == 3 and rule.body_support == 0


# -- issue 28, part 8: silent KG cases ----------------------------------------------------------


def _custom(source: Path) -> object:
    return get_spec("mykg", ingest_settings({"custom": {"mykg": {"path": str(source)}}}))


def test_a_split_with_only_a_header_is_noted_in_stats(tmp_path: Path) -> None:
    """A header-only train split ingested as 0 train facts without a word in stats.json."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.tsv").write_text("head\trelation\ttail\n")
    (source / "valid.tsv").write_text("a\tr\tb\n")
    (source / "test.tsv").write_text("b\tr\tc\n")
    _, stats = ingest_into(_custom(source), tmp_path / "out", data_dir=None, download_dir=tmp_path)
    assert stats["splits"] == {"train": 0, "valid": 1, "test": 1}
    (note,) = [n for n in stats["notes"] if "'train'" in n]
    assert str(source / "train.tsv") in note and "no facts" in note
    assert "0 train facts" in note


def test_a_split_in_two_files_names_both(tmp_path: Path) -> None:
    """`train.tsv` beside `train.csv`: the .csv was silently ignored."""
    (tmp_path / "train.tsv").write_text("a\tr\tb\n")
    (tmp_path / "train.csv").write_text("c,r,d\n")
    with pytest.raises(KGFormatError, match="split 'train' is in train.tsv and train.csv") as info:
        readers.read_generic(tmp_path)
    assert str(tmp_path / "train.tsv") in str(info.value)
    assert str(tmp_path / "train.csv") in str(info.value)


def test_a_custom_path_that_is_a_file_says_so(tmp_path: Path) -> None:
    """A file given as the KG's folder used to be reported as "does not exist"."""
    path = tmp_path / "train.tsv"
    path.write_text("a\tr\tb\n")
    with pytest.raises(KGFormatError, match="is a file: ingest.custom.mykg.path must name the fo"):
        locate(_custom(path), None, tmp_path / "dl")
    with pytest.raises(InputError, match="does not exist"):
        locate(_custom(tmp_path / "gone"), None, tmp_path / "dl")


# -- issue 45, part 3: times and ids that are no ASCII integer, or that no column can hold -------


@pytest.mark.parametrize(
    ("time", "match"),
    [
        ("--5", "time '--5' is not an integer"),  # `lstrip("-")` took any number of minus signs
        ("²", "time '²' is not an integer"),  # `isdigit` took it, `int` raised ValueError
        ("٢٠٠٠", "time '٢٠٠٠' is not an integer"),  # Arabic-Indic digits, read as 2000 silently
        ("+5", "time '\\+5' is not an integer"),
        ("5.0", "time '5.0' is not an integer"),
        (
            "99999999999999999999999",
            "time '99999999999999999999999' is outside the range the KG stores it in \\(int64: ",
        ),  # fmt: skip  # an OverflowError traceback
        ("9" * 5000, "\\(5000 chars\\) is outside the range"),  # int() refuses 4,300+ digits
    ],
)
@pytest.mark.parametrize("time_format", ["int", "year"])
def test_a_custom_kg_time_that_is_no_ascii_integer_in_range_names_the_line(
    tmp_path: Path, time: str, match: str, time_format: str
) -> None:
    (tmp_path / "train.tsv").write_text(f"a\tr\tb\t2000\na\tr\tc\t{time}\n", encoding="utf-8")
    expect_error(
        lambda: readers.read_generic(tmp_path, time_format=time_format), match, "train.tsv", 2
    )


def test_custom_kg_times_in_ascii_digits_still_read(tmp_path: Path) -> None:
    """A minus sign, leading zeros and both ends of int64 are valid times."""
    times = ["-5", "0007", "-9223372036854775808", "9223372036854775807"]
    (tmp_path / "train.tsv").write_text("".join(f"a\tr\tb\t{t}\n" for t in times))
    kg = readers.read_generic(tmp_path, time_format="int")
    assert kg.facts["time"].tolist() == [-5, 7, -(2**63), 2**63 - 1]


def test_an_id_beyond_the_int32_id_column_names_the_line(tmp_path: Path) -> None:
    """A TKGF label id that int32 cannot hold ended in an `OverflowError` traceback."""
    folder = tmp_path / "TKGF_WIKI"
    folder.mkdir()
    (folder / "entity2id.txt").write_text("Aachen\t0\nBonn\t2147483648\n")
    (folder / "relation2id.txt").write_text("capital of\t0\n")
    (folder / "test.txt").write_text("0\t0\t0\t1\n")
    expect_error(
        lambda: readers.read_tkgf(tmp_path, qid_subdir=None),
        "id '2147483648' is outside the range the KG stores it in \\(int32: ",
        "entity2id.txt",
        2,
    )
