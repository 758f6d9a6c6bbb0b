"""Stage `export` end to end on the tiny benchmark (MiniLM): the Hugging Face folder
loaded with `datasets` as a researcher would, its sizes and fields against stats.json and its
checksums; the DPR files against DPR's schema; the official RuleRAG layout parsed the way its
scripts split it (`RuleRAG_eval_utils.read_test_and_divide` / `read_test_an`, `main_train`'s
`load_dataset("json")`). The fine-tuned query encoder the prompts are searched with is the base
MiniLM saved where `train_retriever` writes one (training it is the retrieval stages' test)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

import pipeline_steps.export as export
import pipeline_steps.index as index
from rulerag.io import read_jsonl, write_json, write_jsonl, write_manifest
from tests.helpers import StageProject, require_minilm
from tests.support.synthetic_retrieval import tiny_benchmark

pytestmark = pytest.mark.slow  # an MLflow SQLite store, two stages

datasets = pytest.importorskip("datasets")

PARAMS = {
    "index": {
        "threads": 1,
        "dense": {"minilm": {"model": "minilm", "max_length": 32, "batch_size": 64}},
        "faiss": {"kind": "flat"},
    },
    "export": {
        "hard_negatives": 3,
        "search_depth": 8,
        "documents": 2,
    },
}


def _benchmark(root: Path) -> dict[str, int]:
    """The tiny benchmark with what build_benchmark also writes: corpus.parquet, stats.json,
    the test queries' names and time, and the KG's entities."""
    counts = tiny_benchmark(root)
    layout = StageProject(root.parents[1]).layout(root.name)
    docs = read_jsonl(layout.corpus)
    frame = pd.DataFrame(
        {
            "id": [d["id"] for d in docs],
            "contents": [d["contents"] for d in docs],
            "head": range(len(docs)),
            "relation": [0] * len(docs),
            "tail": range(1, len(docs) + 1),
            "time": pd.array([16071 + i for i in range(len(docs))], dtype="Int64"),
            "split": pd.array(["train"] * len(docs), dtype="string"),
        }
    )
    frame.to_parquet(layout.corpus_table, index=False)
    test = read_jsonl(layout.queries("test"))
    for record in test:
        words = record["query"].split()  # Time 2014-04-01 what does <person> Make a visit ?
        record.update(head_name=words[4], relation_name="Make a visit", time_text=words[1])
    write_jsonl(layout.queries("test"), test)
    rules = len(pd.read_parquet(layout.rule_bank))
    paper = {"rules": 557, "corpus": 77508, "f_r": 6594, "f_g": 7440, "test": 1559}
    write_json(layout.benchmark / "stats.json", {**counts, "rules": rules, "paper": paper})
    write_manifest(layout.benchmark)
    layout.kg.mkdir(parents=True)
    people = sorted({r["head_name"] for r in test})
    pd.DataFrame({"id": range(len(people)), "name": people}).to_parquet(
        layout.entities, index=False
    )
    return {**counts, "rules": rules}


def _indexed(project: StageProject, params: dict) -> None:
    """The minilm index of the tiny corpus, and a query encoder where minilm-rgft's goes."""
    from sentence_transformers import SentenceTransformer

    from rulerag.retrieval.encoders import minilm_path

    assert project.run(index, "--dataset", "tiny", "--index", "minilm", params=params) == 0
    model = SentenceTransformer(str(minilm_path()), device="cpu")
    model.save(str(project.layout("tiny").model("minilm-rgft")))


@contextmanager
def _project_at(root: Path) -> Iterator[StageProject]:
    """A throw-away project at `root` (as the `stage_project` fixture makes one), its own
    MLflow store."""
    import pipeline_steps.common as common

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(common, "PROJECT_DIR", root)
        patch.setattr(common, "DATA_DIR", root / "data")
        patch.setattr(common, "MODEL_CACHE", root / ".models")
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
        yield StageProject(root)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StageProject]:
    """One project for the module: the tiny benchmark, its minilm index and an encoder where
    minilm-rgft's goes, exported once (Parquet); the tests only read it."""
    require_minilm()
    with _project_at(tmp_path_factory.mktemp("export")) as project:
        _benchmark(project.layout("tiny").root)
        _indexed(project, PARAMS)
        assert project.run(export, "--dataset", "tiny", params=PARAMS) == 0
        yield project


