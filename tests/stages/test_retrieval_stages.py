"""The stage scripts `index`, `train_retriever`, `retrieve`, `retrieval_report` end to end on
the tiny benchmark: outputs, metrics, and what they log to MLflow (a throw-away SQLite
store)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import pipeline_steps.index as index
import pipeline_steps.retrieval_report as retrieval_report
import pipeline_steps.retrieve as retrieve
import pipeline_steps.train_retriever as train
from rulerag.tracking import artifact_repository
from tests.helpers import StageProject, require_minilm
from tests.support.synthetic_retrieval import tiny_benchmark

pytestmark = pytest.mark.slow

PARAMS = {
    "index": {
        "threads": 1,
        "sparse": {"backend": "bm25s", "parity_check": False},
        "dense": {"minilm": {"model": "minilm", "max_length": 32, "batch_size": 64}},
        "faiss": {"kind": "flat"},
    },
    "train_retriever": {
        "threads": 1,
        "lr": 1e-4,
        "batch_size": 4,
        "temperature": 0.05,
        "epochs": 2,
        "max_steps": 4,
        "eval_every": 2,
        "checkpoint_every": 2,
        "heldout_fraction": 0.2,
    },
    # the report compares these: bm25 and minilm, standard and rule-guided
    "retrieve": {
        "top_k": 5,
        "ks": [1, 2, 5],
        "splits": ["test", "f_g"],
        "indexes": ["bm25", "minilm"],
        "finetune": [],
    },
}


@pytest.fixture
def tiny_project(stage_project: StageProject, monkeypatch: pytest.MonkeyPatch) -> StageProject:
    """The tiny benchmark as data/tiny of a throw-away project with its own MLflow store."""
    tiny_benchmark(stage_project.layout("tiny").root)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{stage_project.root / 'mlflow.db'}")
    monkeypatch.setenv("RULERAG_PIPELINE_RUN", "test-retrieval-stages")
    return stage_project


@pytest.fixture
def project(tiny_project: StageProject) -> StageProject:
    require_minilm()
    return tiny_project


def test_index_train_retrieve_report(project: StageProject) -> None:
    def run(stage, *args: str) -> int:
        return project.run(stage, "--dataset", "tiny", *args, params=PARAMS)

    layout = project.layout("tiny")
    assert run(index, "--index", "bm25") == 0
    assert (layout.index("bm25") / "bm25s").is_dir()
    assert run(index, "--index", "minilm") == 0
    stats = json.loads(layout.index_stats("minilm").read_text())
    assert stats["docs"] == 200 and stats["dim"] == 384
    assert list(layout.cache("minilm").glob("*/chunk-*.npy"))

    assert run(train, "--encoder", "minilm", "--mode", "rgft") == 0
    assert (layout.model("minilm-rgft") / "model.safetensors").is_file()
    summary = json.loads((layout.training("minilm-rgft") / "train.json").read_text())
    assert summary["steps"] == 4 and "base_heldout_mrr" in summary
    loss = pd.read_csv(layout.training("minilm-rgft") / "loss.csv")
    assert loss["step"].tolist() == [1, 2, 3, 4]
    assert (layout.checkpoints("minilm-rgft") / "latest.json").is_file()

    for config in ("bm25-standard", "bm25-rg", "minilm-standard", "minilm-rg", "minilm-rgft"):
        assert run(retrieve, "--config", config) == 0
        out = layout.output(config)
        run_frame = pd.read_parquet(layout.run(config))
        assert list(run_frame.columns) == ["qid", "rule", "rank", "doc_id", "score"]
        assert run_frame["rank"].max() <= 5 and run_frame["qid"].nunique() == 20
        fg_run = pd.read_parquet(layout.run(config, "f_g"))
        assert len(fg_run) and fg_run["qid"].str.startswith("fg").all()
        metrics = json.loads(layout.retrieval_metrics(config).read_text())
        assert {"recall_at_1", "loose_recall_at_5", "f_g", "queries_per_second"} <= set(metrics)
        assert pd.read_csv(out / "recall.csv")["k"].tolist() == [1, 2, 5]
    bm25 = {
        c: json.loads(layout.retrieval_metrics(c).read_text()) for c in ("bm25-standard", "bm25-rg")
    }
    assert bm25["bm25-rg"]["recall_at_1"] > bm25["bm25-standard"]["recall_at_1"]
    assert bm25["bm25-rg"]["fallbacks"] == 4 and bm25["bm25-rg"]["unknown_rules"] == 2

    assert run(retrieval_report) == 0
    report = layout.retrieval_report
    table = pd.read_csv(report / "recall_at_k.csv")
    assert table["config"].unique().tolist() == [
        "bm25-standard", "bm25-rg", "minilm-standard", "minilm-rg",
    ]  # fmt: skip
    assert "| bm25-rg | 80.0 | 80.0 | 100.0 |" in (report / "results.md").read_text()
    assert (report / "recall_at_k.png").read_bytes()[:4] == b"\x89PNG"

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project.root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("rulerag/tiny")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("rulerag.run_kind") == "pipeline"]
    runs = [r for r in runs if r is not parent]  # the stage runs, nested under their pipeline's
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {parent.info.run_id}
    instances = sorted(r.data.tags["rulerag.stage_instance"] for r in runs)
    assert instances == sorted(
        [
            "index@tiny-bm25", "index@tiny-minilm", "train_retriever@tiny-minilm-rgft",
            "retrieve@tiny-bm25-standard", "retrieve@tiny-bm25-rg",
            "retrieve@tiny-minilm-standard", "retrieve@tiny-minilm-rg",
            "retrieve_finetuned@tiny-minilm-rgft", "retrieval_report@tiny",
        ]
    )  # fmt: skip
    trained = next(r for r in runs if r.data.tags["rulerag.stage"] == "train_retriever")
    history = client.get_metric_history(trained.info.run_id, "train_loss")
    assert [m.step for m in history] == [1, 2, 3, 4]
    store = f"sqlite:///{project.root / 'mlflow.db'}"  # no server: the project's mlartifacts/
    repository = artifact_repository(trained.info.artifact_uri, store, project.root)
    artifacts = {a.path for a in repository.list_artifacts()}
    assert {"loss.csv", "loss.png", "train.json"} <= artifacts
    # the encoder is the run's MLflow 3 logged model (one copy, not a run artifact), its input
    # the F_R split, registered with `champion` on its only version
    (logged,) = client.search_logged_models([experiment.experiment_id])
    assert logged.source_run_id == trained.info.run_id and "model" not in artifacts
    assert [i.dataset.name for i in trained.inputs.dataset_inputs] == ["f_r"]
    champion = client.get_model_version_by_alias("rulerag-tiny-retriever-minilm-rgft", "champion")
    assert champion.run_id == trained.info.run_id
    assert trained.data.params["mode"] == "rgft" and trained.data.params["rule_query"] == "rule"
    report = next(r for r in runs if r.data.tags["rulerag.stage"] == "retrieval_report")
    assert report.data.metrics["bm25-rg_recall_at_1"] == 0.8


def test_a_corpus_cut_at_a_line_boundary_fails_the_index_stage(
    project: StageProject, capsys: pytest.CaptureFixture[str]
) -> None:
    """150 of 200 documents parse fine; the index stage refuses them (it indexed them before)."""
    corpus = project.layout("tiny").corpus
    lines = corpus.read_bytes().splitlines(keepends=True)
    corpus.write_bytes(b"".join(lines[:150]))
    assert project.run(index, "--dataset", "tiny", "--index", "bm25", params=PARAMS) == 2
    err = capsys.readouterr().err
    assert "corpus.jsonl" in err and "200 lines" in err and "rerun" in err
    assert not project.layout("tiny").index("bm25").exists()


def test_bad_arguments_and_missing_inputs_fail_clearly(
    tiny_project: StageProject, capsys: pytest.CaptureFixture[str]
) -> None:
    """A configuration name, an encoder or a mode that is not one, and a stage run before the
    one it needs: exit 2 with a message naming what to fix, no traceback."""

    def failure(stage, *args: str) -> str:
        assert tiny_project.run(stage, "--dataset", "tiny", *args, params=PARAMS) == 2
        return capsys.readouterr().err

    assert "expected <index>-<mode>" in failure(retrieve, "--config", "minilm")
    assert "BM25 has no encoder to fine-tune" in failure(retrieve, "--config", "bm25-rgft")
    message = failure(retrieve, "--config", "minilm-rg")
    assert "retrieve@tiny" in message and "index/minilm" in message
    assert "index@nope: no encoder named 'nope'" in failure(index, "--index", "nope")
    message = failure(train, "--encoder", "minilm", "--mode", "rgft")
    assert "no minilm index" in message and "run the index stage" in message
    message = failure(retrieval_report)
    assert "retrieval_report@tiny" in message and "bm25-standard/metrics.json missing" in message
    with pytest.raises(SystemExit) as exited:  # argparse's own exit
        tiny_project.run(train, "--dataset", "tiny", "--encoder", "minilm", "--mode", "xx")
    assert exited.value.code == 2 and "--mode: 'xx' is not one of" in capsys.readouterr().err
