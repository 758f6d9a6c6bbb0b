"""MLflow in one place: every stage run's params, metrics, tags and artifacts.

Why a package of its own rather than calls to `mlflow.*` in each stage:

* One naming scheme (`names`). One experiment per dataset (`rulerag/<dataset>`), run name
  `<stage>@<dataset>`, metric names MLflow accepts (`recall@10` -> `recall_at_10`), params
  flattened with the same dotted keys `dvc exp run -S section.key=value` uses.
* No global state (`store`). The fluent `mlflow.start_run()` API keeps an active run and a
  tracking URI in module globals, which leak between stages run in one process (tests, Airflow
  workers). Here an explicit `mlflow.MlflowClient` talks to an explicit tracking URI.
* A tracking outage never costs a stage its results (`run`, `spool`). Calls are buffered in
  memory and sent in one burst when the stage's `with` block exits. If the store is unreachable
  or fails, the run is written to a spool folder (`<project>/.mlflow-spool/`) instead, one
  warning is logged, and the stage finishes normally; `python -m rulerag.tracking replay` sends
  the spooled runs later.
* Every stage that starts leaves one run (`run`): `stage_process_run` opens it before params
  and inputs are read (so their errors are recorded FAILED) and the stage's `stage_run` adopts
  it; SIGTERM becomes `StageTerminated` inside the stage, recorded KILLED.
* Runs of one pipeline execution share the tag `rulerag.pipeline_run` (`identity`), so one
  `dvc repro` or one Airflow DAG run can be found as a whole.
* Artifacts survive a move of the project (`config`): the local store's experiments have
  MLflow's proxied `mlflow-artifacts:` locations, served from `<project>/mlartifacts` by
  `python -m rulerag.tracking ui` (`make mlflow-ui`); nothing edits MLflow's tables.

Trained models are named and saved for the Model Registry by `rulerag.tracking.registry`
(imported by the training stages only).

Usage in a stage script::

    with stage_run("ingest", dataset, project_dir=PROJECT_DIR, params={"ingest": cfg}) as run:
        ...  # do the work, write the outputs
        run.log_metrics({"recall@10": 0.52})
        run.log_artifact(out_dir / "stats.json")

Importing this package does not import mlflow (about a second); that happens at flush time.
"""

from __future__ import annotations

from rulerag.tracking import names
from rulerag.tracking.config import (
    ARTIFACTS_DIRNAME,
    DB_FILENAME,
    SPOOL_DIRNAME,
    TRACKING_PROJECT_ENV,
    artifact_destination,
    default_tracking_uri,
    local_artifact_path,
    resolve_tracking_uri,
    server_command,
    spool_dir,
    tracking_project,
)
from rulerag.tracking.identity import PIPELINE_RUN_ENV, pipeline_run_id, runs_dvc
from rulerag.tracking.links import AIRFLOW_ENV, AIRFLOW_URL_ENV
from rulerag.tracking.names import *  # noqa: F403 (the names names.__all__ lists)
from rulerag.tracking.run import (
    StageRun,
    StageTerminated,
    stage_process_run,
    stage_run,
    stop_on_sigterm,
)
from rulerag.tracking.spool import replay_spool
from rulerag.tracking.store import FAIL_FAST_ENV, artifact_repository

__all__ = [
    "AIRFLOW_ENV",
    "AIRFLOW_URL_ENV",
    "ARTIFACTS_DIRNAME",
    "DB_FILENAME",
    "FAIL_FAST_ENV",
    "PIPELINE_RUN_ENV",
    "SPOOL_DIRNAME",
    "TRACKING_PROJECT_ENV",
    "StageRun",
    "StageTerminated",
    "artifact_destination",
    "artifact_repository",
    "default_tracking_uri",
    "local_artifact_path",
    "pipeline_run_id",
    "replay_spool",
    "resolve_tracking_uri",
    "runs_dvc",
    "server_command",
    "spool_dir",
    "stage_process_run",
    "stage_run",
    "stop_on_sigterm",
    "tracking_project",
    *names.__all__,
]
