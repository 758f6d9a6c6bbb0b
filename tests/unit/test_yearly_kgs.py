"""Yearly KGs (YAGO, WIKI): readable relation names and times, and a train split derived from
valid when the source has none."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rulerag.kg import readers
from rulerag.kg.errors import KGFormatError
from rulerag.kg.ingest import derive_train
from rulerag.kg.names import camel_words
from rulerag.kg.registry import DATASETS
from rulerag.kg.schema import format_time
from tests.helpers import ingest_into


def test_camel_case_relations_read_as_words() -> None:
    assert camel_words("<wasBornIn>") == "was born in"
    assert camel_words("<isMarriedTo>") == "is married to"
    assert camel_words("<created>") == "created"
    assert camel_words("<hasUSState>") == "has US state"
    assert camel_words("capital of") == "capital of"  # already words
    assert camel_words("P131") == "P131"


def test_times_render_as_dates_years_or_named_steps() -> None:
    assert format_time(16436, "day") == "2015-01-01"
    assert format_time(2008, "year") == "2008"
    assert format_time(211, "index") == "step 211"  # a bare 211 would read as a year
    assert format_time(None, "year") is None


def _tkgf(root: Path, train: bool = False) -> Path:
    """A TKGF-format WIKI fixture: labels (one shared), 4-column facts over steps 0-4."""
    folder = root / "wiki" / "TKGF_WIKI"
    folder.mkdir(parents=True)
    (folder / "entity2id.txt").write_text("Uzhhorod\t0\nAachen\t1\nAachen\t2\nQ99\t3\n")
    (folder / "relation2id.txt").write_text("capital of\t0\ntwinned administrative body\t1\n")
    valid = [(s, 0, o, t) for t in range(4) for s, o in ((0, 1), (1, 0))]
    (folder / "valid.txt").write_text("".join(f"{s}\t{r}\t{o}\t{t}\n" for s, r, o, t in valid))
    (folder / "test.txt").write_text("0\t1\t3\t4\n")
    if train:
        (folder / "train.txt").write_text("2\t0\t3\t0\n")
    return root


def test_tkgf_labels_years_and_shared_names(tmp_path: Path) -> None:
    kg = readers.read_tkgf(_tkgf(tmp_path) / "wiki", year_origin=1786)
    assert list(kg.entities["name"]) == ["Uzhhorod", "Aachen (#1)", "Aachen (#2)", "Q99"]
    assert kg.time_unit == "year" and sorted(set(kg.facts["time"])) == [
        1786,
        1787,
        1788,
        1789,
        1790,
    ]
    assert any("shared by several ids" in note for note in kg.notes)
    renet = tmp_path / "wiki" / "RE-Net_WIKI"
    renet.mkdir()
    (renet / "entity2id.txt").write_text("Q1\t0\nQ2\t1\nQ3\t2\nQ99\t3\n")
    kg = readers.read_tkgf(tmp_path / "wiki", year_origin=1786)
    assert list(kg.entities["name"]) == ["Uzhhorod", "Aachen (Q2)", "Aachen (Q3)", "Q99"]
    assert list(kg.entities["key"]) == ["Q1", "Q2", "Q3", "Q99"]


def test_tkgf_bad_lines_name_file_and_line(tmp_path: Path) -> None:
    root = _tkgf(tmp_path)
    (root / "wiki" / "TKGF_WIKI" / "test.txt").write_text("0\t1\t3\t4\n0\t1\t7\t4\n")
    with pytest.raises(KGFormatError, match=r"test.txt.*2.*entity id 7"):
        readers.read_tkgf(root / "wiki")
    (root / "wiki" / "TKGF_WIKI" / "entity2id.txt").write_text("A\t0\nB\t0\n")
    with pytest.raises(KGFormatError, match=r"entity2id.txt.*2.*id 0 is listed twice"):
        readers.read_tkgf(root / "wiki")


def test_train_is_derived_from_the_earliest_years_of_valid(tmp_path: Path) -> None:
    kg = readers.read_tkgf(_tkgf(tmp_path) / "wiki", year_origin=1786)
    before = kg.facts.copy()
    derived = derive_train(kg, 0.5)
    # valid's 8 facts by year: 1786: 2, 1787: 2, 1788: 2, 1789: 2 -> half by the end of 1787
    split = kg.facts["split"]
    assert set(kg.facts.loc[split == "train", "time"]) == {1786, 1787}
    assert set(kg.facts.loc[split == "valid", "time"]) == {1788, 1789}
    assert (kg.facts.loc[before["split"] == "test", "split"] == "test").all()
    assert kg.facts.drop(columns="split").equals(before.drop(columns="split"))  # nothing lost
    assert derived["train"] == "valid 1786 to 1787 (4 facts)"
    assert derived["valid"] == "valid 1788 to 1789 (4 facts)"
    assert any("no train split in the source" in note for note in kg.notes)
    # valid keeps at least its last year even when the share asks for everything
    kg = readers.read_tkgf(tmp_path / "wiki", year_origin=1786)
    derive_train(kg, 1.0)
    assert set(kg.facts.loc[kg.facts["split"] == "valid", "time"]) == {1789}


def test_a_published_train_split_is_never_replaced(tmp_path: Path) -> None:
    kg = readers.read_tkgf(_tkgf(tmp_path, train=True) / "wiki", year_origin=1786)
    before = kg.facts["split"].copy()
    assert derive_train(kg, 0.7) is None
    assert kg.facts["split"].equals(before)
    kg = readers.read_tkgf(tmp_path / "wiki")
    assert derive_train(kg.__class__(kg.facts, kg.entities, kg.relations), 0.7) is None  # static


def test_ingest_records_the_derived_splits(tmp_path: Path) -> None:
    root = _tkgf(tmp_path)
    kg, stats = ingest_into(DATASETS["wiki"], tmp_path / "out", data_dir=root,
                       download_dir=tmp_path / "dl", train_from_valid=0.5)  # fmt: skip
    assert stats["splits"] == {"train": 4, "valid": 4, "test": 1}
    assert stats["derived_splits"]["facts_moved"] == 4
    assert stats["time_range"] == {"first": "1786", "last": "1790"}
    facts = pd.read_parquet(tmp_path / "out" / "facts.parquet")
    assert (facts["split"] == "train").sum() == 4
    _, stats = ingest_into(DATASETS["wiki"], tmp_path / "out2", data_dir=root,
                      download_dir=tmp_path / "dl", train_from_valid=None)  # fmt: skip
    assert "train" not in stats["splits"] and stats["derived_splits"] is None
