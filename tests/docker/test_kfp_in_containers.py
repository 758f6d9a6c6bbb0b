"""The Kubeflow pipeline run by `kfp.local.DockerRunner`: every task in a container of the CPU
image `make images` built (the project, the KG mirror, the workspaces and a local-path DVC
remote bind-mounted at their host paths), and the project afterwards equals a serial `dvc
repro` byte for byte, as the subprocess runner's test (tests/pipeline/test_kfp_pipeline.py)
checks for tasks run as processes here.

Marker `docker` (`make test-docker`).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from rulerag.orchestration.project_copy import copy_project, cut_project
from tests.pipeline.test_kfp_pipeline import BIN, KFP_PYTHON, kfp, kfp_env
from tests.support.compose_stack import require_docker
from tests.support.serial_compare import data_digests, lock_entries

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.data,
              pytest.mark.xdist_group("docker")]  # fmt: skip


def test_the_kfp_pipeline_in_containers_equals_a_serial_dvc_repro(
    kg_mirror: Path, tmp_path: Path
) -> None:
    require_docker()
    assert KFP_PYTHON.is_file(), "no KFP SDK venv: make setup-kfp"
    dataset, stages = "nell995", ["ingest", "mine_rules"]
    names = [f"{stage}@{dataset}" for stage in stages]
    env = kfp_env(RULERAG_DATA_DIR=str(kg_mirror))

    serial = copy_project(tmp_path / "serial")
    cut_project(serial, stages, [dataset])
    done = subprocess.run([str(BIN / "dvc"), "repro", "--single-item", *names], cwd=serial,
                          env={**env, "MLFLOW_TRACKING_URI": f"sqlite:///{serial / 'mlflow.db'}"},
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    project = copy_project(tmp_path / "project")
    cut_project(project, stages, [dataset])
    remote = tmp_path / "remote"
    remote.mkdir()
    subprocess.run([str(BIN / "dvc"), "remote", "add", "-d", "--local", "store", str(remote)],
                   cwd=project, env=env, check=True, capture_output=True)  # fmt: skip
    pipeline = tmp_path / "pipeline.yaml"
    kfp(["compile", "--output", str(pipeline)], project, env)
    workspaces = tmp_path / "workspaces"
    workspaces.mkdir()
    run_env = {**env, "MLFLOW_TRACKING_URI": f"sqlite:///{project / 'mlflow.db'}",
               "RULERAG_WORKSPACE_ROOT": str(workspaces)}  # fmt: skip
    timings = tmp_path / "timings.json"
    started = time.monotonic()
    out = kfp(["run-local", "--runner", "docker", "--mount", str(remote), "--pipeline",
               str(pipeline), "--pipeline-root", str(tmp_path / "kfp"), "--timings",
               str(timings)], project, run_env, timeout=900)  # fmt: skip
    print(f"kfp.local DockerRunner run: {time.monotonic() - started:.1f} s")
    summary = json.loads(timings.read_text())
    assert summary["ran"] == summary["collected"] == sorted(names)
    assert "Found image 'rulerag-cpu:latest'" in out  # the tasks ran in the built image

    assert data_digests(project) == data_digests(serial) and data_digests(serial)
    assert lock_entries(project, names) == lock_entries(serial, names)
    status = subprocess.run([str(BIN / "dvc"), "status", "--json"], cwd=project, env=env,
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert json.loads(status.stdout) == {}, status.stdout
    assert not list(workspaces.iterdir())
