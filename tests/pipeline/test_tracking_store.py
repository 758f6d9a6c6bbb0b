"""rulerag.tracking against real MLflow stores: everything a stage logs reads back with
`MlflowClient`, runs of one pipeline execution are found by their shared tag, the default store
is the project's SQLite file, the replay CLI empties the spool, and after the project moves the
server that `make mlflow-ui` starts still serves every artifact and registered model."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from rulerag import tracking
from rulerag.tracking import PIPELINE_RUN_ENV, artifact_repository, stage_run
from rulerag.tracking.registry import registered_name
from tests.helpers import mlflow_ui

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("clean_tracking_env")]

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_round_trip_params_metrics_tags_artifacts(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    project = tmp_path / "project"
    results = project / "data" / "icews14" / "eval"
    (results / "plots").mkdir(parents=True)
    (results / "table.json").write_text(json.dumps({"em": 0.41}))
    (results / "plots" / "recall_at_k.csv").write_text("k,recall\n1,0.2\n10,0.5\n")
    (results / "index.md").write_text("# results\n")

    with stage_run(
        "evaluate",
        "icews14",
        project_dir=project,
        params={"evaluate": {"k": [1, 10], "retriever": {"name": "bm25", "k1": 0.9}}},
        tracking_uri=uri,
    ) as run:
        run.log_params({"model": "smollm2"})
        for step, value in enumerate([0.2, 0.35, 0.5]):
            run.log_metrics({"recall@10": value}, step=step)
        run.log_metrics({"em": 0.41, "token_f1": 0.5})
        run.set_tags({"retriever": "bm25"})
        run.log_artifact(results / "table.json")
        run.log_artifact(results / "plots")
        run.log_artifact(results / "index.md", artifact_path="reports/md")
        run.log_dict({"rules": ["[A, r1, B] leads to [A, r2, B]"]}, "sample/rules.json")
        run.log_dict({"k": 10}, "config.yaml")

    assert not run.spooled
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("rulerag/icews14")
    assert experiment is not None
    assert experiment.artifact_location == "mlflow-artifacts:/rulerag/icews14"
    logged = client.get_run(run.run_id)
    assert logged.info.run_name == "evaluate"
    assert logged.info.status == "FINISHED"
    assert logged.info.end_time >= logged.info.start_time
    assert logged.data.params == {
        "evaluate.k": "[1, 10]",
        "evaluate.retriever.name": "bm25",
        "evaluate.retriever.k1": "0.9",
        "model": "smollm2",
    }
    assert logged.data.metrics == {"recall_at_10": 0.5, "em": 0.41, "token_f1": 0.5}
    history = client.get_metric_history(run.run_id, "recall_at_10")
    assert [(m.step, m.value) for m in history] == [(0, 0.2), (1, 0.35), (2, 0.5)]
    tags = logged.data.tags
    assert tags["rulerag.stage"] == "evaluate"
    assert tags["rulerag.dataset"] == "icews14"
    assert tags["rulerag.stage_instance"] == "evaluate@icews14"
    assert tags["rulerag.pipeline_run"].startswith(("standalone-", "dvc-"))
    assert tags["retriever"] == "bm25"
    assert "mlflow.source.git.commit" not in tags, "the project folder is no git repository"

    stored = artifact_repository(logged.info.artifact_uri, uri, project)
    top = sorted(a.path for a in stored.list_artifacts())
    assert top == ["config.yaml", "plots", "reports", "sample", "table.json"]
    assert [a.path for a in stored.list_artifacts("plots")] == ["plots/recall_at_k.csv"]
    (tmp_path / "down").mkdir()
    local = Path(stored.download_artifacts("", str(tmp_path / "down")))
    assert json.loads((local / "table.json").read_text()) == {"em": 0.41}
    assert (local / "plots" / "recall_at_k.csv").read_text().startswith("k,recall")
    assert (local / "reports" / "md" / "index.md").read_text() == "# results\n"
    assert json.loads((local / "sample" / "rules.json").read_text())["rules"][0].startswith("[A")
    assert (local / "config.yaml").read_text() == "k: 10\n"
    assert not (project / ".mlflow-spool").exists() or not any(
        (project / ".mlflow-spool").iterdir()
    ), "staging folders are removed after a successful flush"


def test_stages_of_one_pipeline_run_share_the_tag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    pipeline_run = f"test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(PIPELINE_RUN_ENV, pipeline_run)
    for stage in ("ingest", "mine_rules"):
        with stage_run(stage, "icews14", project_dir=tmp_path, tracking_uri=uri) as run:
            run.log_metrics({"n": 1.0})
    monkeypatch.setenv(PIPELINE_RUN_ENV, "another-execution")
    with stage_run("ingest", "icews14", project_dir=tmp_path, tracking_uri=uri):
        pass

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("rulerag/icews14")
    found = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`rulerag.pipeline_run` = '{pipeline_run}'",
    )
    by_name = {r.info.run_name: r for r in found}
    assert sorted(by_name) == ["ingest", "mine_rules", pipeline_run]  # and their parent
    parent = by_name.pop(pipeline_run)
    assert parent.data.tags["rulerag.run_kind"] == "pipeline"
    assert {r.data.tags["mlflow.parentRunId"] for r in by_name.values()} == {parent.info.run_id}


def test_default_store_is_project_sqlite_and_git_commit_is_tagged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient

    project = tmp_path / "project"
    project.mkdir()
    git = ["git", "-c", "user.email=t@rulerag", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], cwd=project, check=True)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True, check=True
    ).stdout.strip()
    (project / "out.txt").write_text("output")
    monkeypatch.chdir(tmp_path)  # artifacts must not land in ./mlruns of the working directory

    with stage_run("ingest", "icews14", project_dir=project) as run:
        run.log_artifact(project / "out.txt")

    assert (project / "mlflow.db").is_file()
    assert not (tmp_path / "mlruns").exists()
    logged = MlflowClient(tracking_uri=tracking.default_tracking_uri(project)).get_run(run.run_id)
    assert logged.data.tags["mlflow.source.git.commit"] == head
    artifact_dir = tracking.local_artifact_path(logged.info.artifact_uri, project)
    assert artifact_dir.is_relative_to(project / "mlartifacts")
    assert (artifact_dir / "out.txt").read_text() == "output"


def test_replay_cli_sends_spooled_runs(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    for dataset in ("wiki", "yago"):
        with stage_run("ingest", dataset, project_dir=tmp_path, tracking_uri=dead) as run:
            run.log_metrics({"recall@10": 0.3})
            run.log_dict({"d": dataset}, "d.json")
        assert run.spooled

    uri = f"sqlite:///{tmp_path / 'replayed.db'}"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "rulerag.tracking", "replay", "--project-dir", str(tmp_path)]
        + ["--tracking-uri", uri],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "replayed 2 run(s)" in done.stdout and "0 left" in done.stdout
    assert not any(p for p in (tmp_path / ".mlflow-spool").iterdir())
    client = MlflowClient(tracking_uri=uri)
    for dataset in ("wiki", "yago"):
        experiment = client.get_experiment_by_name(f"rulerag/{dataset}")
        (logged,) = client.search_runs([experiment.experiment_id])
        assert logged.data.metrics == {"recall_at_10": 0.3}
        stored = artifact_repository(logged.info.artifact_uri, uri, tmp_path)
        assert [a.path for a in stored.list_artifacts()] == ["d.json"]


def _save_marker_model(path: Path) -> None:
    """A stand-in MLflow model folder (the registry only needs the folder)."""
    path.mkdir(parents=True)
    (path / "MLmodel").write_text("flavors: {}\nmarker: moved\n", encoding="utf-8")


def test_a_moved_project_serves_its_artifacts_and_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs with artifacts and a registered model are logged to the project's own store (no
    server, as under `dvc repro`); the project folder then moves. The server that `make
    mlflow-ui` starts in the new place lists and serves the run's artifacts (MLflow's client
    and the UI's own endpoint) and the model version by its `models:/` URI; nothing is read
    from, or written to, the old place."""
    import mlflow.artifacts
    from mlflow import MlflowClient

    old, new = tmp_path / "old", tmp_path / "new"
    (old / "data").mkdir(parents=True)
    (old / "data" / "table.json").write_text('{"em": 0.41}', encoding="utf-8")
    name = registered_name("moved", "generator", "rgft")
    with stage_run("train_generator", "moved", project_dir=old) as run:
        run.log_metrics({"em": 0.41})
        run.log_artifact(old / "data" / "table.json", artifact_path="eval")
        run.log_model(_save_marker_model, "model", registered_name=name)
    assert not run.spooled and (old / "mlflow.db").is_file()
    shutil.move(old, new)

    with mlflow_ui(new) as url:
        client = MlflowClient(tracking_uri=url)
        assert client.get_run(run.run_id).data.metrics == {"em": 0.41}
        listed = [a.path for a in client.list_artifacts(run.run_id)]
        assert listed == ["eval"]  # the model is the run's logged model, not a run artifact
        down = tmp_path / "down"
        down.mkdir()
        local = client.download_artifacts(run.run_id, "eval/table.json", str(down))
        assert json.loads(Path(local).read_text(encoding="utf-8")) == {"em": 0.41}
        # what the browser asks for when a run's artifact is opened in the UI
        query = f"path=eval/table.json&run_uuid={run.run_id}"
        with urllib.request.urlopen(f"{url}/get-artifact?{query}", timeout=30) as answer:
            assert json.loads(answer.read()) == {"em": 0.41}
        # how a user loads a registered model: `models:/` URIs through the server
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        model = mlflow.artifacts.download_artifacts(
            f"models:/{name}/1", dst_path=str(tmp_path / "downloaded")
        )
        assert "marker: moved" in (Path(model) / "MLmodel").read_text(encoding="utf-8")
    assert not old.exists()
