"""What the tests of distributed runs (a cluster, the compose stack, kfp.local, workspaces)
compare with: a serial `dvc repro` of the same stage instances in another project copy, every
data file byte for byte and the instances' dvc.lock entries; and the Airflow task id the DAG
gives an instance."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from rulerag.orchestration.project_copy import copy_project, cut_project

__all__ = ["dag_task_id", "data_digests", "lock_entries", "serial_repro"]

BIN = Path(sys.executable).parent


def serial_repro(
    folder: Path, stages: Sequence[str], datasets: Sequence[str], env: Mapping[str, str]
) -> tuple[Path, float]:
    """A project copy at `folder`, cut to `stages` of `datasets`, after a serial
    `dvc repro --single-item` of their stage instances (which must succeed); and the seconds
    the run took."""
    project = copy_project(folder)
    cut_project(project, stages, datasets)
    instances = [f"{stage}@{name}" for stage in stages for name in datasets]
    started = time.monotonic()
    done = subprocess.run([str(BIN / "dvc"), "repro", "--single-item", *instances], cwd=project,
                          env=dict(env), capture_output=True, text=True, timeout=900)  # fmt: skip
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return project, seconds


def data_digests(project: Path) -> dict[str, str]:
    """Each file under `project`/data (path relative to `project`) -> its SHA-256."""
    return {
        str(p.relative_to(project)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((project / "data").rglob("*"))
        if p.is_file()
    }


def lock_entries(project: Path, names: Iterable[str]) -> dict[str, Any]:
    """The dvc.lock entries of the stage instances `names` (a KeyError where one is missing)."""
    stages = yaml.safe_load((project / "dvc.lock").read_text(encoding="utf-8"))["stages"]
    return {name: stages[name] for name in names}


def dag_task_id(instance: str) -> str:
    """The DAG's task id of a stage instance: `mine_rules@icews14` -> `icews14.mine_rules`
    (the dataset's task group, then the stage)."""
    stage, name = instance.split("@")
    return f"{name}.{stage}"
