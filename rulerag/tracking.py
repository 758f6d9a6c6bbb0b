"""MLflow in one place: every stage run's params, metrics, tags and artifacts.

Why this module exists rather than calls to `mlflow.*` in each stage:

* One naming scheme. One experiment per dataset (`rulerag/<dataset>`), run name
  `<stage>@<dataset>`, metric names MLflow accepts (`recall@10` -> `recall_at_10`), params
  flattened with the same dotted keys `dvc exp run -S section.key=value` uses.
* No global state. The fluent `mlflow.start_run()` API keeps an active run and a tracking URI in
  module globals, which leak between stages run in one process (tests, Airflow workers). Here an
  explicit `mlflow.MlflowClient` talks to an explicit tracking URI.
* A tracking outage never costs a stage its results. Calls are buffered in memory and sent in one
  burst when the stage's `with` block exits. If the store is unreachable or fails, the run is
  written to a spool folder (`<project>/.mlflow-spool/`) instead, one warning is logged, and the
  stage finishes normally; `python -m rulerag.tracking replay` sends the spooled runs later.
* Runs of one pipeline execution share the tag `rulerag.pipeline_run`, so one `dvc repro` or one
  Airflow DAG run can be found as a whole.

Usage in a stage script::

    with stage_run("ingest", dataset, project_dir=PROJECT_DIR, params={"ingest": cfg}) as run:
        ...  # do the work, write the outputs
        run.log_metrics({"recall@10": 0.52})
        run.log_artifact(out_dir / "stats.json")

Importing this module does not import mlflow (about a second); that happens at flush time.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rulerag.io import pid_alive
from rulerag.redact import redact_secrets, redact_url

logger = logging.getLogger(__name__)

__all__ = [
    "PIPELINE_RUN_ENV",
    "StageRun",
    "default_tracking_uri",
    "experiment_name",
    "flatten_params",
    "pipeline_run_id",
    "replay_spool",
    "resolve_tracking_uri",
    "runs_dvc",
    "sanitize_name",
    "spool_dir",
    "stage_run",
]

#: Env var naming the pipeline execution (set by `make run` and by Airflow to the DAG run id).
PIPELINE_RUN_ENV = "RULERAG_PIPELINE_RUN"
TAG_PIPELINE_RUN = "rulerag.pipeline_run"
TAG_STAGE = "rulerag.stage"
TAG_DATASET = "rulerag.dataset"
TAG_STAGE_INSTANCE = "rulerag.stage_instance"
TAG_ERROR = "rulerag.error"
TAG_REPLAYED_FROM = "rulerag.replayed_from"
TAG_REGISTRY_ERROR = "rulerag.registry_error"
#: MLflow's own tag names, so the UI shows the commit and the user.
TAG_GIT_COMMIT = "mlflow.source.git.commit"
#: MLflow 3 opens an experiment on the view its kind names; without the tag it guesses the
#: GenAI "Overview" (traces), which is empty here: every experiment is a model-development one
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
TAG_USER = "mlflow.user"

DB_FILENAME = "mlflow.db"
ARTIFACTS_DIRNAME = "mlartifacts"
SPOOL_DIRNAME = ".mlflow-spool"
RUN_JSON = "run.json"
SPOOL_FORMAT = 1

# MLflow's limits (mlflow.utils.validation), copied so that importing this module stays cheap;
# a unit test checks they still match the installed MLflow.
MAX_PARAM_VALUE_LENGTH = 6000
MAX_TAG_VALUE_LENGTH = 8000
MAX_KEY_LENGTH = 250
PARAMS_TAGS_PER_BATCH = 100
METRICS_PER_BATCH = 1000

#: Fail fast against an unreachable server: MLflow's defaults (7 retries with backoff, 120 s
#: timeout) make one dead server cost a stage about four minutes. Used only where unset.
FAIL_FAST_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}

# Database-backed stores would put artifacts in ./mlruns under whatever the working directory
# is; for these the experiment's artifact location is pinned to <project>/mlartifacts instead.
# Servers (http, databricks) decide their artifact location themselves.
_DB_SCHEMES = {"sqlite", "postgresql", "mysql", "mssql"}

_ILLEGAL_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.\-/]")
_ILLEGAL_PATH_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")


# --------------------------------------------------------------------------------------------
# Names, params, URIs, tags
# --------------------------------------------------------------------------------------------


def experiment_name(dataset: str) -> str:
    """The experiment a dataset's runs go to: one per dataset, so runs compare like with like."""
    return f"rulerag/{dataset}"


