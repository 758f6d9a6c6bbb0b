"""A pipeline run as MLflow 3 shows it, against throw-away SQLite stores: one parent run per
pipeline run and dataset with the stage runs nested under it and the report's summary on it
(also when two stages create it at once), the trained models as logged models of their runs
(MLmodel naming run and model), registered, the alias `champion` moved by its rule, and the
benchmark splits as run inputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rulerag.layout import DataLayout
from rulerag.tracking import (
    PIPELINE_RUN_ENV,
    TAG_PARENT_RUN,
    TAG_PIPELINE_RUN,
    TAG_RUN_KIND,
    default_tracking_uri,
    local_artifact_path,
    replay_spool,
    stage_run,
)
from rulerag.tracking.models import CHAMPION_ALIAS, moves_champion
from rulerag.tracking.parent import (
    SUMMARY_ARTIFACT_PATH,
    ensure_parent,
    parent_name,
    settle_parent,
)
from rulerag.tracking.record import RunRecord

pytestmark = pytest.mark.usefixtures("clean_tracking_env")


def _client(project: Path):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=default_tracking_uri(project))


def _runs(project: Path, dataset: str) -> list:
    client = _client(project)
    experiment = client.get_experiment_by_name(f"rulerag/{dataset}")
    return client.search_runs([experiment.experiment_id], max_results=100)


def test_a_pipeline_run_is_one_parent_row_with_its_stages_nested_and_its_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three stages of one pipeline run: one parent per dataset experiment, named after the
    pipeline run, with params.yaml's params, the report's metrics and files, FAILED while a
    stage instance's latest run failed and FINISHED once its retry succeeded."""
    monkeypatch.setenv(PIPELINE_RUN_ENV, "make-20261127T061400-ab12cd34")
    uri = default_tracking_uri(tmp_path)
    report = tmp_path / "report"  # outside data/<dataset>/: the project's report/
    report.mkdir()
    (report / "results.md").write_text("| row | EM |\n", encoding="utf-8")
    (report / "results.png").write_bytes(b"\x89PNG fake")
    pipeline_params = {"datasets": ["toy"], "generation": {"num_documents": 5}}
    with stage_run("ingest", "toy", project_dir=tmp_path, tracking_uri=uri) as run:
        run.log_pipeline_params(pipeline_params)
    with pytest.raises(RuntimeError), stage_run("report", "toy", project_dir=tmp_path) as run:
        run.log_pipeline_params(pipeline_params)
        raise RuntimeError("first try fails")
    (parent,) = [r for r in _runs(tmp_path, "toy") if r.data.tags.get(TAG_RUN_KIND)]
    assert parent.info.status == "FAILED"
    with stage_run("report", "toy", project_dir=tmp_path) as run:
        run.log_pipeline_params(pipeline_params)
        run.log_metrics({"rulerag_ft.em": 0.4})
        run.log_summary({"rulerag_ft.em": 0.4, "standard_rag.em": 0.2}, [
            report / "results.md", report / "results.png"
        ])  # fmt: skip
    with stage_run("ingest", "other", project_dir=tmp_path) as run:
        run.log_pipeline_params(pipeline_params)

    runs = _runs(tmp_path, "toy")
    parents = [r for r in runs if r.data.tags.get(TAG_RUN_KIND) == "pipeline"]
    (parent,) = parents
    children = [r for r in runs if r not in parents]
    assert len(children) == 3
    assert parent.info.run_name == "11-27 06:14:00 make"  # what the table's column shows
    assert {c.data.tags[TAG_PARENT_RUN] for c in children} == {parent.info.run_id}
    assert parent.info.status == "FINISHED"  # the retry is the report's latest run
    assert parent.info.end_time == max(c.info.end_time for c in children)
    assert parent.data.params == {"datasets": '["toy"]', "generation.num_documents": "5"}
    assert parent.data.metrics == {"rulerag_ft.em": 0.4, "standard_rag.em": 0.2}
    assert "rulerag.stage" not in parent.data.tags  # not a stage run for the Airflow links
    assert "make-20261127T061400-ab12cd34" in parent.data.tags["mlflow.note.content"]
    folder = local_artifact_path(parent.info.artifact_uri, tmp_path) / SUMMARY_ARTIFACT_PATH
    assert sorted(p.name for p in folder.iterdir()) == ["results.md", "results.png"]
    # the other dataset's experiment has a parent of its own (MLflow nests within one)
    other = _runs(tmp_path, "other")
    assert sorted(r.data.tags.get(TAG_RUN_KIND, "stage") for r in other) == ["pipeline", "stage"]