@pytest.fixture
def exported(built: StageProject) -> Path:
    return built.layout("tiny").export


def test_the_huggingface_folder_loads_with_datasets_as_stats_json_says(
    exported: Path, built: StageProject
) -> None:
    layout = built.layout("tiny")
    stats = json.loads((layout.benchmark / "stats.json").read_text())
    folder = exported / "huggingface"
    sources = {
        "test": read_jsonl(layout.queries("test")),
        "f_r": read_jsonl(layout.queries("f_r")),
        "f_g": read_jsonl(layout.queries("f_g")),
    }
    splits = {"corpus": "corpus", "rules": "rules", "test": "test", "f_r": "train", "f_g": "train"}
    for config, split in splits.items():
        loaded = datasets.load_dataset(str(folder), config, split=split)
        assert loaded.num_rows == stats[config], config
        if config in sources:
            keys = list(dict.fromkeys(k for r in sources[config] for k in r))
            assert loaded.column_names == keys
            assert loaded[0] == sources[config][0]  # values and types as build_benchmark wrote
    corpus = datasets.load_dataset(str(folder), "corpus", split="corpus")
    assert corpus.features["time"].dtype == "int64" and corpus[0]["split"] == "train"
    assert set(corpus.column_names) >= {"id", "contents"}
    rules = datasets.load_dataset(str(folder), "rules", split="rules")
    assert set(rules.column_names) == {"rule_id", "text"}

    card = (folder / "README.md").read_text()
    assert card.startswith("---\n") and "config_name: f_r" in card
    assert "| F_R | 20 | 6,594 |" in card  # the build beside Table 1
    assert "Citation" in card and "Commit:" in card and "retriever: minilm" in card
    lines = (folder / "checksums.sha256").read_text().splitlines()
    listed = {line.split("  ", 1)[1]: line.split("  ", 1)[0] for line in lines}
    assert set(listed) == {p.name for p in folder.iterdir()} - {"checksums.sha256"}
    for name, digest in listed.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest

    exported_stats = json.loads((exported / "stats.json").read_text())
    assert exported_stats["configs"] == {k: stats[k] for k in splits}
    manifest = json.loads((exported / "manifest.json").read_text())["files"]
    assert "huggingface/README.md" in manifest and "dpr/rgft.json" in manifest


def test_a_jsonl_export_loads_the_same_rows(built: StageProject, tmp_path: Path) -> None:
    """The module's inputs copied (no second index), exported as JSON Lines."""
    copy = StageProject(tmp_path).layout("tiny")
    shutil.copytree(built.layout("tiny").root, copy.root)
    shutil.rmtree(copy.export)
    params = {**PARAMS, "export": {**PARAMS["export"], "format": "jsonl"}}
    with _project_at(tmp_path) as project:
        assert project.run(export, "--dataset", "tiny", params=params) == 0
    folder = project.layout("tiny").export / "huggingface"
    assert (folder / "f_r.jsonl").is_file() and not (folder / "f_r.parquet").exists()
    parquet = built.layout("tiny").export / "huggingface"
    for config, split in (("f_r", "train"), ("rules", "rules"), ("corpus", "corpus")):
        loaded = datasets.load_dataset(str(folder), config, split=split)
        assert (
            loaded.to_list() == datasets.load_dataset(str(parquet), config, split=split).to_list()
        )


