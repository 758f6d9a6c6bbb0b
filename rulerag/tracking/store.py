"""The store calls: one stage run sent to MLflow in one burst, through an explicit client.

Why an explicit `MlflowClient` rather than the fluent `mlflow.start_run()`: the fluent API keeps
an active run and a tracking URI in module globals, which leak between stages run in one
process (tests, Airflow workers). Why one burst at the end: a stage's work never waits on, or
fails with, the store (see `rulerag.tracking.run`). mlflow is imported inside the functions
only (about a second), when a run is sent.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rulerag.redact import redact_secrets
from rulerag.tracking.config import (
    PROXIED_ARTIFACTS_SCHEME,
    artifact_destination,
    experiment_artifact_location,
    is_database_store,
    local_artifact_path,
)
from rulerag.tracking.inputs import to_dataset_inputs
from rulerag.tracking.models import log_logged_models
from rulerag.tracking.names import (
    EXPERIMENT_KIND,
    METRICS_PER_BATCH,
    PARAMS_TAGS_PER_BATCH,
    TAG_EXPERIMENT_KIND,
    TAG_PARENT_RUN,
    TAG_PIPELINE_RUN,
    TAG_STAGE_INSTANCE,
    truncate,
)
from rulerag.tracking.parent import ensure_parent, settle_parent
from rulerag.tracking.record import RunRecord

#: folders of a run's staging (and spool) folder beside `artifacts/`: the saved models (one
#: folder per artifact path, uploaded to their logged models) and the files for the pipeline
#: run's parent (`rulerag.tracking.parent`)
MODELS_DIRNAME = "models"
SUMMARY_DIRNAME = "summary"

logger = logging.getLogger(__name__)

__all__ = [
    "FAIL_FAST_ENV",
    "MODELS_DIRNAME",
    "SUMMARY_DIRNAME",
    "artifact_repository",
    "discard_partial",
    "discard_partial_copies",
    "ensure_experiment",
    "fail_fast_http",
    "first_line",
    "send_run",
]

#: Fail fast against an unreachable server: MLflow's defaults (7 retries with backoff, 120 s
#: timeout) make one dead server cost a stage about four minutes. Used only where unset.
FAIL_FAST_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}


@contextlib.contextmanager
def fail_fast_http() -> Iterator[None]:
    """Set FAIL_FAST_ENV for the duration of the tracking calls, where the user has not."""
    added = [key for key in FAIL_FAST_ENV if key not in os.environ]
    for key in added:
        os.environ[key] = FAIL_FAST_ENV[key]
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def first_line(exc: BaseException) -> str:
    """The first line of an error's text, secrets masked, for a one-line log message."""
    text = redact_secrets(exc).strip()
    return truncate(text.splitlines()[0] if text else "", 300)


def artifact_repository(artifact_uri: str, tracking_uri: str, project_dir: Path) -> Any:
    """MLflow's artifact repository for `artifact_uri` (a run's or a model version's), as a
    client of `tracking_uri` reaches it.

    Through a server this is MLflow's own choice (it proxies `mlflow-artifacts:` locations). A
    database store has no server to ask, and MLflow refuses proxied locations without one: there
    the location is the folder `local_artifact_path` names below the project's `mlartifacts/`
    (where `mlflow server --artifacts-destination` reads it), handled by MLflow's
    `LocalArtifactRepository`, the class such a server uses for a local destination.
    `.list_artifacts()`, `.download_artifacts(path)` and `.log_artifacts(folder)` work the same
    on either.
    """
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
    from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

    proxied = urlsplit(artifact_uri).scheme == PROXIED_ARTIFACTS_SCHEME
    if proxied and is_database_store(tracking_uri):
        return LocalArtifactRepository(local_artifact_path(artifact_uri, project_dir).as_uri())
    return get_artifact_repository(artifact_uri, tracking_uri=tracking_uri)


def _warn_if_outside(experiment: Any, tracking_uri: str, project_dir: Path) -> None:
    """Say so when a database store's experiment keeps its artifacts at a fixed folder outside
    this project: made before locations were proxied (then moved), or by hand. MLflow has no
    call to change an experiment's location, and this package does not edit its tables."""
    location = experiment.artifact_location or ""
    if not is_database_store(tracking_uri) or urlsplit(location).scheme not in ("", "file"):
        return
    if local_artifact_path(location, project_dir).is_relative_to(artifact_destination(project_dir)):
        return
    logger.warning(
        "MLflow experiment %r keeps its artifacts at %s, outside this project's %s: they do "
        "not follow the project when it moves. A fresh store (mlflow.db and mlartifacts/ moved "
        "aside) gives experiments locations that do.",
        experiment.name,
        location,
        artifact_destination(project_dir),
    )