def sanitize_name(name: str) -> str:
    """Turn `name` into a key MLflow accepts for a metric, param or tag.

    `@` becomes `_at_` (`recall@10` -> `recall_at_10`, as docs/layout.md names metrics); any other
    character outside letters, digits, `_ . - /` becomes `_` (MLflow also allows spaces and, off
    Windows, colons; both are replaced so names stay portable and shell-friendly). MLflow treats
    names as file paths, so empty, `.` and `..` segments and a leading `/` are removed too, and
    the result is cut to MLflow's 250-character key limit. Done at logging time so that a bad
    name can never make the whole run fail to log (and be spooled forever).
    """
    text = _ILLEGAL_NAME_CHARS.sub("_", str(name).replace("@", "_at_"))[:MAX_KEY_LENGTH]
    parts = ["_" * len(part) if part in {".", ".."} else part for part in text.split("/") if part]
    return "/".join(parts) or "_"


def _stringify(value: Any) -> str:
    """A param value as text: strings as they are, anything else as JSON (`true`, `null`,
    `["icews14"]`, `{}`), which reads the same as params.yaml and parses back."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten nested params (as read from params.yaml) into MLflow params.

    `{"ingest": {"duplicates": "drop", "source": {}}}` -> `{"ingest.duplicates": "drop",
    "ingest.source": "{}"}`: dotted keys are the ones `dvc exp run -S` and the Airflow conf take,
    so a run's params can be copied back into an experiment. Values are stringified and cut to
    MLflow's 6000-character limit (MLflow would otherwise reject the whole batch). An empty
    mapping is kept as `{}` so that "no overrides" is still visible.
    """
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_params(value, prefix=f"{name}."))
        else:
            # a URL with credentials (an API base URL, a store) must not reach the store
            value = redact_url(_stringify(value))
            flat[sanitize_name(name)] = _truncate(value, MAX_PARAM_VALUE_LENGTH)
    return flat


def default_tracking_uri(project_dir: Path) -> str:
    """The local store: `sqlite:///<project_dir>/mlflow.db` (absolute path, so it does not
    depend on the working directory; browse it with `make mlflow-ui`)."""
    return f"sqlite:///{(Path(project_dir).resolve() / DB_FILENAME).as_posix()}"


def resolve_tracking_uri(project_dir: Path, tracking_uri: str | None = None) -> str:
    """The store to use: an explicit argument, else `MLFLOW_TRACKING_URI`, else the local one."""
    return (
        tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(project_dir)
    )


#: the project whose store, artifacts folder and spool a stage's runs use, when it is not the
#: one the stage runs in (a DAG task's workspace points it at the main workspace)
TRACKING_PROJECT_ENV = "RULERAG_TRACKING_PROJECT"


def tracking_project(project_dir: Path) -> Path:
    """`RULERAG_TRACKING_PROJECT` if set, else `project_dir`."""
    return Path(os.environ.get(TRACKING_PROJECT_ENV) or project_dir)


def spool_dir(project_dir: Path) -> Path:
    """Where runs wait when the tracking store could not take them."""
    return Path(project_dir) / SPOOL_DIRNAME


def _is_dvc(arg: str) -> bool:
    return Path(arg).name.lower() in {"dvc", "dvc.exe"}


def runs_dvc(cmdline: Sequence[str]) -> bool:
    """Whether a process command line runs DVC: `dvc ...`, `python -m dvc ...`, or
    `python /venv/bin/dvc ...` (how a console script started through its shebang line looks)."""
    if not cmdline:
        return False
    if _is_dvc(cmdline[0]):
        return True
    if not Path(cmdline[0]).name.lower().startswith(("python", "pypy")):
        return False
    args = iter(cmdline[1:])
    for arg in args:
        if arg == "-m":
            return next(args, "") == "dvc"
        if arg.startswith("-m"):
            return arg[2:] == "dvc"
        if arg == "-c":
            return False
        if arg in {"-X", "-W", "-Q"}:  # options whose value is the next argument
            next(args, None)
            continue
        if arg.startswith("-"):
            continue
        return _is_dvc(arg)
    return False


