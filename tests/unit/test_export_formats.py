"""The export's pieces that need no stage: the card's features in `datasets`' own YAML
vocabulary, the official layout's refusals, the settings' checks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rulerag.export.dpr import dpr_records
from rulerag.export.huggingface import records_table, yaml_features
from rulerag.export.official import answer_line, prompt_blocks
from rulerag.export.settings import export_settings
from rulerag.generation.prompts import Sample
from rulerag.retrieval.training import TrainItem
from rulerag.settings import SettingsError


def test_card_features_are_what_datasets_writes_for_the_schema() -> None:
    datasets = pytest.importorskip("datasets")
    table = records_table(
        "test",
        [
            {"qid": "q1", "answers": ["a"], "answer_ids": [3], "time": None, "ok": True},
            {"qid": "q2", "answers": [], "answer_ids": [], "time": None, "ok": False, "x": 0.5},
        ],
    ).table
    assert table.column_names == ["qid", "answers", "answer_ids", "time", "ok", "x"]
    expected = datasets.Features.from_arrow_schema(table.schema)._to_yaml_list()
    assert yaml_features(table.schema) == expected


def test_nan_becomes_null_and_large_strings_plain() -> None:
    table = records_table("rules", [{"c": float("nan"), "t": "x"}, {"c": 0.5, "t": "y"}]).table
    assert table.column("c").to_pylist() == [None, 0.5]
    assert table.schema.field("t").type == pa.string()


def test_official_files_refuse_what_their_scripts_would_split_wrongly() -> None:
    record = {"qid": "q1", "head_name": "A\tB", "relation_name": "r", "answers": ["c"]}
    with pytest.raises(ValueError, match="q1: its subject holds a tab or a line break"):
        answer_line(record)
    with pytest.raises(ValueError, match="q2: a test query without an answer"):
        answer_line({"qid": "q2", "answers": []})
    line = answer_line({**record, "head_name": "A B", "time_text": "2014-01-02"})
    assert line == "A B\tr\tc\t2014-01-02\n"
    blocks = prompt_blocks([Sample("q1", "what does A r ?", ("c",), ("D one.",), ("R1",), True)])
    assert blocks.endswith("# Answer:\n\n") and blocks.count("\n\n") == 1


def test_hard_negatives_skip_every_oracle_document_of_the_query() -> None:
    items = [TrainItem("q#r", "q", "q r", (0,), frozenset({0, 1}))]
    rows = np.array([[1, 0, 2, -1, 3]])
    (record,) = dpr_records(items, {"q": ("a",)}, ["D0", "D1", "D2", "D3"], list("wxyz"), rows, 1)
    assert [c["passage_id"] for c in record["positive_ctxs"]] == ["D0"]
    assert [c["passage_id"] for c in record["hard_negative_ctxs"]] == ["D2"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"format": "csv"}, r"export\.format: Input should be 'parquet' or 'jsonl'"),
        ({"retriever": "bm25"}, "retriever must be a dense encoder"),
        ({"documents_mode": "rg"}, r"export\.documents_mode: Input should be 'rgft' or 'ssft'"),
        ({"hard_negatives": 40}, r"hard_negatives \(40\) exceeds search_depth \(30\)"),
    ],
)
def test_bad_export_settings_fail_naming_the_key(values: dict, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        export_settings(values)