def ensure_experiment(client: Any, name: str, tracking_uri: str, project_dir: Path) -> str:
    """The experiment's id, creating it (or restoring it from the bin) when needed."""
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        location = experiment_artifact_location(tracking_uri, name)
        try:
            return client.create_experiment(
                name, artifact_location=location, tags={TAG_EXPERIMENT_KIND: EXPERIMENT_KIND}
            )
        except MlflowException:
            # Another stage created it between our two calls (parallel Airflow tasks).
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if experiment.lifecycle_stage == "deleted":
        # A deleted experiment still owns its name; without this every later run would fail.
        logger.info("restoring deleted MLflow experiment %r to log into it", name)
        client.restore_experiment(experiment.experiment_id)
    if experiment.tags.get(TAG_EXPERIMENT_KIND) is None:  # created by an older version
        client.set_experiment_tag(experiment.experiment_id, TAG_EXPERIMENT_KIND, EXPERIMENT_KIND)
    _warn_if_outside(experiment, tracking_uri, project_dir)
    return experiment.experiment_id


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def send_run(
    record: RunRecord,
    staging: Path | None,
    tracking_uri: str,
    project_dir: Path,
    created: list[str],
) -> str:
    """Log one run to MLflow in one burst; return its run id.

    `staging` is the run's folder (`artifacts/`, `models/<artifact path>/`, `summary/`), None
    when it logged no file. The run nests under its pipeline run's parent
    (`rulerag.tracking.parent`), settled once the run is complete. The run id is appended to
    `created` as soon as the run exists, so that a caller can clean up a half-logged run if a
    later call fails.
    """
    with fail_fast_http():
        from mlflow import MlflowClient
        from mlflow.entities import Metric, Param

        client = MlflowClient(tracking_uri=tracking_uri)
        experiment_id = ensure_experiment(client, record.experiment, tracking_uri, project_dir)
        parent_id = ensure_parent(client, experiment_id, record)
        tags = dict(record.tags)
        if parent_id is not None:
            tags[TAG_PARENT_RUN] = parent_id
        run = client.create_run(
            experiment_id, start_time=record.start_time, tags=tags, run_name=record.run_name
        )
        run_id = run.info.run_id
        created.append(run_id)
        params = [Param(key, value) for key, value in record.params.items()]
        for chunk in _chunks(params, PARAMS_TAGS_PER_BATCH):
            client.log_batch(run_id, params=chunk, synchronous=True)
        metrics = [
            Metric(m["key"], float(m["value"]), int(m["timestamp"]), int(m["step"]))
            for m in record.metrics
        ]
        for chunk in _chunks(metrics, METRICS_PER_BATCH):
            client.log_batch(run_id, metrics=chunk, synchronous=True)
        if record.inputs:
            client.log_inputs(run_id, datasets=to_dataset_inputs(record.inputs))
        artifacts = staging / "artifacts" if staging is not None else None
        if artifacts is not None and artifacts.is_dir() and any(artifacts.iterdir()):
            _upload(client, run, artifacts, tracking_uri, project_dir)
        if record.models and staging is not None:
            log_logged_models(
                client,
                tracking_uri,
                run,
                experiment_id,
                record.models,
                lambda path: _model_folder(staging, path),
                lambda location, folder: artifact_repository(
                    location, tracking_uri, project_dir
                ).log_artifacts(str(folder)),
                record.last_points(),
            )
        client.set_terminated(run_id, status=record.status, end_time=record.end_time)
        if parent_id is not None:
            _settle(client, experiment_id, record, staging, tracking_uri, project_dir)
        return run_id


def _model_folder(staging: Path, artifact_path: str) -> Path:
    """A saved model's folder in a staging (or spool) folder: `models/<path>`, or
    `artifacts/<path>` in a run spooled by a version that kept models among the artifacts."""
    folder = staging / MODELS_DIRNAME / artifact_path
    return folder if folder.is_dir() else staging / "artifacts" / artifact_path


