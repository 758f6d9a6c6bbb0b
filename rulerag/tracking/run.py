"""The run context a stage logs into: `stage_run` and the `StageRun` it yields.

Everything is buffered in memory (artifacts as hard-link snapshots) and sent in one burst when
the stage's `with` block exits, so logging never slows or breaks the stage; if the store fails,
the run goes to the spool instead (`rulerag.tracking.spool`).

Every stage that starts leaves one run, FAILED or KILLED when it did not finish (a process
killed outright, SIGKILL, by the next stage that starts: `rulerag.tracking.open_runs`):

* `stage_process_run` opens the run of a stage process from its first line, before params and
  inputs are read, so an error there is recorded too; the stage's own `stage_run` adopts it
  (one run per stage, named and tagged as the stage says), and a process that never opens one
  and ends normally (a torchrun launcher) sends nothing.
* SIGTERM (a scheduler, a CI timeout, dvc's death via PR_SET_PDEATHSIG) becomes
  `StageTerminated`, a KeyboardInterrupt, in the stage's main thread while a run is open: the
  `with` blocks unwind (staged outputs are discarded, `rulerag.io.staged_outputs`) and the
  run is recorded KILLED.

Sending a run has one wall-clock deadline for all its calls to the store
(RULERAG_TRACKING_TIMEOUT, 300 s): MLflow's own timeout bounds each read, and a store that
trickles held a finished stage, deaf to SIGTERM, for minutes. Past the deadline, or at a
SIGTERM while it is being sent, the run goes to the spool whole and the stage ends.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from rulerag.deadline import DeadlineExceeded, deadline_seconds, within
from rulerag.redact import redact_secrets, redact_url
from rulerag.tracking.config import resolve_tracking_uri, spool_dir, tracking_project
from rulerag.tracking.identity import run_tags
from rulerag.tracking.inputs import dataset_input
from rulerag.tracking.names import (
    MAX_TAG_VALUE_LENGTH,
    TAG_ERROR,
    TAG_STAGE,
    TAG_STAGE_INSTANCE,
    display_name,
    experiment_name,
    flatten_params,
    is_param_like,
    sanitize_name,
    truncate,
)
from rulerag.tracking.open_runs import close_marker, open_marker, sweep_killed
from rulerag.tracking.record import RunRecord, now_ms
from rulerag.tracking.spool import count_spooled, new_staging_dir, spool_run
from rulerag.tracking.store import MODELS_DIRNAME, SUMMARY_DIRNAME, discard_partial, send_run

logger = logging.getLogger(__name__)

__all__ = [
    "SEND_DEADLINE_ENV",
    "StageRun",
    "StageTerminated",
    "stage_process_run",
    "stage_run",
    "stop_on_sigterm",
]

#: the wall-clock bound on sending one run, every call to the store together (seconds)
SEND_DEADLINE_ENV = "RULERAG_TRACKING_TIMEOUT"
SEND_DEADLINE_S = 300.0


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
        self._record = RunRecord(
            experiment=experiment_name(dataset),
            run_name=display_name(f"{stage}@{dataset}"),
            stage=stage,
            dataset=dataset,
            start_time=now_ms(),
        )
        self._record.tags.update(run_tags(stage, dataset, self._project_dir))
        self._staging: Path | None = None
        self._closed = False
        self._spooled = False
        self._spool_path: Path | None = None
        self._run_id: str | None = None
        #: taken over by the stage's own `stage_process_run`'s run
        self._adopted = False
        #: the open-run marker (`open_runs`): a SIGKILL leaves it for the next stage to find
        self._marker: Path | None = None

    # -- what stages call ---------------------------------------------------------------------

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Record params; nested mappings are flattened to dotted keys (see `flatten_params`)."""
        self._check_open()
        self._record.params.update(flatten_params(params))

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Record metrics at `step` (0 when None); names are sanitised (`recall@10` ->
        `recall_at_10`). A value that is not a number raises here, where the bug is. A count or
        setting among them (`names.PARAM_LIKE_METRICS`: `queries`, `seed`) becomes a param."""
        self._check_open()
        timestamp = now_ms()
        for key, value in metrics.items():
            try:
                number = float(value)
            except (TypeError, ValueError) as err:
                raise TypeError(f"metric {key!r} is not a number: {value!r}") from err
            if is_param_like(key):
                shown = int(number) if number.is_integer() else number
                self._record.params[sanitize_name(key)] = str(shown)
                continue
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
        champion_metric: str | None = None,
        higher_is_better: bool = True,
    ) -> None:
        """Record an MLflow model (`save(folder)` writes it, e.g. with a flavour's
        `save_model`, see `rulerag.tracking.registry`) named `artifact_path`: when the run is
        sent it becomes an MLflow 3 logged model of the run (the experiment's Models tab; its
        MLmodel names the run and the model id) and a new version of `registered_name`, tagged
        with the run's last metric values. `champion_metric` (a metric this run logs) moves
        the version alias `champion` to the new version when it beats the current champion's
        (`rulerag.tracking.models.moves_champion`). The model is written now, so it is
        snapshotted like any artifact."""
        self._check_open()
        dest = self._model_dest(artifact_path)
        if dest.exists():
            raise ValueError(f"artifact path {artifact_path!r} is already used in this run")
        dest.parent.mkdir(parents=True, exist_ok=True)
        save(dest)
        self._record.models.append(
            {
                "artifact_path": dest.relative_to(self._model_dest(None)).as_posix(),
                "name": registered_name,
                "description": description,
                "champion_metric": sanitize_name(champion_metric) if champion_metric else None,
                "higher_is_better": higher_is_better,
            }
        )

    def log_input(self, path: Path, context: str, name: str | None = None) -> None:
        """Record a data file the stage read as an MLflow run input (the runs table's Dataset
        column): `name` (default: the file's stem), its MD5 digest (DVC's, so dvc.lock and the
        run agree), its path as the source, its row count for a JSON-lines file, and `context`
        (`train`, `test`, ...). Read now, so a later change of the file is not recorded."""
        self._check_open()
        self._record.inputs.append(dataset_input(Path(path), context, name))

    def log_pipeline_params(self, params: Mapping[str, Any]) -> None:
        """Record the whole pipeline's params (params.yaml as read), for the pipeline run's
        parent run (`rulerag.tracking.parent`), flattened as `log_params` does."""
        self._check_open()
        self._record.pipeline_params.update(flatten_params(params))

    def log_summary(
        self, metrics: Mapping[str, float], artifacts: tuple[Path, ...] | list[Path] = ()
    ) -> None:
        """Record the pipeline's headline metrics and report files for its parent run (the
        report stage's grid), sent with this run: one row per pipeline run to compare."""
        self._check_open()
        for key, value in metrics.items():
            try:
                number = float(value)
            except (TypeError, ValueError) as err:
                raise TypeError(f"summary metric {key!r} is not a number: {value!r}") from err
            self._record.summary_metrics.append({"key": sanitize_name(key), "value": number})
        for artifact in artifacts:
            src = Path(artifact)
            if not src.is_file():
                raise FileNotFoundError(f"summary artifact not found: {src}")
            staging = self._artifact_dest(None).parent
            _link_or_copy(src, staging / SUMMARY_DIRNAME / src.name)

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
            self._record.tags[sanitize_name(key)] = truncate(value, MAX_TAG_VALUE_LENGTH)
            if key == TAG_STAGE_INSTANCE:  # `rulerag_ft (generate)`, not nine alike
                self._record.run_name = truncate(display_name(value), MAX_TAG_VALUE_LENGTH)
        if TAG_STAGE_INSTANCE in tags and self._marker is not None:
            self._mark()

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

    def _adopt(self, stage: str) -> None:
        """Become the run of `stage_run(stage, ...)`: named and tagged as a run opened there
        (`<stage>@<dataset>`, until the stage names its instance), its start time kept."""
        self._check_open()
        self._adopted = True
        record = self._record
        record.stage = stage
        instance = f"{stage}@{record.dataset}"
        record.run_name = truncate(display_name(instance), MAX_TAG_VALUE_LENGTH)
        record.tags[TAG_STAGE] = truncate(stage, MAX_TAG_VALUE_LENGTH)
        record.tags[TAG_STAGE_INSTANCE] = truncate(instance, MAX_TAG_VALUE_LENGTH)
        self._mark()

    def _mark(self) -> None:
        """Leave (or bring up to date) the run's open-run marker (`open_runs`)."""
        close_marker(self._marker)
        self._marker = open_marker(self._project_dir, self._record)

    def _discard(self) -> None:
        """Close without sending: the process logged nothing of its own."""
        close_marker(self._marker)
        self._closed = True
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"stage run {self._record.run_name} is already closed")

    def _artifact_dest(self, relative: str | None) -> Path:
        """`relative` inside the staging artifacts folder; refuses paths that escape it."""
        return self._staged("artifacts", relative)

    def _model_dest(self, relative: str | None) -> Path:
        """`relative` inside the staging folder of saved models (uploaded to logged models)."""
        return self._staged(MODELS_DIRNAME, relative)

    def _staged(self, folder: str, relative: str | None) -> Path:
        """`relative` inside a folder of the staging folder; refuses paths that escape it."""
        if self._staging is None:
            self._staging = new_staging_dir(self._project_dir)
            (self._staging / "artifacts").mkdir()
        base = self._staging / folder
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
            close_marker(self._marker)
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
        record.end_time = now_ms()
        if error is not None:
            record.tags[TAG_ERROR] = truncate(
                redact_secrets(f"{type(error).__name__}: {error}"), MAX_TAG_VALUE_LENGTH
            )
        created: list[str] = []
        store = redact_url(self._tracking_uri)
        try:
            self._run_id = within(
                deadline_seconds(SEND_DEADLINE_ENV, SEND_DEADLINE_S),
                lambda: send_run(
                    record, self._staging, self._tracking_uri, self._project_dir, created
                ),
                f"sending run {record.run_name} to the MLflow store {store}",
                stop=_SIGTERM.asked,
            )
        except Exception as exc:
            # a slow store is not asked again to delete what it half-logged (the replay
            # deletes it, `store.discard_partial_copies`); a store that failed fast is
            partial = (
                list(created)
                if isinstance(exc, DeadlineExceeded)
                else discard_partial(created, self._tracking_uri)
            )
            target = spool_run(
                record, self._staging, self._project_dir, self._tracking_uri, exc, partial
            )
            if target is not None:
                self._staging = None
                self._spooled = True
                self._spool_path = target
            return
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
        waiting = count_spooled(self._project_dir)
        if waiting:
            logger.info(
                "%d spooled MLflow run(s) wait in %s; send them with "
                "`python -m rulerag.tracking replay`",
                waiting,
                spool_dir(self._project_dir),
            )