@pytest.mark.parametrize(
    ("pipeline", "name"),
    [
        ("make-20261127T061400-ab12cd34", "11-27 06:14:00 make"),
        ("manual__2026-11-27T06:14:00.123456+00:00", "11-27 06:14:00 manual"),
        ("scheduled__2026-11-27T00:00:00+00:00", "11-27 00:00:00 scheduled"),
        ("dvc-4242-1764223200", "11-27 06:00:00 dvc"),
        ("test-full-pipeline", "test-full-pipeline"),
    ],
)
def test_parent_names_start_with_when_the_pipeline_run_started(pipeline: str, name: str) -> None:
    assert parent_name(pipeline) == name


def test_a_stage_run_by_hand_gets_no_parent(tmp_path: Path) -> None:
    with stage_run("ingest", "toy", project_dir=tmp_path):
        pass
    (run,) = _runs(tmp_path, "toy")
    assert run.data.tags[TAG_PIPELINE_RUN].startswith("standalone-")
    assert TAG_PARENT_RUN not in run.data.tags


def test_parents_created_at_once_settle_on_the_earliest(tmp_path: Path) -> None:
    """Two stages of one pipeline run find no parent and each create one (parallel Airflow
    tasks): whoever settles next keeps the earliest, moves the stage runs of the other to it
    and deletes the other, so the last stage to finish leaves one parent."""
    from rulerag.tracking.store import ensure_experiment

    client = _client(tmp_path)
    uri = default_tracking_uri(tmp_path)
    experiment_id = ensure_experiment(client, "rulerag/race", uri, tmp_path)
    records = []
    for start, stage in ((1000, "a"), (2000, "b")):
        record = RunRecord("rulerag/race", stage, stage, "race", start_time=start)
        record.tags.update({TAG_PIPELINE_RUN: "race-1", "rulerag.stage": stage})
        records.append(record)
    # both look before either creates: neither sees the other's parent
    first = client.create_run(experiment_id, start_time=1000, tags={
        TAG_PIPELINE_RUN: "race-1", TAG_RUN_KIND: "pipeline"})  # fmt: skip
    second = client.create_run(experiment_id, start_time=2000, tags={
        TAG_PIPELINE_RUN: "race-1", TAG_RUN_KIND: "pipeline"})  # fmt: skip
    for record, parent in zip(records, (first, second), strict=True):
        child = client.create_run(
            experiment_id,
            start_time=record.start_time,
            tags={**record.tags, TAG_PARENT_RUN: parent.info.run_id},
        )
        client.set_terminated(child.info.run_id, end_time=record.start_time + 10)
    settled = settle_parent(client, experiment_id, records[1], None, lambda *a: None)
    assert settled == first.info.run_id
    assert client.get_run(second.info.run_id).info.lifecycle_stage == "deleted"
    runs = client.search_runs([experiment_id])
    stages = [r for r in runs if TAG_RUN_KIND not in r.data.tags]
    assert {r.data.tags[TAG_PARENT_RUN] for r in stages} == {first.info.run_id}
    assert ensure_parent(client, experiment_id, records[0]) == first.info.run_id  # idempotent


@pytest.mark.parametrize(
    ("new", "current", "higher", "moves"),
    [
        (0.5, None, True, True),  # no champion yet
        (0.6, 0.5, True, True),
        (0.5, 0.5, True, False),  # a tie keeps the older version
        (0.4, 0.5, True, False),
        (0.4, 0.5, False, True),  # a loss: lower is better
        (None, 0.5, True, False),  # without the metric it never takes it
        (0.1, math.nan, True, True),  # from a champion without the metric
        (None, None, True, True),  # the first version takes it anyway
    ],
)
def test_the_champion_rule(new, current, higher, moves) -> None:
    assert moves_champion(new, current, higher) is moves


def _save_model(path: Path) -> None:
    """A real (tiny) MLflow model: a pyfunc from code with no weights."""
    import mlflow.pyfunc

    code = path.parent / "echo_model.py"
    code.write_text(
        "import mlflow.pyfunc, mlflow.models\n"
        "class Echo(mlflow.pyfunc.PythonModel):\n"
        "    def predict(self, context, model_input, params=None):\n"
        "        return list(model_input)\n"
        "mlflow.models.set_model(Echo())\n",
        encoding="utf-8",
    )
    mlflow.pyfunc.save_model(str(path), python_model=str(code), pip_requirements=["mlflow"])


