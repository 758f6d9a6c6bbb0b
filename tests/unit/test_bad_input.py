"""Bad input gets a clear error naming file and line, and loses nothing already written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rulerag.kg import readers
from rulerag.kg.download import DownloadError
from rulerag.kg.errors import DatasetNotFoundError, KGFormatError
from rulerag.kg.ingest import locate, repair
from rulerag.kg.registry import DATASETS, get_spec
from rulerag.kg.settings import ingest_settings
from tests.helpers import ingest_into

TLOGIC_OK = "A_B\tMake_a_visit\tC\t2014-01-02\nC\tMake_a_visit\tA_B\t2014-01-03\n"


def write_tlogic(root: Path, train: str | bytes = TLOGIC_OK, with_maps: bool = True) -> Path:
    folder = root / "TLogic_icews14"
    folder.mkdir(parents=True, exist_ok=True)
    data = train.encode() if isinstance(train, str) else train
    (folder / "train.txt").write_bytes(data)
    (folder / "valid.txt").write_text("A_B\tMake_a_visit\tC\t2014-02-01\n")
    (folder / "test.txt").write_text("C\tMake_a_visit\tA_B\t2014-03-01\n")
    if with_maps:
        (folder / "entity2id.json").write_text(json.dumps({"A_B": 0, "C": 1}))
        (folder / "relation2id.json").write_text(json.dumps({"Make_a_visit": 0}))
    return folder


def expect_error(func, match: str, file_name: str, line: int | None):
    with pytest.raises(KGFormatError, match=match) as info:
        func()
    assert info.value.path.name == file_name
    assert info.value.line == line
    return info.value


def test_good_tlogic_file_reads(tmp_path: Path) -> None:
    write_tlogic(tmp_path)
    kg = readers.read_tlogic(tmp_path)
    assert list(kg.entities["name"]) == ["A B", "C"]
    assert kg.lines_read == {"train": 2, "valid": 1, "test": 1}


def test_wrong_column_count(tmp_path: Path) -> None:
    write_tlogic(tmp_path, TLOGIC_OK + "A_B\tMake_a_visit\tC\n")
    err = expect_error(lambda: readers.read_tlogic(tmp_path), "expected 4 columns", "train.txt", 3)
    assert "found 3" in str(err) and "train.txt:3" in str(err)


def test_unparsable_date(tmp_path: Path) -> None:
    write_tlogic(tmp_path, TLOGIC_OK.replace("2014-01-03", "2014-13-03"))
    expect_error(
        lambda: readers.read_tlogic(tmp_path), "unparsable date '2014-13-03'", "train.txt", 2
    )


def test_date_in_wrong_format(tmp_path: Path) -> None:
    write_tlogic(tmp_path, TLOGIC_OK.replace("2014-01-03", "03/01/2014"))
    expect_error(lambda: readers.read_tlogic(tmp_path), "unparsable date", "train.txt", 2)


def test_name_missing_from_id_map(tmp_path: Path) -> None:
    write_tlogic(tmp_path, TLOGIC_OK + "Nobody\tMake_a_visit\tC\t2014-01-04\n")
    expect_error(
        lambda: readers.read_tlogic(tmp_path), "'Nobody' is not in entity2id.json", "train.txt", 3
    )


def test_empty_file(tmp_path: Path) -> None:
    write_tlogic(tmp_path, "")
    expect_error(lambda: readers.read_tlogic(tmp_path), "file is empty", "train.txt", None)


def test_blank_line_inside_file(tmp_path: Path) -> None:
    write_tlogic(tmp_path, TLOGIC_OK.replace("\n", "\n\n", 1))
    expect_error(lambda: readers.read_tlogic(tmp_path), "blank line", "train.txt", 2)


def test_non_utf8_bytes(tmp_path: Path) -> None:
    write_tlogic(tmp_path, TLOGIC_OK.encode() + b"Caf\xe9\tMake_a_visit\tC\t2014-01-04\n")
    err = expect_error(lambda: readers.read_tlogic(tmp_path), "not valid UTF-8", "train.txt", 3)
    assert "0xe9" in str(err) and "column 4" in str(err)


def test_crlf_line_endings_are_accepted(tmp_path: Path) -> None:
    write_tlogic(tmp_path, TLOGIC_OK.replace("\n", "\r\n"))
    kg = readers.read_tlogic(tmp_path)
    assert kg.lines_read["train"] == 2


def _xerte(root: Path, train: str) -> None:
    folder = root / "xERTE_ICEWS14_forecasting"
    folder.mkdir(parents=True)
    (folder / "entity2id.txt").write_text("Citizen (Nigeria)\t0\nA\t1\n")
    (folder / "relation2id.txt").write_text("Make a visit\t0\n")
    (folder / "train.txt").write_text(train)
    (folder / "valid.txt").write_text("0\t0\t1\t24\t-1\n")
    (folder / "test.txt").write_text("1\t0\t0\t48\t-1\n")


def test_xerte_id_missing_from_map(tmp_path: Path) -> None:
    _xerte(tmp_path, "0\t0\t1\t0\t-1\n0\t0\t7\t0\t-1\n")
    expect_error(
        lambda: readers.read_xerte(tmp_path), "entity id 7 is not in entity2id.txt", "train.txt", 2
    )


def test_xerte_time_not_whole_day(tmp_path: Path) -> None:
    _xerte(tmp_path, "0\t0\t1\t30\t-1\n")
    expect_error(lambda: readers.read_xerte(tmp_path), "not a whole day", "train.txt", 1)


def test_xerte_non_integer_id(tmp_path: Path) -> None:
    _xerte(tmp_path, "0\tx\t1\t0\t-1\n")
    expect_error(lambda: readers.read_xerte(tmp_path), "'x' is not an integer", "train.txt", 1)


def test_nell_concept_missing_from_kbgat_map(tmp_path: Path) -> None:
    facts, ids = tmp_path / "pp413_NELL-995", tmp_path / "KBGAT_NELL-995"
    facts.mkdir()
    ids.mkdir()
    (ids / "entity2id.txt").write_text("concept_city_paris\t0\nconcept_country_france\t1\n")
    (ids / "relation2id.txt").write_text("concept:citylocatedincountry\t0\n")
    line = "concept_city_paris\tconcept:citylocatedincountry\tconcept_country_france\n"
    (facts / "train.txt").write_text(
        line + "concept_city_lyon\tconcept:citylocatedincountry\tconcept_country_france\n"
    )
    (facts / "valid.txt").write_text(line)
    (facts / "test.txt").write_text(line)
    expect_error(
        lambda: readers.read_nell(tmp_path), "'concept_city_lyon' is not in", "train.txt", 2
    )


def test_duplicate_id_in_map(tmp_path: Path) -> None:
    _xerte(tmp_path, "0\t0\t1\t0\t-1\n")
    (tmp_path / "xERTE_ICEWS14_forecasting" / "entity2id.txt").write_text("A\t0\nB\t0\n")
    with pytest.raises(KGFormatError, match="id 0 is used by both 'A' and 'B'"):
        readers.read_xerte(tmp_path)


DUPS = TLOGIC_OK + "A_B\tMake_a_visit\tC\t2014-01-02\n" + "A_B\tMake_a_visit\tC\t2014-01-02\n"


def test_duplicates_dropped_and_counted(tmp_path: Path) -> None:
    write_tlogic(tmp_path, DUPS)
    kg = readers.read_tlogic(tmp_path)
    assert repair(kg, "drop") == {"train": 2, "valid": 0, "test": 0}
    assert (kg.facts["split"] == "train").sum() == 2
    assert "line" not in kg.facts


def test_duplicates_kept_on_request(tmp_path: Path) -> None:
    write_tlogic(tmp_path, DUPS)
    kg = readers.read_tlogic(tmp_path)
    assert repair(kg, "keep") == {"train": 0, "valid": 0, "test": 0}
    assert (kg.facts["split"] == "train").sum() == 4


def test_duplicates_error_names_both_lines(tmp_path: Path) -> None:
    write_tlogic(tmp_path, DUPS)
    kg = readers.read_tlogic(tmp_path)
    with pytest.raises(KGFormatError, match=r"duplicate fact \(same as line 1\)") as info:
        repair(kg, "error")
    assert info.value.line == 3 and info.value.path.name == "train.txt"


def test_static_duplicates_with_no_time_are_found(tmp_path: Path) -> None:
    (tmp_path / "train.tsv").write_text("a\tr\tb\na\tr\tb\n")
    (tmp_path / "test.tsv").write_text("b\tr\ta\n")
    kg = readers.read_generic(tmp_path)
    with pytest.raises(KGFormatError, match="same as line 1"):
        repair(kg, "error")
    assert repair(kg, "drop") == {"train": 1, "test": 0}


def test_bad_input_leaves_previous_outputs_intact(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    write_tlogic(mirror / "icews14")
    out = tmp_path / "out"
    ingest_into(DATASETS["icews14"], out, data_dir=mirror, download_dir=tmp_path / "dl")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    write_tlogic(mirror / "icews14", TLOGIC_OK + "broken line\n")
    with pytest.raises(KGFormatError):
        ingest_into(DATASETS["icews14"], out, data_dir=mirror, download_dir=tmp_path / "dl")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_bad_input_on_first_run_writes_nothing(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    write_tlogic(mirror / "icews14", TLOGIC_OK + "broken line\n")
    out = tmp_path / "out"
    with pytest.raises(KGFormatError):
        ingest_into(DATASETS["icews14"], out, data_dir=mirror, download_dir=tmp_path / "dl")
    assert not out.exists() or not any(out.iterdir())


def test_missing_dataset_says_where_it_looked(tmp_path: Path) -> None:
    def offline(files, dest):
        raise DownloadError(f"cannot reach {files[0].url}")

    with pytest.raises(DatasetNotFoundError) as info:
        locate(DATASETS["icews14"], tmp_path / "mirror", tmp_path / "dl", fetcher=offline)
    message = str(info.value)
    assert str(tmp_path / "mirror" / "icews14") in message
    assert "RULERAG_DATA_DIR" in message
    assert "raw.githubusercontent.com/liu-yushan/TLogic" in message
    assert "xerte has no public download" in message


def test_missing_mirror_setting_is_reported(tmp_path: Path) -> None:
    def offline(files, dest):
        raise DownloadError("offline")

    with pytest.raises(DatasetNotFoundError, match="RULERAG_DATA_DIR is not set"):
        locate(DATASETS["nell995"], None, tmp_path / "dl", fetcher=offline)


def test_generic_reader_csv_with_header_and_dates(tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text(
        'head,relation,tail,time\n"Smith, John",works for,ACME,2020-05-01\n'
    )
    (tmp_path / "test.csv").write_text('ACME,employs,"Smith, John",2020-06-01\n')
    kg = readers.read_generic(tmp_path, delimiter=",", time_format="%Y-%m-%d")
    assert set(kg.entities["name"]) == {"Smith, John", "ACME"}
    assert kg.lines_read == {"train": 1, "test": 1}
    assert kg.time_unit == "day"


def test_generic_reader_time_column_without_time_format(tmp_path: Path) -> None:
    (tmp_path / "train.tsv").write_text("a\tr\tb\t2020\n")
    expect_error(lambda: readers.read_generic(tmp_path), "no time_format set", "train.tsv", 1)


def test_generic_reader_bad_year(tmp_path: Path) -> None:
    (tmp_path / "train.tsv").write_text("a\tr\tb\t2020\na\tr\tc\tlate\n")
    expect_error(
        lambda: readers.read_generic(tmp_path, time_format="year"),
        "'late' is not an integer",
        "train.tsv",
        2,
    )


def test_custom_dataset_from_params(tmp_path: Path) -> None:
    (tmp_path / "train.tsv").write_text("a\tr\tb\n")
    params = {"ingest": {"custom": {"mykg": {"path": str(tmp_path)}}}}
    spec = get_spec("mykg", ingest_settings(params["ingest"]))
    out = tmp_path / "out"
    kg, stats = ingest_into(spec, out, data_dir=None, download_dir=tmp_path / "dl")
    assert stats["splits"] == {"train": 1} and stats["kind"] == "static"
    assert any("'valid' is not in the source" in n for n in stats["notes"])


def test_custom_dataset_with_unknown_key() -> None:
    with pytest.raises(ValueError, match="ingest.custom.mykg: unknown key 'sep'"):
        get_spec("mykg", ingest_settings({"custom": {"mykg": {"path": "/x", "sep": ","}}}))
    with pytest.raises(ValueError, match=r"ingest\.custom\.mykg\.path: Field required"):
        get_spec("mykg", ingest_settings({"custom": {"mykg": {"delimiter": ","}}}))


def test_unknown_dataset_lists_known_ones() -> None:
    with pytest.raises(KeyError, match="icews14, yago, wiki, fb15k237, nell995"):
        get_spec("icews15")


def test_broken_jsonl_line_names_file_and_line(tmp_path: Path) -> None:
    from rulerag.generation.samples import load_corpus
    from rulerag.retrieval.data import read_corpus

    path = tmp_path / "corpus.jsonl"
    path.write_text('{"id": "D1", "contents": "a b"}\n\n{"id": "D2", "contents": \n')
    for reader in (read_corpus, load_corpus):
        with pytest.raises(ValueError, match=r"corpus\.jsonl:3: not JSON"):
            reader(path)
