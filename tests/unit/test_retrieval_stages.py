"""The stage scripts `index`, `train_retriever`, `retrieve` end to end on the tiny benchmark:
outputs, metrics, and what they log to MLflow (a throw-away SQLite store)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pipeline_steps.common import PROJECT_DIR
from rulerag.retrieval.synthetic import tiny_benchmark
from tests.helpers import require_minilm

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
    "retrieve": {"top_k": 5, "ks": [1, 2, 5], "splits": ["test", "f_g"]},
}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    require_minilm()
    import pipeline_steps.index as index
    import pipeline_steps.retrieve as retrieve
    import pipeline_steps.train_retriever as train

    tiny_benchmark(tmp_path / "data" / "tiny")
    project_params = yaml.safe_load((PROJECT_DIR / "params.yaml").read_text(encoding="utf-8"))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({**project_params, **PARAMS}))
    for module in (index, retrieve, train):
        monkeypatch.setattr(module, "PROJECT_DIR", tmp_path)
        monkeypatch.setattr(module, "MODEL_CACHE", tmp_path / ".models")
        monkeypatch.setattr(module, "data_dir", lambda name: tmp_path / "data" / name)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("RULERAG_PIPELINE_RUN", "test-retrieval-stages")
    return tmp_path


def test_index_train_retrieve(project: Path) -> None:
    import pipeline_steps.index as index
    import pipeline_steps.retrieve as retrieve
    import pipeline_steps.train_retriever as train

    params = ["--params", str(project / "params.yaml")]
    root = project / "data" / "tiny" / "retrieval"
    assert index.main(["--dataset", "tiny", "--index", "bm25", *params]) == 0
    assert (root / "index" / "bm25" / "bm25s").is_dir()
    assert index.main(["--dataset", "tiny", "--index", "minilm", *params]) == 0
    stats = json.loads((root / "stats" / "index-minilm.json").read_text())
    assert stats["docs"] == 200 and stats["dim"] == 384
    assert list((root / "cache" / "minilm").glob("*/chunk-*.npy"))

    assert train.main(["--dataset", "tiny", "--encoder", "minilm", "--mode", "rgft", *params]) == 0
    assert (root / "models" / "minilm-rgft" / "model.safetensors").is_file()
    summary = json.loads((root / "training" / "minilm-rgft" / "train.json").read_text())
    assert summary["steps"] == 4 and "base_heldout_mrr" in summary
    loss = pd.read_csv(root / "training" / "minilm-rgft" / "loss.csv")
    assert loss["step"].tolist() == [1, 2, 3, 4]
    assert (root / "checkpoints" / "minilm-rgft" / "latest.json").is_file()

    for config in ("bm25-standard", "bm25-rg", "minilm-rg", "minilm-rgft"):
        assert retrieve.main(["--dataset", "tiny", "--config", config, *params]) == 0
        out = root / config
        run = pd.read_parquet(out / "run.parquet")
        assert list(run.columns) == ["qid", "rule", "rank", "doc_id", "score"]
        assert run["rank"].max() <= 5 and run["qid"].nunique() == 20
        fg_run = pd.read_parquet(out / "run_fg.parquet")
        assert len(fg_run) and fg_run["qid"].str.startswith("fg").all()
        metrics = json.loads((out / "metrics.json").read_text())
        assert {"recall_at_1", "loose_recall_at_5", "f_g", "queries_per_second"} <= set(metrics)
        assert pd.read_csv(out / "recall.csv")["k"].tolist() == [1, 2, 5]
    bm25 = {
        c: json.loads((root / c / "metrics.json").read_text()) for c in ("bm25-standard", "bm25-rg")
    }
    assert bm25["bm25-rg"]["recall_at_1"] > bm25["bm25-standard"]["recall_at_1"]
    assert bm25["bm25-rg"]["fallbacks"] == 4 and bm25["bm25-rg"]["unknown_rules"] == 2

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("rulerag/tiny")
    runs = client.search_runs([experiment.experiment_id])
    instances = sorted(r.data.tags["rulerag.stage_instance"] for r in runs)
    assert instances == sorted(
        [
            "index@tiny-bm25", "index@tiny-minilm", "train_retriever@tiny-minilm-rgft",
            "retrieve@tiny-bm25-standard", "retrieve@tiny-bm25-rg", "retrieve@tiny-minilm-rg",
            "retrieve_finetuned@tiny-minilm-rgft",
        ]
    )  # fmt: skip
    trained = next(r for r in runs if r.data.tags["rulerag.stage"] == "train_retriever")
    history = client.get_metric_history(trained.info.run_id, "train_loss")
    assert [m.step for m in history] == [1, 2, 3, 4]
    artifacts = {a.path for a in client.list_artifacts(trained.info.run_id)}
    assert {"loss.csv", "loss.png", "train.json", "model"} <= artifacts


def test_a_corpus_cut_at_a_line_boundary_fails_the_index_stage(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """150 of 200 documents parse fine; the index stage refuses them (it indexed them before)."""
    import pipeline_steps.index as index
    from pipeline_steps.common import run_stage

    corpus = project / "data" / "tiny" / "benchmark" / "corpus.jsonl"
    lines = corpus.read_bytes().splitlines(keepends=True)
    corpus.write_bytes(b"".join(lines[:150]))
    params = ["--params", str(project / "params.yaml")]
    assert run_stage(index.main, ["--dataset", "tiny", "--index", "bm25", *params]) == 2
    err = capsys.readouterr().err
    assert "corpus.jsonl" in err and "200 lines" in err and "rerun" in err
    assert not (project / "data" / "tiny" / "retrieval" / "index" / "bm25").exists()