def _settle(
    client: Any,
    experiment_id: str,
    record: RunRecord,
    staging: Path | None,
    tracking_uri: str,
    project_dir: Path,
) -> None:
    """`parent.settle_parent` once the stage run is complete: a failure there is logged, not
    raised (the stage run is whole; the next stage run settles the parent again)."""

    def upload(parent: Any, folder: Path, artifact_path: str) -> None:
        _upload(client, parent, folder, tracking_uri, project_dir, artifact_path)

    summary = staging / SUMMARY_DIRNAME if staging is not None else None
    try:
        settle_parent(client, experiment_id, record, summary, upload)
    except Exception as err:
        logger.warning(
            "the parent run of pipeline run %s was not updated: %s",
            record.tags.get(TAG_PIPELINE_RUN),
            first_line(err),
        )


def _upload(
    client: Any,
    run: Any,
    folder: Path,
    tracking_uri: str,
    project_dir: Path,
    artifact_path: str | None = None,
) -> None:
    """A folder's files into a run's artifact location (below `artifact_path`): through
    MLflow's client, except a proxied location of a database store, which MLflow would refuse
    without a server."""
    uri = run.info.artifact_uri
    if urlsplit(uri).scheme == PROXIED_ARTIFACTS_SCHEME and is_database_store(tracking_uri):
        repository = artifact_repository(uri, tracking_uri, project_dir)
        repository.log_artifacts(str(folder), artifact_path)
    else:
        client.log_artifacts(run.info.run_id, str(folder), artifact_path)


def discard_partial(run_ids: Sequence[str], tracking_uri: str) -> list[str]:
    """Best-effort delete of runs a failed flush left half-logged (the spool holds the whole
    run, so keeping them would show it twice after replay). Returns the ones not deleted."""
    left = []
    for run_id in run_ids:
        try:
            with fail_fast_http():
                from mlflow import MlflowClient

                MlflowClient(tracking_uri=tracking_uri).delete_run(run_id)
        except Exception:
            left.append(run_id)
    return left


def discard_partial_copies(run_ids: Sequence[str], record: RunRecord, tracking_uri: str) -> None:
    """Before a replay sends `record`, delete the half-logged copies of it that its failed
    flush could not delete (`partial_run_ids`), wherever the replay's store holds them.

    The store is found by the run ids, not by comparing URIs: one server or file has many
    spellings (127.0.0.1 and localhost, a path through a symlink), and a replay through
    another one used to leave the copy RUNNING beside the replayed run. MLflow's run ids are
    random, so an id found is that run; its name and start time are checked as well, so no
    other run is ever deleted. Best effort: a store without the id (another store) or
    unreachable keeps whatever it has.
    """
    for run_id in run_ids:
        try:
            with fail_fast_http():
                from mlflow import MlflowClient

                client = MlflowClient(tracking_uri=tracking_uri)
                info = client.get_run(run_id).info
                if (info.run_name, info.start_time, info.lifecycle_stage) == (
                    record.run_name,
                    record.start_time,
                    "active",
                ):
                    client.delete_run(run_id)
        except Exception as err:  # not in this store, or the store is down: nothing to do
            logger.debug("partial run %s not discarded: %s", run_id, first_line(err))
    _discard_ghosts(record, tracking_uri)


def _discard_ghosts(record: RunRecord, tracking_uri: str) -> None:
    """Delete the copies of `record` still RUNNING in this store that no spooled id names: a
    send abandoned at its deadline (`rulerag.deadline`) may have created the run after the
    spool was written. Found by what only that run has: its stage instance, name and start
    time (milliseconds); best effort, like the rest."""
    instance = record.tags.get(TAG_STAGE_INSTANCE)
    if not instance or "'" in instance:
        return
    try:
        with fail_fast_http():
            from mlflow import MlflowClient

            client = MlflowClient(tracking_uri=tracking_uri)
            experiment = client.get_experiment_by_name(record.experiment)
            if experiment is None:
                return
            ghosts = client.search_runs(
                [experiment.experiment_id],
                f"attributes.start_time = {int(record.start_time)} and "
                f"attributes.status = 'RUNNING' and tags.`{TAG_STAGE_INSTANCE}` = '{instance}'",
            )
            for run in ghosts:
                if run.info.run_name == record.run_name:
                    client.delete_run(run.info.run_id)
    except Exception as err:
        logger.debug("no ghost of %s discarded: %s", record.run_name, first_line(err))