def test_models_are_logged_models_of_their_run_and_champion_follows_the_best(
    tmp_path: Path,
) -> None:
    """Three trainings: each model is a logged model of its run (not a run artifact), its
    MLmodel names run and model, its last metrics are linked to it, each a registered
    version of one model; `champion` moves to the second (lower dev loss), not the third."""
    import mlflow.pyfunc

    client = _client(tmp_path)
    name = "rulerag-toy-generator-rgft"
    runs = []
    for loss in (0.5, 0.25, 0.3):
        with stage_run("train_generator", "toy", project_dir=tmp_path) as run:
            run.log_metrics({"dev_loss": 0.9}, step=1)
            run.log_metrics({"dev_loss": loss}, step=2)
            run.log_model(
                _save_model,
                "model",
                registered_name=name,
                champion_metric="dev_loss",
                higher_is_better=False,
            )
        runs.append(run.run_id)
    experiment = client.get_experiment_by_name("rulerag/toy")
    models = client.search_logged_models([experiment.experiment_id])
    assert sorted(m.source_run_id for m in models) == sorted(runs)
    assert {m.name for m in models} == {name} and {m.status.name for m in models} == {"READY"}
    logged = next(m for m in models if m.source_run_id == runs[1])
    assert [(m.key, m.value, m.step) for m in logged.metrics] == [("dev_loss", 0.25, 2)]
    history = client.get_metric_history(runs[1], "dev_loss")
    assert [(m.step, m.value) for m in history] == [(1, 0.9), (2, 0.25)]  # no extra point
    run_files = local_artifact_path(client.get_run(runs[1]).info.artifact_uri, tmp_path)
    assert not run_files.exists()  # one copy of the model: the logged model's
    champion = client.get_model_version_by_alias(name, CHAMPION_ALIAS)
    assert (int(champion.version), champion.run_id) == (2, runs[1])
    assert champion.source == f"models:/{logged.model_id}"
    location = client.get_model_version_download_uri(name, champion.version)
    assert location == logged.artifact_location
    folder = local_artifact_path(location, tmp_path)
    mlmodel = (folder / "MLmodel").read_text(encoding="utf-8")
    assert f"run_id: {runs[1]}" in mlmodel and f"model_id: {logged.model_id}" in mlmodel
    assert mlflow.pyfunc.load_model(str(folder)).predict(["a", "b"]) == ["a", "b"]
    (run_output,) = client.get_run(runs[1]).outputs.model_outputs
    assert run_output.model_id == logged.model_id


def test_benchmark_splits_are_run_inputs_also_after_a_replay(tmp_path: Path) -> None:
    """A split logged as a run input: named, DVC's MD5 as digest, its row count, its context;
    a spooled run keeps it until the replay."""
    import hashlib

    split = DataLayout.of(tmp_path / "data", "toy").queries("test")
    split.parent.mkdir(parents=True)
    split.write_text('{"q": 1}\n{"q": 2}\n\n', encoding="utf-8")
    with stage_run(
        "generate", "toy", project_dir=tmp_path, tracking_uri="http://127.0.0.1:9"
    ) as run:
        run.log_input(split, "test")
        with pytest.raises(FileNotFoundError, match="missing.jsonl"):
            run.log_input(tmp_path / "missing.jsonl", "test")
        with pytest.raises(ValueError, match="context"):
            run.log_input(split, "a b")
    assert run.spooled
    assert replay_spool(tmp_path, default_tracking_uri(tmp_path)) == 1
    (logged,) = _runs(tmp_path, "toy")
    (item,) = logged.inputs.dataset_inputs
    assert item.dataset.name == "test"
    assert item.dataset.digest == hashlib.md5(split.read_bytes()).hexdigest()
    assert json.loads(item.dataset.profile) == {"num_rows": 2}
    assert json.loads(item.dataset.source)["uri"].endswith("data/toy/benchmark/test.jsonl")
    assert [(t.key, t.value) for t in item.tags] == [("mlflow.data.context", "test")]


def test_a_model_spooled_by_the_previous_version_is_logged_on_replay(tmp_path: Path) -> None:
    """Runs spooled before models moved out of the run's artifacts keep them in
    `artifacts/<path>`: the replay finds them there."""
    folder = tmp_path / ".mlflow-spool" / "20261126T000000000000Z-train_generator-toy-0a1b2c3d"
    (folder / "artifacts").mkdir(parents=True)
    _save_model(folder / "artifacts" / "model")  # outside data/<dataset>/
    record = {
        "format": 1,
        "experiment": "rulerag/toy",
        "run_name": "train_generator@toy",
        "stage": "train_generator",
        "dataset": "toy",
        "start_time": 1_764_115_200_000,
        "end_time": 1_764_115_260_000,
        "status": "FINISHED",
        "tags": {},
        "params": {},
        "metrics": [],
        "models": [{"artifact_path": "model", "name": "rulerag-toy-generator-old"}],
        "partial_run_ids": [],
    }
    (folder / "run.json").write_text(json.dumps(record), encoding="utf-8")
    assert replay_spool(tmp_path, default_tracking_uri(tmp_path)) == 1
    client = _client(tmp_path)
    (version,) = client.search_model_versions("name='rulerag-toy-generator-old'")
    (logged,) = client.search_logged_models([client.get_run(version.run_id).info.experiment_id])
    assert version.source == f"models:/{logged.model_id}"
