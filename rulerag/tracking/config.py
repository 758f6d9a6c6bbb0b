"""Where a stage's runs go: the tracking store, the project whose folders hold them, and
artifact locations that survive a move of that project.

The store is the `tracking_uri` argument, else `MLFLOW_TRACKING_URI`, else the project's SQLite
file `mlflow.db`. A DAG task's workspace tracks into the main project (`RULERAG_TRACKING_PROJECT`).

Artifact locations. MLflow writes an experiment's artifact location and each run's artifact URI
into its tables, as absolute paths (a relative location is resolved against the working
directory when the experiment is created, mlflow/mlflow#7670). A project's own store with
`file:///.../mlartifacts/...` locations therefore loses its artifacts when the project folder
moves or is cloned elsewhere. The experiments this package creates in a database store take
MLflow's proxied location instead, `mlflow-artifacts:/rulerag/<dataset>`, which names no folder:
a tracking server started with `--artifacts-destination <project>/mlartifacts` (`server_command`,
behind `python -m rulerag.tracking ui` and `make mlflow-ui`) serves it from wherever the project
is now, and the Docker stack's server already works this way. With no server running (stages
under `dvc repro`), artifacts are written where that server reads them (`local_artifact_path`).
Nothing edits MLflow's tables. Tracking servers choose their artifact locations themselves.

Nothing here imports mlflow.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

from rulerag.tracking.names import fs_safe

__all__ = [
    "ARTIFACTS_DIRNAME",
    "DB_FILENAME",
    "PROXIED_ARTIFACTS_SCHEME",
    "SPOOL_DIRNAME",
    "TRACKING_PROJECT_ENV",
    "artifact_destination",
    "default_tracking_uri",
    "experiment_artifact_location",
    "is_database_store",
    "local_artifact_path",
    "resolve_tracking_uri",
    "server_command",
    "spool_dir",
    "tracking_project",
    "ui_app_installed",
    "ui_url",
]

DB_FILENAME = "mlflow.db"
#: also the folder `mlflow server --serve-artifacts` uses when given no destination
ARTIFACTS_DIRNAME = "mlartifacts"
SPOOL_DIRNAME = ".mlflow-spool"
#: the scheme of MLflow's proxied artifact locations, resolved by a server's
#: `--artifacts-destination`
PROXIED_ARTIFACTS_SCHEME = "mlflow-artifacts"

#: the project whose store, artifacts folder and spool a stage's runs use, when it is not the
#: one the stage runs in (a DAG task's workspace points it at the main workspace)
TRACKING_PROJECT_ENV = "RULERAG_TRACKING_PROJECT"

# Stores MLflow reaches directly (a database); their experiments get proxied locations from us.
# Servers (http, databricks) decide their artifact locations themselves.
_DB_SCHEMES = {"sqlite", "postgresql", "mysql", "mssql"}


def default_tracking_uri(project_dir: Path) -> str:
    """The local store: `sqlite:///<project_dir>/mlflow.db` (absolute path, so it does not
    depend on the working directory; browse it with `make mlflow-ui`)."""
    return f"sqlite:///{(Path(project_dir).resolve() / DB_FILENAME).as_posix()}"


def resolve_tracking_uri(project_dir: Path, tracking_uri: str | None = None) -> str:
    """The store to use: an explicit argument, else `MLFLOW_TRACKING_URI`, else the local one."""
    return (
        tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(project_dir)
    )


def tracking_project(project_dir: Path) -> Path:
    """`RULERAG_TRACKING_PROJECT` if set, else `project_dir`."""
    return Path(os.environ.get(TRACKING_PROJECT_ENV) or project_dir)


def spool_dir(project_dir: Path) -> Path:
    """Where runs wait when the tracking store could not take them."""
    return Path(project_dir) / SPOOL_DIRNAME


def is_database_store(tracking_uri: str) -> bool:
    """Whether MLflow talks to the store's database itself (no server in between)."""
    return urlsplit(tracking_uri).scheme.split("+")[0].lower() in _DB_SCHEMES


def artifact_destination(project_dir: Path) -> Path:
    """The folder that holds a project's artifacts: what `mlflow-artifacts:/` locations of its
    store resolve to (the server's `--artifacts-destination`)."""
    return Path(project_dir).resolve() / ARTIFACTS_DIRNAME