def _dvc_ancestor_run_id() -> str | None:
    """`dvc-<pid>-<start>` of the nearest ancestor process running DVC, else None.

    Every stage of one `dvc repro` is a child (through a shell) of the same DVC process, so its
    pid plus start time (pids get reused) names that execution without anyone passing it down.
    """
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency of the pinned tree
        return None
    try:
        parents = psutil.Process().parents()
    except psutil.Error:
        return None
    for proc in parents:
        try:
            if runs_dvc(proc.cmdline()):
                return f"dvc-{proc.pid}-{int(proc.create_time())}"
        except psutil.Error:  # gone, zombie, or not ours to read: keep walking up
            continue
    return None


def pipeline_run_id() -> str:
    """The value of the `rulerag.pipeline_run` tag shared by all stages of one execution.

    `RULERAG_PIPELINE_RUN` when set (`make run`, Airflow's DAG run id); else derived from the
    `dvc repro` process that started this stage; else a fresh `standalone-<uuid>` (a stage run
    by hand is its own execution; set the env var to group several).
    """
    from_env = os.environ.get(PIPELINE_RUN_ENV, "").strip()
    if from_env:
        return from_env
    return _dvc_ancestor_run_id() or f"standalone-{uuid.uuid4().hex}"


def _git_commit(project_dir: Path) -> str | None:
    """HEAD of the project's git repository, or None (not a repository, no commit, no git)."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=project_dir,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", commit) else None


def _user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:  # no user database entry (some containers)
        return None


def _fs_safe(text: str) -> str:
    return _ILLEGAL_PATH_CHARS.sub("_", text).strip(".") or "_"


def _now_ms() -> int:
    return int(time.time() * 1000)


# --------------------------------------------------------------------------------------------
# The run record: what is buffered, sent, or spooled
# --------------------------------------------------------------------------------------------


@dataclass
class _RunRecord:
    """Everything one stage run logs except the artifact files; `run.json` is this as JSON."""

    experiment: str
    run_name: str
    stage: str
    dataset: str
    start_time: int
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)  # key, value, step, timestamp
    status: str = "RUNNING"
    end_time: int | None = None
    #: MLflow models among the artifacts, registered when the run is sent: artifact_path,
    #: name (registered model), description
    models: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> _RunRecord:
        names = cls.__dataclass_fields__
        return cls(**{key: value for key, value in data.items() if key in names})


@contextlib.contextmanager
def _fail_fast_http() -> Iterator[None]:
    """Set FAIL_FAST_ENV for the duration of the tracking calls, where the user has not."""
    added = [key for key in FAIL_FAST_ENV if key not in os.environ]
    for key in added:
        os.environ[key] = FAIL_FAST_ENV[key]
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def _artifact_location(tracking_uri: str, project_dir: Path, experiment: str) -> str | None:
    scheme = urlsplit(tracking_uri).scheme.split("+")[0].lower()
    if scheme not in _DB_SCHEMES:
        return None
    folder = Path(project_dir).resolve() / ARTIFACTS_DIRNAME
    for part in experiment.split("/"):
        folder = folder / _fs_safe(part)
    return folder.as_uri()


#: the store's columns holding artifact URIs (the registry's versions point into runs' folders)
REROOTED_COLUMNS = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("model_versions", "source"),
    ("model_versions", "storage_location"),
)


def reroot_store(tracking_uri: str, project_dir: Path) -> int:
    """Point a local SQLite store's artifact locations at this project's `mlartifacts/`.

    Experiments created here keep absolute `file://.../mlartifacts/...` locations (MLflow
    needs them absolute), so a moved clone, or a container that mounts the project elsewhere,
    would show runs without artifacts. Every experiment location and run artifact URI under
    another folder's `mlartifacts/` is rewritten to this project's; returns how many rows
    changed. Stores that are not SQLite files of this kind are left alone (0)."""
    import sqlite3

    parts = urlsplit(tracking_uri)
    if parts.scheme != "sqlite":
        return 0
    path = Path(tracking_uri.removeprefix("sqlite:///").split("?")[0])  # sqlite:////abs/x.db
    if not path.is_file():
        return 0
    here = (Path(project_dir).resolve() / ARTIFACTS_DIRNAME).as_uri()
    marker = f"/{ARTIFACTS_DIRNAME}"
    changed = 0
    with sqlite3.connect(path) as db:
        for table, column in REROOTED_COLUMNS:
            present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            if column not in present:  # a store from before the registry's tables
                continue
            rows = db.execute(
                f"SELECT rowid, {column} FROM {table} WHERE {column} LIKE ?",  # noqa: S608
                (f"file://%{marker}/%",),
            ).fetchall()
            for rowid, value in rows:
                root, rest = value.split(marker + "/", 1)
                if root + marker == here:
                    continue
                db.execute(
                    f"UPDATE {table} SET {column} = ? WHERE rowid = ?",  # noqa: S608
                    (f"{here}/{rest}", rowid),
                )
                changed += 1
    return changed


def _ensure_experiment(client: Any, name: str, tracking_uri: str, project_dir: Path) -> str:
    """The experiment's id, creating it (or restoring it from the bin) when needed."""
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        location = _artifact_location(tracking_uri, project_dir, name)
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
    return experiment.experiment_id


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _send(
    record: _RunRecord,
    artifacts: Path | None,
    tracking_uri: str,
    project_dir: Path,
    created: list[str],
) -> str:
    """Log one run to MLflow in one burst; return its run id.

    The run id is appended to `created` as soon as the run exists, so that a caller can clean
    up a half-logged run if a later call fails.
    """
    with _fail_fast_http():
        from mlflow import MlflowClient
        from mlflow.entities import Metric, Param

        if tracking_uri == default_tracking_uri(project_dir):  # the project's own store only:
            reroot_store(tracking_uri, project_dir)  # a shared one must not flip between clones
        client = MlflowClient(tracking_uri=tracking_uri)
        experiment_id = _ensure_experiment(client, record.experiment, tracking_uri, project_dir)
        run = client.create_run(
            experiment_id,
            start_time=record.start_time,
            tags=dict(record.tags),
            run_name=record.run_name,
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
        if artifacts is not None and artifacts.is_dir() and any(artifacts.iterdir()):
            client.log_artifacts(run_id, str(artifacts))
        last = _last_metrics(record) if record.models else {}
        for model in record.models:
            _register(client, run, model, last)
        client.set_terminated(run_id, status=record.status, end_time=record.end_time)
        return run_id


def _last_metrics(record: _RunRecord) -> dict[str, float]:
    """Each metric's value at its last step (the run's result, as MLflow's runs table shows)."""
    last: dict[str, tuple[int, int, float]] = {}
    for metric in record.metrics:
        key = (int(metric["step"]), int(metric["timestamp"]), float(metric["value"]))
        if metric["key"] not in last or key[:2] >= last[metric["key"]][:2]:
            last[metric["key"]] = key
    return {name: value for name, (_step, _time, value) in sorted(last.items())}


def _register(client: Any, run: Any, model: Mapping[str, str], metrics: Mapping[str, float]):
    """A new version of the registered model `model["name"]` from this run's artifact folder,
    tagged with the run's metrics (the registry shows tags, and the version links its run).
    A store without a registry keeps the run and says so in a tag instead of failing it."""
    from mlflow.exceptions import MlflowException

    name = model["name"]
    try:
        try:
            client.create_registered_model(name, description=model.get("description") or None)
        except MlflowException as err:
            if "RESOURCE_ALREADY_EXISTS" not in str(err.error_code):
                raise
        tags = {f"metric.{key}": f"{value:.6g}" for key, value in list(metrics.items())[:90]}
        tags[TAG_STAGE_INSTANCE] = run.data.tags.get(TAG_STAGE_INSTANCE, "")
        version = client.create_model_version(
            name,
            source=f"{run.info.artifact_uri.rstrip('/')}/{model['artifact_path']}",
            run_id=run.info.run_id,
            tags=tags,
            description=model.get("description") or None,
        )
    except MlflowException as err:
        logger.warning("model %s not registered: %s", name, _first_line(err))
        client.set_tag(run.info.run_id, TAG_REGISTRY_ERROR, _truncate(str(err), 500))
        return
    logger.info("registered %s version %s", name, version.version)


def _discard_partial(run_ids: Sequence[str], tracking_uri: str) -> list[str]:
    """Best-effort delete of runs a failed flush left half-logged (the spool holds the whole
    run, so keeping them would show it twice after replay). Returns the ones not deleted."""
    left = []
    for run_id in run_ids:
        try:
            with _fail_fast_http():
                from mlflow import MlflowClient

                MlflowClient(tracking_uri=tracking_uri).delete_run(run_id)
        except Exception:
            left.append(run_id)
    return left


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n", "utf-8")
    os.replace(tmp, path)


def _link_or_copy(src: Path, dst: Path) -> None:
    """Snapshot one file: a hard link (free, and immune to the source being replaced or deleted
    later), else a copy (other filesystem, or links not allowed)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists() or dst.is_symlink():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


# --------------------------------------------------------------------------------------------
# The public API
# --------------------------------------------------------------------------------------------


class StageRun:
    """One stage run's log, buffered until the `stage_run` block exits.

    Nothing here talks to MLflow, so logging never slows or breaks the stage. Artifacts are
    snapshotted when logged (hard links into a staging folder under the spool), so a temporary
    file may be deleted or atomically replaced right after `log_artifact`, and the spool holds
    them without copying (a file rewritten in place, though, shares the new content).
    Later `log_params` calls win over earlier ones for the same key (MLflow params are
    write-once, so they are merged here rather than sent twice).
    """

    def __init__(self, stage: str, dataset: str, *, project_dir: Path, tracking_uri: str) -> None:
        self._project_dir = Path(project_dir).resolve()
        self._tracking_uri = tracking_uri
        self._record = _RunRecord(
            experiment=experiment_name(dataset),
            run_name=f"{stage}@{dataset}",
            stage=stage,
            dataset=dataset,
            start_time=_now_ms(),
        )
        tags = {
            TAG_PIPELINE_RUN: pipeline_run_id(),
            TAG_STAGE: stage,
            TAG_DATASET: dataset,
            TAG_STAGE_INSTANCE: f"{stage}@{dataset}",
        }
        commit = _git_commit(self._project_dir)
        if commit:
            tags[TAG_GIT_COMMIT] = commit
        user = _user()
        if user:
            tags[TAG_USER] = user
        self._record.tags.update(
            {key: _truncate(value, MAX_TAG_VALUE_LENGTH) for key, value in tags.items()}
        )
        self._staging: Path | None = None
        self._closed = False
        self._spooled = False
        self._spool_path: Path | None = None
        self._run_id: str | None = None

    # -- what stages call ---------------------------------------------------------------------

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Record params; nested mappings are flattened to dotted keys (see `flatten_params`)."""
        self._check_open()
        self._record.params.update(flatten_params(params))

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Record metrics at `step` (0 when None); names are sanitised (`recall@10` ->
        `recall_at_10`). A value that is not a number raises here, where the bug is."""
        self._check_open()
        timestamp = _now_ms()
        for key, value in metrics.items():
            try:
                number = float(value)
            except (TypeError, ValueError) as err:
                raise TypeError(f"metric {key!r} is not a number: {value!r}") from err
            self._record.metrics.append(
                {
                    "key": sanitize_name(key),
                    "value": number,
                    "step": int(step or 0),
                    "timestamp": timestamp,
                }
            )

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """Record a file or a directory (kept under its own name, as MLflow does), optionally
        under the artifact folder `artifact_path`. The path must exist now: it is snapshotted."""
        self._check_open()
        src = Path(path)
        if not src.exists():
            raise FileNotFoundError(f"artifact not found: {src}")
        dest = self._artifact_dest(artifact_path) / src.resolve().name
        if src.is_dir():
            for root, _dirs, files in os.walk(src, followlinks=True):
                for name in files:
                    file = Path(root) / name
                    _link_or_copy(file, dest / file.relative_to(src))
        else:
            _link_or_copy(src, dest)

    def log_model(
        self,
        save: Callable[[Path], None],
        artifact_path: str,
        *,
        registered_name: str,
        description: str = "",
    ) -> None:
        """Record an MLflow model (`save(folder)` writes it, e.g. with a flavour's
        `save_model`) at `artifact_path` and register it as a new version of
        `registered_name` when the run is sent, tagged with the run's last metric values.
        The model is written now, so it is snapshotted like any artifact."""
        self._check_open()
        dest = self._artifact_dest(artifact_path)
        if dest.exists():
            raise ValueError(f"artifact path {artifact_path!r} is already used in this run")
        dest.parent.mkdir(parents=True, exist_ok=True)
        save(dest)
        self._record.models.append(
            {
                "artifact_path": dest.relative_to(self._artifact_dest(None)).as_posix(),
                "name": registered_name,
                "description": description,
            }
        )

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        """Record `obj` as a JSON (or, for `.yaml`/`.yml`, YAML) artifact file, like
        `mlflow.log_dict`. Serialised now, so later changes to `obj` are not logged."""
        self._check_open()
        dest = self._artifact_dest(artifact_file)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.suffix.lower() in {".yaml", ".yml"}:
            import yaml

            text = yaml.safe_dump(obj, sort_keys=False, allow_unicode=True)
        else:
            text = json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n"
        if dest.exists() or dest.is_symlink():
            dest.unlink()  # may be a hard link to someone's file: never write through it
        dest.write_text(text, encoding="utf-8")

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Record tags (names sanitised, values stringified and cut to MLflow's limit)."""
        self._check_open()
        for key, value in tags.items():
            value = redact_url(str(value))
            self._record.tags[sanitize_name(key)] = _truncate(value, MAX_TAG_VALUE_LENGTH)
            if key == TAG_STAGE_INSTANCE:  # `generate@icews14-rulerag_ft`, not nine alike
                self._record.run_name = _truncate(value, MAX_TAG_VALUE_LENGTH)

    @property
    def spooled(self) -> bool:
        """True when the store could not take the run and it went to the spool folder."""
        return self._spooled

    # -- what the caller may inspect afterwards -----------------------------------------------

    @property
    def run_id(self) -> str | None:
        """The MLflow run id once logged; None before the block exits or when spooled."""
        return self._run_id

    @property
    def spool_path(self) -> Path | None:
        """The spool folder holding this run, when it was spooled."""
        return self._spool_path

    @property
    def tracking_uri(self) -> str:
        return self._tracking_uri

    @property
    def tags(self) -> dict[str, str]:
        """A copy of the tags the run will carry (pipeline run, stage, dataset, commit...)."""
        return dict(self._record.tags)

    # -- internals ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"stage run {self._record.run_name} is already closed")

    def _artifact_dest(self, relative: str | None) -> Path:
        """`relative` inside the staging artifacts folder; refuses paths that escape it."""
        if self._staging is None:
            root = spool_dir(self._project_dir)
            root.mkdir(parents=True, exist_ok=True)
            self._staging = root / f".staging-{os.getpid()}-{uuid.uuid4().hex[:12]}"
            (self._staging / "artifacts").mkdir(parents=True)
        base = self._staging / "artifacts"
        parts = [
            part for part in (relative or "").replace("\\", "/").split("/") if part not in ("", ".")
        ]
        if ".." in parts:
            raise ValueError(f"artifact path must stay inside the run: {relative!r}")
        return base.joinpath(*parts)

    def _finish(self, status: str, error: BaseException | None) -> None:
        """Send the run, or spool it; never raises (the stage's own outcome must win)."""
        self._closed = True
        try:
            self._send_or_spool(status, error)
        except Exception as exc:  # a bug here must not turn a finished stage into a failed one
            # no traceback: its messages may hold the store's URL with credentials
            logger.error(
                "MLflow logging of %s failed unexpectedly: %s",
                self._record.run_name,
                redact_secrets(f"{type(exc).__name__}: {exc}"),
            )

    def _send_or_spool(self, status: str, error: BaseException | None) -> None:
        record = self._record
        record.status = status
        record.end_time = _now_ms()
        if error is not None:
            record.tags[TAG_ERROR] = _truncate(
                redact_secrets(f"{type(error).__name__}: {error}"), MAX_TAG_VALUE_LENGTH
            )
        artifacts = self._staging / "artifacts" if self._staging else None
        created: list[str] = []
        try:
            self._run_id = _send(record, artifacts, self._tracking_uri, self._project_dir, created)
        except Exception as exc:
            partial = _discard_partial(created, self._tracking_uri)
            self._spool(exc, partial)
            return
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
        waiting = _count_spooled(self._project_dir)
        if waiting:
            logger.info(
                "%d spooled MLflow run(s) wait in %s; send them with "
                "`python -m rulerag.tracking replay`",
                waiting,
                spool_dir(self._project_dir),
            )

    def _spool(self, exc: BaseException, partial_run_ids: list[str]) -> None:
        record = self._record
        root = spool_dir(self._project_dir)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        name = f"{stamp}-{_fs_safe(record.stage)}-{_fs_safe(record.dataset)}-{uuid.uuid4().hex[:8]}"
        target = root / name
        try:
            root.mkdir(parents=True, exist_ok=True)
            if self._staging is None:
                self._staging = root / f".staging-{os.getpid()}-{uuid.uuid4().hex[:12]}"
                self._staging.mkdir()
            payload = {
                "format": SPOOL_FORMAT,
                **asdict(record),
                "spooled_at": datetime.now(UTC).isoformat(),
                "tracking_uri": redact_url(self._tracking_uri),
                "error": redact_secrets(f"{type(exc).__name__}: {exc}"),
                "partial_run_ids": partial_run_ids,
            }
            _write_json_atomic(self._staging / RUN_JSON, payload)
            # The folder appears under its final name only once complete, so a replay running
            # at the same time never sees half a run.
            os.replace(self._staging, target)
            self._staging = None
        except Exception as spool_error:
            logger.error(
                "MLflow run %s could not be logged (%s) nor spooled to %s (%s); its params and "
                "metrics are lost (the stage's outputs are not affected)",
                record.run_name,
                _first_line(exc),
                target,
                _first_line(spool_error),
            )
            return
        self._spooled = True
        self._spool_path = target
        logger.warning(
            "MLflow tracking store %s failed (%s: %s); run %s kept in %s. The stage's outputs "
            "are not affected. Send it later with `python -m rulerag.tracking replay`.",
            redact_url(self._tracking_uri),
            type(exc).__name__,
            _first_line(exc),
            record.run_name,
            target,
        )


def _first_line(exc: BaseException) -> str:
    text = redact_secrets(exc).strip()
    return _truncate(text.splitlines()[0] if text else "", 300)


def _count_spooled(project_dir: Path) -> int:
    root = spool_dir(project_dir)
    if not root.is_dir():
        return 0
    return sum(1 for p in root.iterdir() if not p.name.startswith(".") and (p / RUN_JSON).is_file())


def _exit_status(error: BaseException | None) -> str:
    if error is None:
        return "FINISHED"
    if isinstance(error, SystemExit) and error.code in (0, None):
        return "FINISHED"
    if isinstance(error, KeyboardInterrupt):
        return "KILLED"
    return "FAILED"


@contextlib.contextmanager
def stage_run(
    stage: str,
    dataset: str,
    *,
    project_dir: Path,
    params: Mapping[str, Any] | None = None,
    tracking_uri: str | None = None,
) -> Iterator[StageRun]:
    """Record one stage run in the dataset's experiment; send it when the block exits.

    The run is named `<stage>@<dataset>` and tagged with the pipeline run, stage, dataset, stage
    instance and git commit. `params` (nested, e.g. `{"ingest": params["ingest"]}`) are logged
    with dotted keys. The store is `tracking_uri`, else `MLFLOW_TRACKING_URI`, else the
    project's SQLite file. If the block raises, the run is recorded as FAILED (KILLED on
    Ctrl-C) and the exception propagates. If the store fails, the run is spooled (see
    `StageRun.spooled`) and the block's outcome is unchanged.
    """
    project_dir = tracking_project(project_dir)
    run = StageRun(
        stage,
        dataset,
        project_dir=project_dir,
        tracking_uri=resolve_tracking_uri(project_dir, tracking_uri),
    )
    if params:
        run.log_params(params)
    try:
        yield run
    except BaseException as error:
        run._finish(_exit_status(error), error)
        raise
    run._finish("FINISHED", None)


# --------------------------------------------------------------------------------------------
# Replay
# --------------------------------------------------------------------------------------------


def _reclaim_orphans(root: Path) -> None:
    """Undo what a killed process left: claims of dead replays go back into the queue, staging
    folders of dead stages (never complete runs) are removed."""
    for path in root.iterdir():
        match = re.match(r"\.(replaying|staging)-(\d+)-(.+)$", path.name)
        if not match or pid_alive(int(match.group(2))):
            continue
        kind, rest = match.group(1), match.group(3)
        with contextlib.suppress(OSError):
            if kind == "replaying":
                os.replace(path, root / rest)
            else:
                shutil.rmtree(path)


def replay_spool(project_dir: Path, tracking_uri: str | None = None) -> int:
    """Log the runs waiting in `<project_dir>/.mlflow-spool` to MLflow; return how many went.

    The store is `tracking_uri`, else `MLFLOW_TRACKING_URI`, else the project's SQLite file.
    Each spool folder is deleted once its run is fully logged; one that fails stays for the next
    replay (a warning says why). Runs keep their original start/end times and metric
    timestamps, and get a `rulerag.replayed_from` tag. Safe to run concurrently: a folder is
    claimed by renaming it before it is sent.
    """
    root = spool_dir(project_dir)
    if not root.is_dir():
        return 0
    uri = resolve_tracking_uri(project_dir, tracking_uri)
    _reclaim_orphans(root)
    replayed = 0
    for folder in sorted(root.iterdir()):
        if folder.name.startswith(".") or not (folder / RUN_JSON).is_file():
            continue
        claim = root / f".replaying-{os.getpid()}-{folder.name}"
        try:
            os.rename(folder, claim)
        except OSError:  # another replay took it first
            continue
        created: list[str] = []
        try:
            data = json.loads((claim / RUN_JSON).read_text(encoding="utf-8"))
            if data.get("format") != SPOOL_FORMAT:
                raise ValueError(f"unknown spool format {data.get('format')!r}")
            record = _RunRecord.from_json(data)
            record.tags[TAG_REPLAYED_FROM] = folder.name
            if data.get("partial_run_ids") and data.get("tracking_uri") == redact_url(uri):
                _discard_partial(data["partial_run_ids"], uri)
            _send(record, claim / "artifacts", uri, Path(project_dir), created)
        except Exception as exc:
            _discard_partial(created, uri)
            with contextlib.suppress(OSError):
                os.rename(claim, folder)
            logger.warning(
                "could not replay spooled run %s to %s (%s: %s); it stays in the spool",
                folder.name,
                redact_url(uri),
                type(exc).__name__,
                _first_line(exc),
            )
            continue
        shutil.rmtree(claim, ignore_errors=True)
        replayed += 1
    return replayed


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m rulerag.tracking replay|reroot [--project-dir DIR] [--tracking-uri URI]`."""
    parser = argparse.ArgumentParser(
        prog="python -m rulerag.tracking", description="MLflow helpers for rulerag."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    commands = (
        sub.add_parser("replay", help="send runs spooled during a tracking outage"),
        sub.add_parser("reroot", help="point the local store's artifact locations here"),
    )
    for command in commands:
        command.add_argument(
            "--project-dir", type=Path, default=Path.cwd(), help="project root (default: cwd)"
        )
        command.add_argument(
            "--tracking-uri",
            default=None,
            help="the store (default: MLFLOW_TRACKING_URI, else <project>/mlflow.db)",
        )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    project_dir = args.project_dir.resolve()
    uri = resolve_tracking_uri(project_dir, args.tracking_uri)
    if args.command == "reroot":
        changed = reroot_store(uri, project_dir)
        print(f"{changed} artifact location(s) now under {project_dir / ARTIFACTS_DIRNAME}")
        return 0
    sent = replay_spool(project_dir, uri)
    left = _count_spooled(project_dir)
    print(f"replayed {sent} run(s) to {redact_url(uri)}; {left} left in {spool_dir(project_dir)}")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
