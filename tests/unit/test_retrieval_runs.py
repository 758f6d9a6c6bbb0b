"""The library calls of the `index` and `retrieve` stages on the tiny benchmark with BM25 (no
model needed): what they build, return and write. The figures are those the stages wrote
before they became shells around these calls (top_k 5, ks 1/2/5, 6 sampled F_G queries)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rulerag.errors import InputError
from rulerag.io import read_parquet, read_provenance
from rulerag.layout import DataLayout
from rulerag.retrieval.configs import parse_config
from rulerag.retrieval.data import read_queries, read_rule_texts, to_queries
from rulerag.retrieval.dense import DenseIndex
from rulerag.retrieval.indexing import index_corpus
from rulerag.retrieval.rule_guided import retrieve, rule_query_texts
from rulerag.retrieval.runs import open_searcher, retrieve_runs
from rulerag.retrieval.settings import RetrieveSettings, index_settings
from rulerag.settings import SettingsError
from tests.support.synthetic_retrieval import tiny_benchmark

INDEX = index_settings({"threads": 1, "sparse": {"parity_check": False}})
RETRIEVE = RetrieveSettings(top_k=5, ks=(1, 2, 5), f_g_queries=6)
STAGE = {"stage": "retrieve"}  # the provenance the runs carry (its stage names the staging)


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> DataLayout:
    """The tiny benchmark with its BM25 index, built by the index stage's call."""
    layout = DataLayout(tmp_path_factory.mktemp("data") / "tiny")
    tiny_benchmark(layout.root)
    built = index_corpus("bm25", layout, INDEX)
    stats, timings = built.stats, built.run_figures
    assert (stats["kind"], stats["docs"], stats["dataset"], stats["index"]) == (
        "sparse", 200, "tiny", "bm25",
    )  # fmt: skip
    assert timings["seconds"] >= timings["bm25s_build_seconds"] and "parity_top10" not in stats
    assert not any("seconds" in key for key in stats), "timings stay out of the stats file"
    assert built.metrics() == {**stats, **timings}
    assert (layout.index("bm25") / "bm25s").is_dir()
    assert not (layout.index("bm25") / "pyserini").exists()  # no parity check, no Lucene
    return layout


def test_index_corpus_refuses_an_unknown_encoder_and_a_missing_corpus(tmp_path: Path) -> None:
    layout = DataLayout(tmp_path / "tiny")
    with pytest.raises(SettingsError, match=r"index@nope: no encoder named 'nope'"):
        index_corpus("nope", layout, INDEX)
    with pytest.raises(InputError, match=r"index@tiny: no corpus at .*; run build_benchmark"):
        index_corpus("bm25", layout, INDEX)
    assert not layout.retrieval.exists()


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Searches in blocks of 3, so that the runs of the tiny benchmark come in many blocks
    (a query's rows cut between two) and are written and scored across them."""
    from rulerag.retrieval import rule_guided, runs

    monkeypatch.setattr(runs, "search_blocks", partial(rule_guided.search_blocks, block=3))


@pytest.mark.usefixtures("small_blocks")
def test_retrieve_runs_rule_guided_bm25(layout: DataLayout) -> None:
    provenance = {"stage": "retrieve", "dataset": "tiny"}
    runs = retrieve_runs(parse_config("bm25-rg"), layout, RETRIEVE, INDEX, provenance)
    out = layout.output("bm25-rg")
    assert list(runs.runs) == ["test", "f_g"] and runs.skipped == []
    assert runs.files == ["run.parquet", "run_fg.parquet"]
    metrics = runs.metrics
    assert {k: metrics[k] for k in ("dataset", "config", "index", "mode", "top_k")} == {
        "dataset": "tiny", "config": "bm25-rg", "index": "bm25", "mode": "rg", "top_k": 5,
    }  # fmt: skip
    assert (metrics["recall_at_1"], metrics["recall_at_2"], metrics["recall_at_5"]) == (
        0.8, 0.8, 1.0,
    )  # fmt: skip
    assert (metrics["queries"], metrics["searches"], metrics["fallbacks"]) == (20, 20, 4)
    assert metrics["unknown_rules"] == 2
    f_g = metrics["f_g"]
    assert (f_g["queries"], f_g["recall_at_1"], f_g["recall_at_5"], f_g["fallbacks"]) == (
        6, 0.6667, 1.0, 2,
    )  # fmt: skip
    assert sorted(pd.read_parquet(out / "run_fg.parquet")["qid"].unique()) == [
        "fg-00020", "fg-00021", "fg-00023", "fg-00026", "fg-00027", "fg-00029",
    ]  # the seeded sample of retrieve.f_g_queries  # fmt: skip

    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json", "metrics.json", "recall.csv", "run.parquet", "run_fg.parquet",
    ]  # fmt: skip
    assert json.loads((out / "metrics.json").read_text()) == metrics
    # the run written a block at a time is the whole run `rule_guided.retrieve` returns
    rules = rule_query_texts(read_rule_texts(layout.rule_bank), RETRIEVE.rule_query)
    searcher = open_searcher(parse_config("bm25-rg"), layout, INDEX)
    whole, _ = retrieve(read_queries(layout.queries("test")), searcher, 5, rules, block=3)
    written = read_parquet(out / "run.parquet")
    pd.testing.assert_frame_equal(written, whole)
    assert len(written) == 5 * (metrics["searches"])
    assert read_provenance(out / "run_fg.parquet") == {
        "stage": "retrieve", "dataset": "tiny", "split": "f_g",
    }  # fmt: skip
    curve = pd.read_csv(out / "recall.csv")
    assert list(curve.columns) == ["k", "recall", "loose_recall", "config"]
    assert curve["recall"].tolist() == [0.8, 0.8, 1.0]
    assert runs.artifacts == ["metrics.json", "recall.csv"]


