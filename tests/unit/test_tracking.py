"""rulerag.tracking without a tracking server: names, params, the pipeline-run tag, the spool
when the store is down, replay into a throw-away SQLite store, FAILED runs, artifact locations
that survive a move of the project."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rulerag import tracking
from rulerag.tracking import (
    PIPELINE_RUN_ENV,
    StageRun,
    artifact_repository,
    default_tracking_uri,
    flatten_params,
    identity,
    pipeline_run_id,
    replay_spool,
    runs_dvc,
    sanitize_name,
    stage_run,
    store,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("clean_tracking_env")


@pytest.fixture(scope="module")
def sqlite_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite store for the module: creating one runs MLflow's migrations (~1.5 s)."""
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


@pytest.fixture
def dead_uri() -> Iterator[str]:
    """An HTTP tracking URI on a port nothing listens on (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield f"http://127.0.0.1:{port}"


def spooled_folders(project: Path) -> list[Path]:
    root = project / ".mlflow-spool"
    return sorted(p for p in root.iterdir() if not p.name.startswith(".")) if root.exists() else []


# -- names and params --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("recall@10", "recall_at_10"),
        ("em", "em"),
        ("token_f1", "token_f1"),
        ("hits@1 (filtered)", "hits_at_1__filtered_"),
        ("splits.train", "splits.train"),
        ("eval/recall@5", "eval/recall_at_5"),
        ("a:b", "a_b"),
        ("/lead//slash/", "lead/slash"),
        ("../up", "__/up"),
        ("", "_"),
        ("é", "_"),
        ("x" * 300, "x" * 250),
    ],
)
def test_sanitize_name(name: str, expected: str) -> None:
    assert sanitize_name(name) == expected


def test_flatten_params_dotted_stringified_truncated() -> None:
    params = {
        "ingest": {"duplicates": "drop", "source": {}, "custom": {"my kg": {"path": "/d"}}},
        "datasets": ["icews14"],
        "retrieval": {"k": 10, "lr": 1e-5, "rules": True, "model": None},
        "long": "v" * 7000,
    }
    flat = flatten_params(params)
    assert flat == {
        "ingest.duplicates": "drop",
        "ingest.source": "{}",
        "ingest.custom.my_kg.path": "/d",
        "datasets": '["icews14"]',
        "retrieval.k": "10",
        "retrieval.lr": "1e-05",
        "retrieval.rules": "true",
        "retrieval.model": "null",
        "long": "v" * 5997 + "...",
    }
    assert len(flat["long"]) == tracking.MAX_PARAM_VALUE_LENGTH


def test_limits_match_installed_mlflow() -> None:
    from mlflow.utils import validation

    assert tracking.MAX_PARAM_VALUE_LENGTH == validation.MAX_PARAM_VAL_LENGTH
    assert tracking.MAX_TAG_VALUE_LENGTH == validation.MAX_TAG_VAL_LENGTH
    assert tracking.MAX_KEY_LENGTH == validation.MAX_ENTITY_KEY_LENGTH
    assert tracking.PARAMS_TAGS_PER_BATCH == validation.MAX_PARAMS_TAGS_PER_BATCH
    assert tracking.METRICS_PER_BATCH == validation.MAX_METRICS_PER_BATCH
    for name in ("recall_at_10", "eval/recall_at_5", "__/up", "a_b"):
        assert validation.validate_param_and_metric_name(name)
        assert not validation.path_not_unique(name)


def test_default_tracking_uri_is_absolute_sqlite(tmp_path: Path) -> None:
    assert default_tracking_uri(tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert tracking.resolve_tracking_uri(tmp_path, "http://x:5000") == "http://x:5000"


def test_resolve_tracking_uri_env_overrides_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert tracking.resolve_tracking_uri(tmp_path) == "http://mlflow:5000"


# -- the pipeline-run tag ----------------------------------------------------------------------


def test_pipeline_run_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PIPELINE_RUN_ENV, "manual__2026-11-22T00:00:00")
    assert pipeline_run_id() == "manual__2026-11-22T00:00:00"


def test_pipeline_run_standalone_without_env_or_dvc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity, "_dvc_ancestor_run_id", lambda: None)
    first, second = pipeline_run_id(), pipeline_run_id()
    assert first.startswith("standalone-") and len(first) == len("standalone-") + 32
    assert first != second


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        (["dvc", "repro"], True),
        (["/work/main/.venv/bin/dvc", "exp", "run"], True),
        (["/usr/bin/python3", "/work/main/.venv/bin/dvc", "repro"], True),
        (["python", "-m", "dvc", "repro"], True),
        (["python3.11", "-u", "-X", "dev", "-mdvc", "repro"], True),
        (["python", "-m", "pipeline_steps.ingest", "--dataset", "dvc"], False),
        (["python", "-c", "import dvc"], False),
        (["/bin/sh", "-c", "dvc repro"], False),
        (["bash"], False),
        ([], False),
    ],
)
def test_runs_dvc(cmdline: list[str], expected: bool) -> None:
    assert runs_dvc(cmdline) is expected


def test_pipeline_run_shared_by_children_of_one_dvc_process(tmp_path: Path) -> None:
    """Two stage processes started (through a shell) by one `dvc` process get the same id."""
    child = tmp_path / "stage.py"
    child.write_text("from rulerag.tracking import pipeline_run_id\nprint(pipeline_run_id())\n")
    fake_dvc = tmp_path / "bin" / "dvc"
    fake_dvc.parent.mkdir()
    fake_dvc.write_text(
        f"#!{sys.executable}\n"
        "import os, subprocess, sys\n"
        "for _ in range(2):\n"
        f"    subprocess.run('{sys.executable} {child}', shell=True, check=True)\n"
        "print('dvc-pid', os.getpid())\n"
    )
    fake_dvc.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != PIPELINE_RUN_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [str(fake_dvc)], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    first, second, pid_line = done.stdout.split("\n")[:3]
    assert first == second
    assert first.startswith(f"dvc-{pid_line.split()[1]}-")


# -- the spool ---------------------------------------------------------------------------------


def test_unreachable_server_spools_fast(
    tmp_path: Path, dead_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    import mlflow  # noqa: F401  (imported here so the timing below is the tracking path only)

    artifact = tmp_path / "stats.json"
    artifact.write_text('{"facts": 3}')
    models = tmp_path / "model"  # outside data/<dataset>/
    (models / "sub").mkdir(parents=True)
    (models / "sub" / "weights.bin").write_bytes(b"\0\1")
    caplog.set_level(logging.WARNING, logger="rulerag.tracking")

    started = time.monotonic()
    with stage_run(
        "ingest",
        "icews14",
        project_dir=tmp_path,
        params={"ingest": {"duplicates": "drop"}},
        tracking_uri=dead_uri,
    ) as run:
        run.log_metrics({"recall@10": 0.5, "em": 1}, step=2)
        run.log_artifact(artifact)
        artifact.unlink()  # snapshotted when logged: deleting it now loses nothing
        run.log_artifact(models, artifact_path="models")
        run.log_dict({"rows": [1, 2]}, "sample/rows.json")
        run.set_tags({"note": "outage"})
        outputs_written = True
    elapsed = time.monotonic() - started

    assert outputs_written and run.spooled and run.run_id is None
    assert elapsed < 5, f"an unreachable store cost the stage {elapsed:.1f} s"
    ours = [r for r in caplog.records if r.name.startswith("rulerag.tracking")]
    assert [r.levelname for r in ours] == ["WARNING"], "warn exactly once"
    assert "replay" in ours[0].getMessage()
    for key in tracking.FAIL_FAST_ENV:
        assert key not in os.environ, "env defaults are only set during the tracking calls"

    (folder,) = spooled_folders(tmp_path)
    assert folder == run.spool_path
    assert folder.name.split("-")[1:3] == ["ingest", "icews14"]
    record = json.loads((folder / "run.json").read_text())
    assert record["experiment"] == "rulerag/icews14"
    assert record["run_name"] == "ingest"
    assert record["status"] == "FINISHED"
    assert record["params"] == {"ingest.duplicates": "drop"}
    assert {(m["key"], m["value"], m["step"]) for m in record["metrics"]} == {
        ("recall_at_10", 0.5, 2),
        ("em", 1.0, 2),
    }
    assert record["tags"]["rulerag.stage_instance"] == "ingest@icews14"
    assert record["tags"]["rulerag.pipeline_run"].startswith(("standalone-", "dvc-"))
    assert record["tags"]["note"] == "outage"
    assert "Connection refused" in record["error"] or "Max retries" in record["error"]
    files = folder / "artifacts"
    assert json.loads((files / "stats.json").read_text()) == {"facts": 3}
    weights = files / "models" / "model" / "sub" / "weights.bin"  # outside data/<dataset>/
    assert weights.read_bytes() == b"\0\1"
    assert json.loads((files / "sample" / "rows.json").read_text()) == {"rows": [1, 2]}
    assert not [p for p in (tmp_path / ".mlflow-spool").iterdir() if p.name.startswith(".")]


def test_fail_fast_env_respects_user_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    with store.fail_fast_http():
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "30"
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "30"
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ


def test_exception_in_block_spools_failed_run_and_propagates(tmp_path: Path, dead_uri: str) -> None:
    with (
        pytest.raises(ValueError, match="boom"),
        stage_run("mine", "yago", project_dir=tmp_path, tracking_uri=dead_uri) as run,
    ):
        run.log_metrics({"rules": 3})
        raise ValueError("boom")
    assert run.spooled
    record = json.loads((run.spool_path / "run.json").read_text())
    assert record["status"] == "FAILED"
    assert record["tags"]["rulerag.error"] == "ValueError: boom"


def test_replay_spool_into_sqlite(tmp_path: Path, dead_uri: str, sqlite_uri: str) -> None:
    from mlflow import MlflowClient

    with stage_run("ingest", "replayds", project_dir=tmp_path, tracking_uri=dead_uri) as run:
        run.log_params({"ingest": {"duplicates": "keep"}})
        run.log_metrics({"recall@10": 0.25}, step=1)
        run.log_dict({"a": 1}, "a.json")
    assert run.spooled
    spooled_start = json.loads((run.spool_path / "run.json").read_text())["start_time"]

    assert replay_spool(tmp_path, tracking_uri=sqlite_uri) == 1
    assert spooled_folders(tmp_path) == []
    assert replay_spool(tmp_path, tracking_uri=sqlite_uri) == 0, "nothing is sent twice"

    client = MlflowClient(tracking_uri=sqlite_uri)
    experiment = client.get_experiment_by_name("rulerag/replayds")
    (logged,) = client.search_runs([experiment.experiment_id])
    assert logged.info.run_name == "ingest"
    assert logged.info.status == "FINISHED"
    assert logged.info.start_time == spooled_start
    assert logged.data.params == {"ingest.duplicates": "keep"}
    assert logged.data.metrics == {"recall_at_10": 0.25}
    assert logged.data.tags["rulerag.replayed_from"] == run.spool_path.name
    assert logged.info.artifact_uri.startswith("mlflow-artifacts:/rulerag/replayds/")
    stored = artifact_repository(logged.info.artifact_uri, sqlite_uri, tmp_path)
    assert [a.path for a in stored.list_artifacts()] == ["a.json"]


def test_replay_keeps_spool_while_store_is_down(tmp_path: Path, dead_uri: str) -> None:
    with stage_run("ingest", "downds", project_dir=tmp_path, tracking_uri=dead_uri) as run:
        run.log_metrics({"em": 0.1})
    assert replay_spool(tmp_path, tracking_uri=dead_uri) == 0
    assert spooled_folders(tmp_path) == [run.spool_path]


def test_failure_midway_spools_whole_run_and_drops_the_partial_one(
    tmp_path: Path, sqlite_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store fails after the run was created (artifact upload): the half-logged run is
    deleted, the spool keeps all of it, and a replay logs it exactly once."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

    def broken_upload(*args: object, **kwargs: object) -> None:
        raise MlflowException("artifact store is full")

    with monkeypatch.context() as patch:
        patch.setattr(LocalArtifactRepository, "log_artifacts", broken_upload)
        with stage_run("ingest", "midway", project_dir=tmp_path, tracking_uri=sqlite_uri) as run:
            run.log_metrics({"em": 0.5})
            run.log_dict({"a": 1}, "a.json")
    assert run.spooled
    assert json.loads((run.spool_path / "run.json").read_text())["partial_run_ids"] == []

    client = MlflowClient(tracking_uri=sqlite_uri)
    experiment_id = client.get_experiment_by_name("rulerag/midway").experiment_id
    assert client.search_runs([experiment_id]) == [], "the partial run is not left visible"
    assert replay_spool(tmp_path, tracking_uri=sqlite_uri) == 1
    (logged,) = client.search_runs([experiment_id])
    assert logged.data.metrics == {"em": 0.5}
    stored = artifact_repository(logged.info.artifact_uri, sqlite_uri, tmp_path)
    assert [a.path for a in stored.list_artifacts()] == ["a.json"]


def _ghost_of_a_failed_flush(
    project: Path, uri: str, dataset: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[StageRun, str]:
    """A run whose flush failed after the run was created and whose clean-up failed too (the
    store went away in between): spooled, with its half-logged copy left RUNNING in the
    store. Returns the run and its experiment's id."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

    def broken(*args: object, **kwargs: object) -> None:
        raise MlflowException("the store went away")

    with monkeypatch.context() as patch:
        patch.setattr(LocalArtifactRepository, "log_artifacts", broken)
        patch.setattr(MlflowClient, "delete_run", broken)
        with stage_run("ingest", dataset, project_dir=project, tracking_uri=uri) as run:
            run.log_metrics({"em": 0.5})
            run.log_dict({"a": 1}, "a.json")
    assert run.spooled
    assert len(json.loads((run.spool_path / "run.json").read_text())["partial_run_ids"]) == 1
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.get_experiment_by_name(f"rulerag/{dataset}").experiment_id
    assert [r.info.status for r in client.search_runs([experiment_id])] == ["RUNNING"]
    return run, experiment_id