def _exit_status(error: BaseException | None) -> str:
    if error is None:
        return "FINISHED"
    if isinstance(error, SystemExit) and error.code in (0, None):
        return "FINISHED"
    if isinstance(error, KeyboardInterrupt):
        return "KILLED"
    return "FAILED"


# -- SIGTERM as an exception -------------------------------------------------------------------


class StageTerminated(KeyboardInterrupt):
    """The stage was asked to stop (SIGTERM): raised in its main thread, so every `with` block
    unwinds (nothing half-written is published) and the run is recorded KILLED.

    A KeyboardInterrupt, not an Exception: library code that catches `Exception` to fall back
    (a cache, an optional backend) must not swallow a stop request.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class _Sigterm:
    """The process's SIGTERM handler while stage runs are open (main thread only: Python runs
    signal handlers there, and only there may they be installed)."""

    def __init__(self) -> None:
        self.depth = 0  # nested `raising` blocks
        self.deferring = 0
        self.pending: int | None = None
        self.stopping = False

    def asked(self) -> bool:
        """Whether a SIGTERM is being held (`deferred`): a run being sent stops waiting on the
        store (`deadline.within`) and goes to the spool."""
        return self.pending is not None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:  # already unwinding: a second SIGTERM (dvc's group, then dvc's
            return  # death) must not cut the clean-up short
        if self.deferring:  # a run is being sent: finish that first (`deferred`)
            self.pending = signum
            return
        self.stopping = True
        raise StageTerminated(signum)

    @contextlib.contextmanager
    def raising(self) -> Iterator[None]:
        """SIGTERM raises `StageTerminated` in the block, once; the previous handler comes
        back after it (nested blocks restore each other's)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGTERM, self.handle)
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if not self.depth:
                self.stopping, self.pending = False, None
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A SIGTERM in the block is held and raised as `StageTerminated` right after it, so a
        run being sent (or spooled) is never cut in half."""
        self.deferring += 1
        try:
            yield
        finally:
            self.deferring -= 1
        if not self.deferring and self.pending is not None:
            signum, self.pending = self.pending, None
            self.stopping = True
            raise StageTerminated(signum)


_SIGTERM = _Sigterm()


def stop_on_sigterm() -> contextlib.AbstractContextManager[None]:
    """SIGTERM raises `StageTerminated` in the block (once: later ones are ignored while it
    unwinds), as inside `stage_run` and `stage_process_run`; for a stage process from its
    first line (`pipeline_steps.common.run_stage`), whether or not a run could be opened."""
    return _SIGTERM.raising()


#: the run `stage_process_run` opened and no `stage_run` has adopted yet
_PROCESS_RUN: contextvars.ContextVar[StageRun | None] = contextvars.ContextVar(
    "rulerag_process_run", default=None
)


def _close(run: StageRun, error: BaseException | None) -> None:
    """Send the run with the block's outcome, a SIGTERM meanwhile held until it is sent."""
    with _SIGTERM.deferred():
        run._finish(_exit_status(error), error)


@contextlib.contextmanager
def stage_process_run(
    stage: str,
    dataset: str,
    *,
    project_dir: Path,
    instance: str | None = None,
    tracking_uri: str | None = None,
) -> Iterator[StageRun]:
    """The run of a stage process, open from its first line (`pipeline_steps.common.run_stage`
    opens it as soon as it knows the stage and dataset, before params and inputs are read).

    The stage's own `stage_run` for `dataset` adopts it: then it is that run (named, tagged
    and sent by it, its start time this one's). If the block raises before (a params error, a
    usage error, an unreadable input) the run is recorded FAILED with the error's message
    (KILLED for SIGTERM or Ctrl-C), named after `stage` and `instance` (the DVC stage instance,
    when known). A block that ends normally without adopting it sends nothing: the process
    had no run of its own (a torchrun launcher, a non-main rank). SIGTERM raises
    `StageTerminated` throughout.
    """
    project_dir = tracking_project(project_dir)
    run = StageRun(
        stage,
        dataset,
        project_dir=project_dir,
        tracking_uri=resolve_tracking_uri(project_dir, tracking_uri),
    )
    sweep_killed(run._project_dir, run.tracking_uri)
    if instance:
        run.set_tags({TAG_STAGE_INSTANCE: instance})
    run._mark()
    token = _PROCESS_RUN.set(run)
    with _SIGTERM.raising():
        try:
            yield run
        except BaseException as error:
            _PROCESS_RUN.reset(token)
            if not run._closed and not run._adopted and _exit_status(error) == "FINISHED":
                run._discard()  # `--help`, sys.exit(0): as a normal end
            elif not run._closed:
                _close(run, error)
            raise
        _PROCESS_RUN.reset(token)
        if not run._closed:
            run._discard()


def _adoptable(dataset: str, project_dir: Path, tracking_uri: str) -> StageRun | None:
    """The process's open run, if `stage_run(..., dataset)` may take it over."""
    run = _PROCESS_RUN.get()
    if run is None or run._closed or run._adopted:
        return None
    same = (run._record.dataset, run._project_dir, run.tracking_uri) == (
        dataset,
        project_dir.resolve(),
        tracking_uri,
    )
    return run if same else None


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
    Ctrl-C or SIGTERM, which raises `StageTerminated` in the block) and the exception
    propagates. If the store fails, the run is spooled (see `StageRun.spooled`) and the block's
    outcome is unchanged. Inside `stage_process_run` for the same dataset, this is that run.
    """
    project_dir = tracking_project(project_dir)
    uri = resolve_tracking_uri(project_dir, tracking_uri)
    run = _adoptable(dataset, project_dir, uri)
    if run is not None:
        run._adopt(stage)
    else:
        run = StageRun(stage, dataset, project_dir=project_dir, tracking_uri=uri)
        sweep_killed(run._project_dir, uri)
        run._mark()
    if params:
        run.log_params(params)
    with _SIGTERM.raising():
        try:
            yield run
        except BaseException as error:
            _close(run, error)
            raise
        _close(run, None)