def experiment_artifact_location(tracking_uri: str, experiment: str) -> str | None:
    """The artifact location a new experiment gets: `mlflow-artifacts:/rulerag/<dataset>` in a
    database store (no folder named, so it survives a move), None (the server's choice) else.
    Each run's artifacts are `<location>/<run id>/artifacts`, as MLflow derives them."""
    if not is_database_store(tracking_uri):
        return None
    parts = "/".join(fs_safe(part) for part in experiment.split("/"))
    return f"{PROXIED_ARTIFACTS_SCHEME}:/{parts}"


def local_artifact_path(artifact_uri: str, project_dir: Path) -> Path:
    """The file or folder on this machine behind a run's (or model version's) artifact URI.

    `mlflow-artifacts:/a/b` is `<project>/mlartifacts/a/b`, as `mlflow server
    --artifacts-destination <project>/mlartifacts` resolves it (the path of the URI below the
    destination); a `file:` URI or a plain path (stores made before locations were proxied)
    is itself. Other schemes live elsewhere: ValueError.
    """
    parts = urlsplit(artifact_uri)
    if parts.scheme == PROXIED_ARTIFACTS_SCHEME:
        segments = [unquote(part) for part in parts.path.split("/") if part]
        if ".." in segments:
            raise ValueError(f"artifact URI leaves the artifacts folder: {artifact_uri!r}")
        return artifact_destination(project_dir).joinpath(*segments)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    if parts.scheme == "":
        return Path(artifact_uri)
    raise ValueError(f"artifact URI {artifact_uri!r} is not on this machine")


#: the UI's query parameter naming its workflow (MLflow 3.x's `useWorkflowType`): it wins over
#: the browser's stored choice (`localStorage["mlflow.workflowType_v1"]`, "genai" in a fresh
#: browser), which in MLflow 3.17 also wins over an experiment's `mlflow.experimentKind` tag
UI_WORKFLOW_QUERY = "workflowType=machine_learning"


def ui_url(base: str, experiment_id: str | None = None) -> str:
    """The MLflow UI page of the experiments (or of one) on the model-training view, whatever
    the browser chose before (for links into the UI: Airflow's, the docs'). `make mlflow-ui`'s
    server makes that view the default too (`rulerag.tracking.ui_app`), for bare URLs."""
    page = "/#/experiments" + (f"/{experiment_id}" if experiment_id else "")
    return f"{base.rstrip('/')}{page}?{UI_WORKFLOW_QUERY}"


#: the `mlflow.app` plugin of this project (`rulerag.tracking.ui_app`, pyproject.toml)
UI_APP_NAME = "rulerag-ui"


def ui_app_installed() -> bool:
    """Whether the installed project declares its MLflow app plugin (`make setup` installs
    it; an install from before it was added lacks it until the next `make setup`)."""
    from importlib.metadata import entry_points

    return any(point.name == UI_APP_NAME for point in entry_points(group="mlflow.app"))


#: `make mlflow-ui` is one person's browser on one machine: one server worker, not MLflow's 4
UI_WORKERS = 1


def server_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment `make mlflow-ui`'s server runs in: `env`, with MLflow's job runners off
    unless `env` turns them on (MLFLOW_SERVER_ENABLE_JOB_EXECUTION). They serve GenAI features
    (scorers over traces) this project does not use, and started 8 Huey consumers of about
    240 MiB each beside 4 workers."""
    return {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **env}


def server_command(
    project_dir: Path, *, host: str = "127.0.0.1", port: int = 5000, workers: int = UI_WORKERS
) -> list[str]:
    """`mlflow server` over the project's store, serving its artifacts from `mlartifacts/`
    wherever the project is now, as the app `rulerag-ui` where installed (its UI opens on the
    model-training view, `rulerag.tracking.ui_app`), with `workers` server workers: what
    `make mlflow-ui` runs (in `server_env`)."""
    project = Path(project_dir).resolve()
    app = ["--app-name", UI_APP_NAME] if ui_app_installed() else []
    command = [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", default_tracking_uri(project),
        "--serve-artifacts",
        "--artifacts-destination", str(artifact_destination(project)),
        "--host", host,
        "--port", str(port),
        *app,
    ]  # fmt: skip
    return [*command, "--workers", str(workers)]