def test_a_replay_through_another_uri_of_the_same_store_leaves_no_ghost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The half-logged copy was deleted only when the replay's URI was spelled as the stage's:
    through another spelling of the same store (here a symlinked folder; 127.0.0.1 and
    localhost for a server) it stayed RUNNING beside the replayed run."""
    from mlflow import MlflowClient

    store = tmp_path / "store"
    store.mkdir()
    (tmp_path / "alias").symlink_to(store, target_is_directory=True)
    written, other = (f"sqlite:///{folder / 'mlflow.db'}" for folder in (store, tmp_path / "alias"))
    _run, experiment_id = _ghost_of_a_failed_flush(tmp_path, written, "ghostds", monkeypatch)

    assert replay_spool(tmp_path, tracking_uri=other) == 1
    client = MlflowClient(tracking_uri=written)
    (logged,) = client.search_runs([experiment_id])
    assert logged.info.status == "FINISHED" and logged.data.metrics == {"em": 0.5}


def test_a_replay_deletes_no_other_run_of_its_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spooled `partial_run_ids` naming a run that is not a copy of the spooled one (another
    name or start time, edited by hand or from another store) deletes nothing; the half-logged
    copy itself goes all the same, found by its stage instance, name and start time (as a copy
    created after an abandoned send spooled the run is, `rulerag.deadline`)."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run, experiment_id = _ghost_of_a_failed_flush(tmp_path, uri, "keepds", monkeypatch)
    client = MlflowClient(tracking_uri=uri)
    other = client.create_run(experiment_id, run_name="someone_else").info.run_id
    data = json.loads((run.spool_path / "run.json").read_text())
    data["partial_run_ids"] = [other, "0" * 32]
    (run.spool_path / "run.json").write_text(json.dumps(data))

    assert replay_spool(tmp_path, tracking_uri=uri) == 1
    runs = client.search_runs([experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["ingest", "someone_else"]
    (replayed,) = [r for r in runs if r.info.run_name == "ingest"]
    assert replayed.info.status == "FINISHED"


def test_exception_in_block_records_failed_run(tmp_path: Path, sqlite_uri: str) -> None:
    from mlflow import MlflowClient

    with (
        pytest.raises(RuntimeError, match="stage broke"),
        stage_run("ingest", "failds", project_dir=tmp_path, tracking_uri=sqlite_uri) as run,
    ):
        run.log_metrics({"facts": 10})
        raise RuntimeError("stage broke")
    assert not run.spooled and run.run_id
    logged = MlflowClient(tracking_uri=sqlite_uri).get_run(run.run_id)
    assert logged.info.status == "FAILED"
    assert logged.data.metrics == {"facts": 10.0}
    assert logged.data.tags["rulerag.error"] == "RuntimeError: stage broke"
    assert not (tmp_path / ".mlflow-spool").exists() or spooled_folders(tmp_path) == []


def test_counts_and_seeds_are_logged_as_params_not_metrics(tmp_path: Path, sqlite_uri: str) -> None:
    """MLflow's compare and chart views start on the alphabetically first metric, `queries` on
    every retrieval run (issue 43); a seed is no measurement either."""
    from mlflow import MlflowClient

    with stage_run("retrieve", "countds", project_dir=tmp_path, tracking_uri=sqlite_uri) as run:
        run.log_metrics({"queries": 100.0, "recall@10": 0.5, "seed": 42, "rulerag_icl.queries": 7})
    logged = MlflowClient(tracking_uri=sqlite_uri).get_run(run.run_id)
    assert logged.data.metrics == {"recall_at_10": 0.5}
    assert {k: logged.data.params[k] for k in ("queries", "seed", "rulerag_icl.queries")} == {
        "queries": "100", "seed": "42", "rulerag_icl.queries": "7",
    }  # fmt: skip


def test_bad_metric_and_closed_run_raise_at_the_call(tmp_path: Path, dead_uri: str) -> None:
    with stage_run("ingest", "x", project_dir=tmp_path, tracking_uri=dead_uri) as run:
        with pytest.raises(TypeError, match="not a number"):
            run.log_metrics({"em": "high"})
        with pytest.raises(FileNotFoundError):
            run.log_artifact(tmp_path / "missing.json")
        with pytest.raises(ValueError, match="inside the run"):
            run.log_dict({}, "../escape.json")
    with pytest.raises(RuntimeError, match="closed"):
        run.log_metrics({"em": 1.0})


def test_runs_are_named_after_their_stage_instance_in_a_model_experiment(
    tmp_path: Path, sqlite_uri: str
) -> None:
    """Nine `generate` runs of one dataset are told apart by name (their item first, so the
    runs table's cut column still shows it); experiments open on their
    runs (MLflow 3's kind tag), also one created before the tag was set."""
    from mlflow import MlflowClient

    from rulerag.tracking import EXPERIMENT_KIND, TAG_EXPERIMENT_KIND, TAG_STAGE_INSTANCE

    client = MlflowClient(tracking_uri=sqlite_uri)
    older = client.create_experiment("rulerag/kindds")  # as an earlier version made it
    assert TAG_EXPERIMENT_KIND not in client.get_experiment(older).tags
    for config in ("rulerag_ft", "standard_rag"):
        with stage_run("generate", "kindds", project_dir=tmp_path, tracking_uri=sqlite_uri) as run:
            run.set_tags({TAG_STAGE_INSTANCE: f"generate@kindds-{config}"})
    with stage_run("ingest", "otherds", project_dir=tmp_path, tracking_uri=sqlite_uri):
        pass
    names = sorted(r.info.run_name for r in client.search_runs([older]))
    assert names == ["rulerag_ft (generate)", "standard_rag (generate)"]  # item first
    for name in ("rulerag/kindds", "rulerag/otherds"):
        tags = client.get_experiment_by_name(name).tags
        assert tags[TAG_EXPERIMENT_KIND] == EXPERIMENT_KIND
    (other,) = client.search_runs([client.get_experiment_by_name("rulerag/otherds").experiment_id])
    assert other.info.run_name == "ingest"  # no item: the stage (the experiment names the dataset)


def test_a_moved_project_finds_its_artifacts(tmp_path: Path) -> None:
    """The store names no folder of the project (proxied `mlflow-artifacts:` locations), so
    after the project moves (a new clone path, a container mount) its artifacts are found from
    the new place, new runs log there, and nothing rewrites MLflow's tables to get there."""
    from mlflow import MlflowClient

    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    note = old / "note.txt"
    note.write_text("hello", encoding="utf-8")
    uri = default_tracking_uri(old)
    with stage_run("ingest", "moveds", project_dir=old, tracking_uri=uri) as run:
        run.log_artifact(note)
    assert not run.spooled
    shutil.move(old, new)

    new_uri = default_tracking_uri(new)
    client = MlflowClient(tracking_uri=new_uri)
    experiment = client.get_experiment_by_name("rulerag/moveds")
    (logged,) = client.search_runs([experiment.experiment_id])
    stored = artifact_repository(logged.info.artifact_uri, new_uri, new)
    local = stored.download_artifacts("note.txt", str(tmp_path))
    assert Path(local).read_text(encoding="utf-8") == "hello"
    assert experiment.artifact_location == "mlflow-artifacts:/rulerag/moveds"
    assert str(old) not in logged.info.artifact_uri
    assert tracking.local_artifact_path(logged.info.artifact_uri, new).is_relative_to(
        new / "mlartifacts"
    )

    with stage_run("ingest", "moveds", project_dir=new, tracking_uri=new_uri) as again:
        again.log_artifact(new / "note.txt", artifact_path="second")
    assert not again.spooled
    second = client.get_run(again.run_id).info.artifact_uri
    assert (tracking.local_artifact_path(second, new) / "second" / "note.txt").is_file()
    assert not old.exists()  # nothing was written to the old place


def test_an_experiment_pinned_outside_the_project_is_named_in_a_warning(
    tmp_path: Path, sqlite_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An experiment with a fixed folder elsewhere (a store made before locations were
    proxied, then moved) still takes the run, and a warning says its artifacts stay behind;
    experiments this package creates never warn."""
    from mlflow import MlflowClient

    elsewhere = (tmp_path / "elsewhere").as_uri()
    MlflowClient(tracking_uri=sqlite_uri).create_experiment("rulerag/pinned", elsewhere)
    caplog.set_level(logging.WARNING, logger="rulerag.tracking")
    with stage_run("ingest", "pinned", project_dir=tmp_path, tracking_uri=sqlite_uri) as run:
        run.log_dict({"a": 1}, "a.json")
    assert not run.spooled
    (warning,) = [r.getMessage() for r in caplog.records if r.name.startswith("rulerag.")]
    assert "'rulerag/pinned'" in warning and elsewhere in warning
    assert (tmp_path / "elsewhere" / run.run_id / "artifacts" / "a.json").is_file()

    caplog.clear()
    with stage_run("ingest", "unpinned", project_dir=tmp_path, tracking_uri=sqlite_uri):
        pass
    with stage_run("ingest", "unpinned", project_dir=tmp_path, tracking_uri=sqlite_uri):
        pass
    assert not [r for r in caplog.records if r.name.startswith("rulerag.")]


def test_a_workspace_tracks_into_the_main_project(
    tmp_path: Path, dead_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DAG task's workspace (RULERAG_TRACKING_PROJECT) spools into, and by default stores
    in, the main project, not in the workspace that is removed after the task."""
    main, workspace = tmp_path / "main", tmp_path / "workspace"
    main.mkdir()
    workspace.mkdir()
    monkeypatch.setenv(tracking.TRACKING_PROJECT_ENV, str(main))
    with stage_run("ingest", "ws", project_dir=workspace, tracking_uri=dead_uri) as run:
        run.log_metrics({"facts": 1})
    assert run.spooled and run.spool_path.is_relative_to(tracking.spool_dir(main))
    assert not tracking.spool_dir(workspace).exists()
    assert tracking.tracking_project(workspace) == main
    monkeypatch.delenv(tracking.TRACKING_PROJECT_ENV)
    assert tracking.tracking_project(workspace) == workspace


# -- a store that trickles: one wall-clock deadline for sending a run (issue 45, case 1) -------

TRICKLE_STAGE = """
import sys
from pathlib import Path
from rulerag.tracking import stage_run
with stage_run("ingest", "slowds", project_dir=Path(sys.argv[1]), tracking_uri=sys.argv[2]) as run:
    run.log_metrics({"facts": 1})
    print("SENDING", flush=True)
print("DONE", flush=True)
"""


@pytest.fixture
def trickling_uri() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that answers every request one byte a second, forever:
    each read of MLflow's client gets data in time, the request never ends."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n":
                if stop.wait(1.0):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.close()


def _stage_against(uri: str, project: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", TRICKLE_STAGE, str(project), uri],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), **env},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


@pytest.mark.slow
def test_a_trickling_store_costs_the_deadline_and_the_run_is_spooled(
    tmp_path: Path, trickling_uri: str
) -> None:
    """Before: the stage hung for good after its outputs were published (13.5 min, SIGTERM
    ignored twice), leaving `.staging-*` and no run anywhere."""
    proc = _stage_against(trickling_uri, tmp_path, RULERAG_TRACKING_TIMEOUT="5")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "DONE" in out, out[-2000:]
    assert "no answer within 5 s" in out
    (folder,) = spooled_folders(tmp_path)
    data = json.loads((folder / "run.json").read_text())
    assert data["status"] == "FINISHED" and data["metrics"][0]["key"] == "facts"
    assert not [p for p in (tmp_path / ".mlflow-spool").iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_a_sigterm_while_a_run_is_sent_ends_the_stage_and_spools_the_run(
    tmp_path: Path, trickling_uri: str
) -> None:
    import signal

    proc = _stage_against(trickling_uri, tmp_path, RULERAG_TRACKING_TIMEOUT="600")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "SENDING"
    time.sleep(3)  # into the send
    proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    out, _ = proc.communicate(timeout=60)
    assert time.monotonic() - started < 30, out[-2000:]
    assert proc.returncode != 0 and "DONE" not in out  # the stop request wins
    assert "a stop was asked" in out
    (folder,) = spooled_folders(tmp_path)
    assert json.loads((folder / "run.json").read_text())["status"] == "FINISHED"


# -- a SIGKILLed stage's run appears KILLED when the next stage starts (issue 45, case 16) ------

OPEN_STAGE = """
import sys, time
from pathlib import Path
from rulerag.tracking import stage_run
with stage_run("index", "killds", project_dir=Path(sys.argv[1]), tracking_uri=sys.argv[2]) as run:
    run.set_tags({"rulerag.stage_instance": "index@killds-bm25"})
    print("OPEN", flush=True)
    time.sleep(600)
"""


def _open_stage(project: Path, uri: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", OPEN_STAGE, str(project), uri],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "OPEN"
    return proc


def test_a_sigkilled_stage_is_recorded_killed_by_the_next_stage(tmp_path: Path) -> None:
    """Before: a stage killed with SIGKILL left no run at all (the run is buffered and sent at
    the end). Its open-run marker is found by the next stage of the project on this host; a
    marker of a process still running is left alone."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    killed = _open_stage(tmp_path, uri)
    alive = _open_stage(tmp_path, uri)
    try:
        killed.kill()
        killed.wait(timeout=30)
        with stage_run("ingest", "killds", project_dir=tmp_path, tracking_uri=uri):
            pass
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name("rulerag/killds")
        runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
        assert set(runs) == {"ingest", "bm25 (index)"}
        found = runs["bm25 (index)"]
        assert found.info.status == "KILLED"
        assert found.data.tags["rulerag.stage_instance"] == "index@killds-bm25"
        assert "ended without recording its run" in found.data.tags["rulerag.error"]
        markers = list((tmp_path / ".mlflow-spool").glob(".open-*"))
        assert len(markers) == 1  # the live process's own
        assert str(alive.pid) in markers[0].name
    finally:
        alive.kill()
        alive.wait(timeout=30)
