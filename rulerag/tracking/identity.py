"""Who and what made a run: the pipeline execution it belongs to, the git commit, the user.

Runs of one pipeline execution share the tag `rulerag.pipeline_run`, so one `make run`, one
`dvc repro` or one Airflow DAG run can be found as a whole. The id comes from the environment
when someone sets it, else from the `dvc` process the stage runs under, so that nobody has to
pass it down through DVC's stage commands.
"""

from __future__ import annotations

import getpass
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from rulerag.tracking.links import airflow_task
from rulerag.tracking.names import (
    MAX_TAG_VALUE_LENGTH,
    TAG_DATASET,
    TAG_GIT_COMMIT,
    TAG_NOTE,
    TAG_PIPELINE_RUN,
    TAG_SOURCE_NAME,
    TAG_SOURCE_TYPE,
    TAG_STAGE,
    TAG_STAGE_INSTANCE,
    TAG_USER,
    truncate,
)

__all__ = [
    "PIPELINE_RUN_ENV",
    "current_user",
    "git_commit",
    "pipeline_run_id",
    "origin_tags",
    "run_tags",
    "runs_dvc",
    "source_name",
]

#: Env var naming the pipeline execution (set by `make run` and by Airflow to the DAG run id).
PIPELINE_RUN_ENV = "RULERAG_PIPELINE_RUN"


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


def git_commit(project_dir: Path) -> str | None:
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


def current_user() -> str | None:
    """The login name, or None where the user database has no entry (some containers)."""
    try:
        return getpass.getuser()
    except Exception:
        return None


def source_name(project_dir: Path, argv0: str | None = None) -> str:
    """What MLflow's Source column names: the script this process runs, relative to the project
    (`pipeline_steps/generate.py` for `python -m pipeline_steps.generate`), else its file name."""
    script = Path(sys.argv[0] if argv0 is None else argv0)
    try:
        return script.resolve().relative_to(Path(project_dir).resolve()).as_posix()
    except (OSError, ValueError):  # a DAG task's workspace, tracking into the main project
        return "/".join(part for part in (script.parent.name, script.name) if part) or "python"


def origin_tags(project_dir: Path, *, task_note: bool = True) -> dict[str, str]:
    """Where a run comes from: the git commit and user where known, the source (MLflow's
    `mlflow.source.*`: the script, `JOB` under Airflow and `LOCAL` else) and, under Airflow,
    the links to the DAG run (and task, when `task_note`) with the description saying them."""
    task = airflow_task()
    tags = {
        TAG_SOURCE_NAME: source_name(project_dir),
        TAG_SOURCE_TYPE: "JOB" if task else "LOCAL",
    }
    commit = git_commit(project_dir)
    if commit:
        tags[TAG_GIT_COMMIT] = commit
    user = current_user()
    if user:
        tags[TAG_USER] = user
    if task is not None:
        tags.update(task.tags())
        tags[TAG_NOTE] = task.note(task=task_note)
    return tags


def run_tags(stage: str, dataset: str, project_dir: Path) -> dict[str, str]:
    """The tags every stage run starts with: pipeline run, stage, dataset, stage instance
    (`<stage>@<dataset>` until the stage names its instance) and `origin_tags`, each cut to
    MLflow's tag length."""
    tags = {
        TAG_PIPELINE_RUN: pipeline_run_id(),
        TAG_STAGE: stage,
        TAG_DATASET: dataset,
        TAG_STAGE_INSTANCE: f"{stage}@{dataset}",
        **origin_tags(project_dir),
    }
    return {key: truncate(value, MAX_TAG_VALUE_LENGTH) for key, value in tags.items()}
