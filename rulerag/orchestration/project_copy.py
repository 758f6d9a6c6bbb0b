"""A disposable copy of the project, for running DVC, Airflow, Kubeflow Pipelines or the
Celery cluster somewhere they cannot harm the real workspace (the tests and benchmarks that
run them), and where the local KG mirror such a copy ingests from is.

The copy is what a clone of the work tree as it is would hold: the tracked and
untracked-but-not-ignored files, committed as a fresh git repository (workspaces and run copies
clone HEAD), without data, venvs or caches.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import yaml

__all__ = ["PROJECT_DIR", "copy_project", "cut_project", "kg_mirror_dir", "project_files"]

#: this checkout
PROJECT_DIR = Path(__file__).resolve().parents[2]
_GIT = ["git", "-c", "user.email=test@rulerag", "-c", "user.name=test"]


def project_files(source: Path = PROJECT_DIR) -> list[str]:
    """`source`'s tracked and untracked-but-not-ignored files, relative to its root (what a
    clone or a commit would hold), sorted. Raises CalledProcessError outside a git checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=source, check=True, capture_output=True,
    ).stdout.decode()  # fmt: skip
    return sorted(p for p in listed.split("\0") if p and (source / p).is_file())


def copy_project(dest: Path, source: Path = PROJECT_DIR, keep_lock: bool = False) -> Path:
    """Copy `source`'s files (`project_files`) into `dest` as a fresh git repository, so DVC
    and Airflow can run on it without touching the real workspace. Not dvc.lock unless
    `keep_lock`: a fresh clone has none, and the one a local `make run` left names outputs the
    copy lacks (a `dvc push` in the copy then fails on them)."""
    for rel in project_files(source):
        if rel == "dvc.lock" and not keep_lock:
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / rel, target)
    dvc_config = source / ".dvc" / "config"
    if dvc_config.is_file():
        (dest / ".dvc").mkdir(exist_ok=True)
        shutil.copy2(dvc_config, dest / ".dvc" / "config")
    subprocess.run([*_GIT, "init", "-q"], cwd=dest, check=True)
    subprocess.run([*_GIT, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*_GIT, "commit", "-q", "-m", "copy"], cwd=dest, check=True)
    return dest


def cut_project(project: Path, stages: Sequence[str], datasets: Sequence[str]) -> None:
    """A project copy's dvc.yaml cut to `stages` and its params.yaml selecting `datasets`,
    committed (workspaces clone HEAD). The cut keeps the Airflow DAG to these stages' tasks: a
    run conf's `stages` would still start a task for every later stage, only for it to skip
    itself (Airflow runs whatever is downstream of a branch's choice)."""
    dvc_yaml = project / "dvc.yaml"
    data = yaml.safe_load(dvc_yaml.read_text(encoding="utf-8"))
    data["stages"] = {name: data["stages"][name] for name in stages}
    dvc_yaml.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    params = project / "params.yaml"
    listed = "".join(f"  - {name}\n" for name in datasets)
    text, count = re.subn(
        r"(?m)^datasets:\n(  - .*\n)+", f"datasets:\n{listed}", params.read_text(encoding="utf-8")
    )
    if count != 1:
        raise ValueError(f"{params}: no `datasets:` list")
    params.write_text(text, encoding="utf-8")
    message = f"{', '.join(stages)} of {', '.join(datasets)}"
    subprocess.run([*_GIT, "commit", "-q", "-am", message], cwd=project, check=True)


def kg_mirror_dir() -> Path:
    """The local KG mirror: ``$RULERAG_DATA_DIR`` or ``<checkout>/../shared/kg``."""
    from rulerag.kg.ingest import MIRROR_ENV  # here: the KG code imports pandas

    configured = os.environ.get(MIRROR_ENV)
    if configured:
        return Path(configured)
    return PROJECT_DIR.parent / "shared" / "kg"  # outside data/<dataset>/
