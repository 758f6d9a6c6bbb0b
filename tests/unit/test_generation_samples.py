"""`load_samples` on a synthetic data folder: the rules a prompt shows and the retrieval lists
its documents come from are the same first N selected rules (`generation.max_rules`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rulerag.generation.samples import load_samples
from rulerag.generation.settings import generation_settings
from rulerag.io import write_jsonl
from rulerag.layout import RUN_FILENAME, DataLayout
from tests.helpers import run_frame, write_bank

RULES = ["R1", "R2", "R3"]


@pytest.fixture()
def base(tmp_path: Path) -> Path:
    """Two queries with three rules each; every rule's search finds documents of its own (the
    first rule's score lowest, so a union over all rules would push its documents out)."""
    layout = DataLayout(tmp_path)
    layout.benchmark.mkdir()
    run_dir = layout.output("minilm-rg")
    run_dir.mkdir(parents=True)
    texts = [f"[Entity1, r{i}, Entity2] leads to [Entity1, h, Entity2]" for i in range(3)]
    write_bank(layout.rule_bank, dict(zip(RULES, texts, strict=True)))
    rows, corpus = [], []
    for q in ("q0", "q1"):
        for r, rule in enumerate(RULES):
            for rank in range(1, 5):
                doc = f"{q}-{rule}-{rank}"
                rows.append((q, rule, rank, doc, 10.0 * r + 5 - rank))
                corpus.append({"id": doc, "contents": f"document {doc}."})
    run_frame(rows).to_parquet(layout.run("minilm-rg"))
    write_jsonl(layout.corpus, corpus)
    return layout.root


QUERIES = [
    {"qid": q, "query": f"what does {q} h ?", "answers": ["x"], "rule_ids": RULES, "time": None}
    for q in ("q0", "q1")
]


def test_one_rule_per_prompt_takes_only_that_rules_documents(base: Path) -> None:
    settings = generation_settings({"max_rules": 1, "num_documents": 3, "recall_k": [10]})
    samples = load_samples(base, QUERIES, "minilm-rg", RUN_FILENAME, "all", settings)
    assert len(samples) == 2
    for sample in samples:
        assert sample.extra["rule_ids"] == ["R1"]
        assert len(sample.rules) == 1 and "r0" in sample.rules[0]
        assert len(sample.documents) == 3
        assert all("-R1-" in doc for doc in sample.documents)
        assert sample.extra["doc_ids"] and all("-R1-" in d for d in sample.extra["doc_ids"])


def test_every_selected_rule_by_default(base: Path) -> None:
    settings = generation_settings({"num_documents": 3, "recall_k": [10]})
    (sample, _) = load_samples(base, QUERIES, "minilm-rg", RUN_FILENAME, "all", settings)
    assert sample.extra["rule_ids"] == RULES
    # the union ranks by score: the third rule's documents first
    assert [d.split("-")[1] for d in sample.extra["doc_ids"][:4]] == ["R3"] * 4
    assert {d.split("-")[1] for d in sample.extra["doc_ids"]} == set(RULES)


def test_a_run_in_memory_gives_the_samples_its_file_gives(base: Path, tmp_path: Path) -> None:
    """The robustness rows answer from the run they searched, held in memory, and write it as
    run.parquet: the samples are the ones that file would give (row order and index of the
    frame aside: a parquet file reads back with a fresh index)."""
    from rulerag.io import write_parquet

    settings = generation_settings({"max_rules": 2, "num_documents": 3, "recall_k": [5]})
    run = pd.read_parquet(DataLayout(base).run("minilm-rg"))
    run = run.iloc[::-1].set_axis(range(100, 100 + 2 * len(run), 2))  # another order and index
    path = tmp_path / "elsewhere" / "run.parquet"
    path.parent.mkdir()
    write_parquet(path, run, {"stage": "test"})
    from_file = load_samples(base, QUERIES, "minilm-rg", path, "all", settings)
    in_memory = load_samples(base, QUERIES, "minilm-rg", run, "all", settings)
    assert in_memory == from_file
    assert [s.extra for s in in_memory] == [s.extra for s in from_file]
    assert [d.split("-")[1] for d in in_memory[0].extra["doc_ids"]][:4] == ["R2"] * 4


def test_a_run_file_is_read_for_the_samples_queries_only(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`load_samples` reads only its queries' rows of a run file (a rule-guided run at x16 is
    27.8 million rows for a grid row's hundred queries): each query's sample is the one the
    whole run in memory gives, from a file whose row groups cut the queries' rows apart."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import rulerag.io

    settings = generation_settings({"max_rules": 2, "num_documents": 3, "recall_k": [5]})
    run = pd.read_parquet(DataLayout(base).run("minilm-rg"))
    path = tmp_path / "groups" / "run.parquet"
    path.parent.mkdir()
    pq.write_table(pa.Table.from_pandas(run, preserve_index=False), path, row_group_size=5)
    read: list[pd.DataFrame] = []
    real = rulerag.io.read_parquet

    def spy(*args: object, **kwargs: object) -> pd.DataFrame:
        read.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return read[-1]

    monkeypatch.setattr("rulerag.generation.samples.read_parquet", spy)
    for query in QUERIES:
        (from_file,) = load_samples(base, [query], "minilm-rg", path, "all", settings)
        (whole,) = load_samples(base, [query], "minilm-rg", run, "all", settings)
        assert from_file == whole and from_file.extra == whole.extra
        assert set(read[-1]["qid"]) == {query["qid"]}
        assert len(read[-1]) == (run["qid"] == query["qid"]).sum()