def test_dpr_files_follow_dprs_schema(exported: Path, built: StageProject) -> None:
    layout = built.layout("tiny")
    corpus = {d["id"]: d["contents"] for d in read_jsonl(layout.corpus)}
    f_r = read_jsonl(layout.queries("f_r"))
    oracle: dict[str, set[str]] = {}
    for item in f_r:
        oracle.setdefault(item["qid"], set()).update(item["oracle_doc_ids"])
    with_oracle = [item for item in f_r if item["oracle_doc_ids"]]
    keys = {"question", "answers", "positive_ctxs", "negative_ctxs", "hard_negative_ctxs"}
    for variant in ("rgft", "ssft"):
        records = json.loads((exported / "dpr" / f"{variant}.json").read_text())
        assert isinstance(records, list) and records
        expected = with_oracle if variant == "rgft" else {i["qid"]: i for i in with_oracle}
        assert len(records) == len(expected)
        for record in records:
            assert keys <= set(record)
            assert isinstance(record["question"], str) and record["question"]
            assert all(isinstance(a, str) for a in record["answers"]) and record["answers"]
            assert record["negative_ctxs"] == []
            for ctx in record["positive_ctxs"] + record["hard_negative_ctxs"]:
                assert set(ctx) == {"title", "text", "passage_id"}
                assert ctx["text"] == corpus[ctx["passage_id"]] and ctx["title"] == ""
            positives = {c["passage_id"] for c in record["positive_ctxs"]}
            hard = [c["passage_id"] for c in record["hard_negative_ctxs"]]
            assert positives and positives <= oracle[record["qid"]]
            assert 0 < len(hard) <= 3 and not set(hard) & oracle[record["qid"]]
        rgft_rule = "leads to" in records[0]["question"]
        assert rgft_rule == (variant == "rgft")


def test_the_official_layout_parses_as_its_scripts_split_it(
    exported: Path, built: StageProject
) -> None:
    layout = built.layout("tiny")
    folder = exported / "rulerag_official"
    # main_train.py: get_dataset("json", DATA_PATH) -> load_dataset("json", data_files=...)
    train = datasets.load_dataset("json", data_files=str(folder / "train.json"))["train"]
    f_g = read_jsonl(layout.queries("f_g"))
    assert train.column_names == ["context", "target"] and train.num_rows == len(f_g)
    first = train[0]
    assert first["context"].startswith("# Instruct: For the query in the form of")
    assert (
        first["context"].endswith("\n# Answer:")
        and "\n# Rules: Use the following" in first["context"]
    )
    assert first["target"] == f"{f_g[0]['answers'][0]}."
    assert f"# Query: {f_g[0]['query']}\n" in first["context"]

    # RuleRAG_eval_utils.read_test_and_divide: content.split('\n\n'); the evaluator's loops
    # read blocks 0 .. len - 2 against read_test_an's lines (column 2 of each tab-split line)
    with open(folder / "test_prompts.txt", encoding="utf-8") as handle:
        tests = handle.read().split("\n\n")
    with open(folder / "test_answers.tsv", encoding="utf-8") as handle:
        lines = handle.readlines()
    test_ans = [line.split("\t")[2] for line in lines]
    queries = read_jsonl(layout.queries("test"))
    assert len(tests) == len(queries) + 1 and tests[-1] == ""
    assert len(test_ans) == len(queries)
    for block, answer, query in zip(tests, test_ans, queries, strict=False):
        assert block.startswith("# Instruct:") and block.endswith("# Answer:")
        assert f"# Query: {query['query']}\n" in block
        assert answer == query["answers"][0]
    s, r, o, t = lines[0].rstrip("\n").split("\t")
    assert (s, r, o, t) == (
        queries[0]["head_name"],
        "Make a visit",
        queries[0]["answers"][0],
        "2014-04-01",
    )
    entities = json.loads((folder / "entity2id.json").read_text())
    assert queries[0]["head_name"] in entities


def test_missing_inputs_fail_naming_the_stage_to_run(
    stage_project: StageProject, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{stage_project.root / 'mlflow.db'}")
    _benchmark(stage_project.layout("tiny").root)
    assert stage_project.run(export, "--dataset", "tiny", params=PARAMS) == 2
    err = capsys.readouterr().err
    assert "export@tiny: no minilm index" in err and "run the index stage" in err
    assert not stage_project.layout("tiny").export.exists()