def test_retrieve_runs_standard_and_what_is_missing(layout: DataLayout, tmp_path: Path) -> None:
    standard = retrieve_runs(parse_config("bm25-standard"), layout, RETRIEVE, INDEX, STAGE)
    assert (standard.metrics["recall_at_1"], standard.metrics["recall_at_5"]) == (0.0, 1.0)
    assert standard.metrics["fallbacks"] == 0  # the query alone: no rules to fall back from
    # a query set the benchmark lacks is skipped, and so is its run file
    only = DataLayout(tmp_path / "tiny")
    tiny_benchmark(only.root)
    only.queries("f_g").unlink()
    only.index("bm25").parent.mkdir(parents=True)
    only.index("bm25").symlink_to(layout.index("bm25"))
    runs = retrieve_runs(parse_config("bm25-standard"), only, RETRIEVE, INDEX, STAGE)
    assert runs.skipped == ["f_g.jsonl"] and runs.files == ["run.parquet"]
    assert "run_fg.parquet" not in {p.name for p in only.output("bm25-standard").iterdir()}
    assert "f_g" not in runs.metrics
    # a fine-tuned configuration before train_retriever wrote its query encoder
    dense = DataLayout(tmp_path / "dense" / "tiny")
    tiny_benchmark(dense.root)
    DenseIndex(["D1", "D2"], np.eye(2, dtype=np.float32), meta={"normalize": True}).save(
        dense.index("minilm")
    )
    with pytest.raises(InputError, match=r"retrieve@tiny: .*no trained query encoder at"):
        retrieve_runs(parse_config("minilm-rgft"), dense, RETRIEVE, INDEX, STAGE)
    assert not dense.output("minilm-rgft").exists()  # nothing created before the encoder opens


def test_a_large_corpus_on_bm25s_is_pointed_to_lucene(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from rulerag.retrieval import indexing

    layout = DataLayout(tmp_path / "tiny")
    tiny_benchmark(layout.root)
    monkeypatch.setattr(indexing, "BM25S_FLAT_UP_TO", 200)  # the tiny corpus: 200 documents
    with caplog.at_level("WARNING", logger="rulerag.retrieval.indexing"):
        index_corpus("bm25", layout, INDEX)
    assert not caplog.records  # at the bound: no warning
    monkeypatch.setattr(indexing, "BM25S_FLAT_UP_TO", 199)
    with caplog.at_level("WARNING", logger="rulerag.retrieval.indexing"):
        index_corpus("bm25", layout, INDEX)
    (record,) = caplog.records
    assert "corpus.jsonl: 200 documents" in record.getMessage()
    assert "index.sparse.backend: pyserini" in record.getMessage()


@pytest.mark.usefixtures("small_blocks")
def test_a_robustness_row_searches_as_the_stage_does(layout: DataLayout) -> None:
    """`RobustSearch.run` (the robustness stage's own search) gets the blocks `run_split`
    hands it as one frame: the whole run `rule_guided.retrieve` returns."""
    from rulerag.generation.rows import RobustSearch
    from rulerag.io import read_jsonl

    records = read_jsonl(layout.queries("test"))[:7]
    frame = RobustSearch(INDEX, RETRIEVE).run("bm25-rg", records, layout)
    rules = rule_query_texts(read_rule_texts(layout.rule_bank), RETRIEVE.rule_query)
    searcher = open_searcher(parse_config("bm25-rg"), layout, INDEX)
    whole, plan = retrieve(to_queries(records), searcher, RETRIEVE.top_k, rules)
    pd.testing.assert_frame_equal(frame, whole)
    assert len(frame) == RETRIEVE.top_k * len(plan.texts) and frame["qid"].nunique() == 7
