"""The DAG on the CeleryExecutor with a real broker, as docker/compose.yaml means it to run, on
this machine (rulerag.orchestration.cluster): Postgres, Redis, the scheduler and two Celery
workers with one slot each, workspaces mode over a local-path DVC remote.

The first two stages of two datasets run through it; a worker is killed (SIGKILL, its whole
process group: the machine is gone) while a stage runs, and the scheduler retries that task on
the other worker. The project after `collect` is compared byte for byte with a serial
`dvc repro` of the same stage instances in another copy.

Minutes of wall time (a cluster start, a serial run, a heartbeat timeout and a retry delay):
`make test-cluster` runs it, `make test` deselects it (marker `cluster`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from rulerag.orchestration.cluster import Cluster
from rulerag.orchestration.project_copy import copy_project, cut_project
from tests.support.serial_compare import dag_task_id, data_digests, lock_entries, serial_repro

pytestmark = [pytest.mark.slow, pytest.mark.data, pytest.mark.cluster,
              pytest.mark.xdist_group("airflow")]  # fmt: skip

BIN = Path(sys.executable).parent
DATASETS = ["icews14", "wiki"]
STAGES = ["ingest", "mine_rules"]
INSTANCES = [f"{stage}@{name}" for stage in STAGES for name in DATASETS]
#: the stage whose worker is killed while it runs (it takes tens of seconds)
VICTIM = "mine_rules"


def base_env(kg_mirror: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHONPATH"))}
    env.update(
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        RULERAG_DATA_DIR=str(kg_mirror),
        DVC_NO_ANALYTICS="1",
        # a dead worker's task is failed (then retried) after 20 s without heartbeats
        AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT="20",
        AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL="5",
    )
    return env


class Metadata:
    """Reads Airflow's metadata database (the cluster's Postgres)."""

    def __init__(self, cluster: Cluster) -> None:
        self.conn = cluster.metadata_connection()

    def rows(self, sql: str, *args: Any) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()


def worker_of(cluster: Cluster, celery_id: str) -> str:
    """The worker whose log shows Celery task `celery_id` received."""
    found = [
        name
        for name in cluster.worker_names()
        if f"[{celery_id}] received" in (cluster.logs / f"{name}.log").read_text(errors="replace")
    ]
    assert len(found) == 1, (celery_id, found)
    return found[0]


def stage_running(workspaces: Path, instance: str) -> bool:
    """Whether the stage script of `instance` runs now, in a workspace of the cluster."""
    stage, name = instance.split("@")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
            cwd = Path(os.readlink(f"/proc/{entry.name}/cwd"))
        except OSError:
            continue
        if (
            f"pipeline_steps.{stage}".encode() in cmdline
            and cwd.parent == workspaces
            and (cwd.name.startswith(f"{stage}-{name}-"))
        ):
            return True
    return False


def test_celery_cluster_runs_two_datasets_like_a_serial_repro(
    kg_mirror: Path, tmp_path: Path
) -> None:
    env = base_env(kg_mirror)

    serial, serial_s = serial_repro(tmp_path / "serial", STAGES, DATASETS, env)

    project = copy_project(tmp_path / "project")
    cut_project(project, STAGES, DATASETS)
    # Postgres runs as the user `postgres` under root: its folder must be reachable, which
    # pytest's private tmp_path is not
    state = Path(tempfile.mkdtemp(prefix="rulerag-cluster-"))
    cluster = Cluster(project, state, workers=2, base_env=env)
    try:
        cluster.up(echo=print)
        run_s, killed = run_dag_killing_a_worker(cluster)
    finally:
        cluster.down(echo=print)
        status = cluster.status()
        remaining = {k: v for k, v in status.items() if k != "ports" and v}
        if not remaining:
            shutil.rmtree(state, ignore_errors=True)
    assert not remaining, f"still running after down: {remaining} (state kept in {state})"
    print(f"serial dvc repro: {serial_s:.1f} s; Celery DAG run (with the kill): {run_s:.1f} s")

    # nothing lost: the project equals the serial run, byte for byte, and DVC agrees
    assert data_digests(project) == data_digests(serial)
    assert lock_entries(project, INSTANCES) == lock_entries(serial, INSTANCES)
    status_out = subprocess.run([str(BIN / "dvc"), "status", "--json", *INSTANCES], cwd=project,
                                env=env, capture_output=True, text=True, check=True)  # fmt: skip
    assert json.loads(status_out.stdout) == {}, status_out.stdout
    # the killed try's workspace stays (nothing ran its clean-up); every other one is gone
    left = sorted(p.name for p in (state / "workspaces").iterdir()) if state.exists() else []
    assert all(name.startswith(f"{killed.replace('@', '-')}-") for name in left), left


def run_dag_killing_a_worker(cluster: Cluster) -> tuple[float, str]:
    """Trigger the DAG for STAGES, SIGKILL the worker of the first VICTIM task seen running,
    wait for the run; check the spans and the retry. Returns the run's seconds and the
    instance whose worker was killed."""
    airflow_env = cluster.airflow_env()
    airflow = str(BIN / "airflow")
    trigger = [airflow, "dags", "trigger", "rulerag", "--run-id", "cluster-test",
               "--conf", "{}"]  # fmt: skip
    deadline = time.monotonic() + 180
    while True:  # until the DAG processor has parsed the DAG
        done = subprocess.run(trigger, env=airflow_env, capture_output=True, text=True)
        if done.returncode == 0:
            break
        assert time.monotonic() < deadline, done.stdout[-3000:] + done.stderr[-3000:]
        time.sleep(3)

    db = Metadata(cluster)
    workspaces = cluster.state_dir / "workspaces"
    killed: tuple[str, str] | None = None  # (instance, worker)
    deadline = time.monotonic() + 900
    state = None
    while time.monotonic() < deadline:
        ((state,),) = db.rows("SELECT state FROM dag_run WHERE run_id = 'cluster-test'")
        if state in ("success", "failed"):
            break
        if killed is None:
            for instance in (f"{VICTIM}@{name}" for name in DATASETS):
                row = db.rows(
                    "SELECT external_executor_id FROM task_instance WHERE run_id = "
                    "'cluster-test' AND task_id = %s AND state = 'running'", dag_task_id(instance),
                )  # fmt: skip
                if row and row[0][0] and stage_running(workspaces, instance):
                    time.sleep(2)  # well into the stage
                    worker = worker_of(cluster, row[0][0])
                    cluster.kill_worker(worker)
                    killed = (instance, worker)
                    break
        time.sleep(1)
    assert state == "success", (state, tail_logs(cluster))
    assert killed is not None, "no mine_rules task was seen running"

    tis = {
        task: (state, tries, start, end, celery_id)
        for task, state, tries, start, end, celery_id in db.rows(
            "SELECT task_id, state, try_number, start_date, end_date, external_executor_id "
            "FROM task_instance WHERE run_id = 'cluster-test'"
        )
    }
    for instance in INSTANCES:
        assert tis[dag_task_id(instance)][0] == "success", (instance, tis[dag_task_id(instance)])
    assert tis["collect"][0] == "success"
    # both ingest tasks ran at the same time, on different workers
    first = [tis[dag_task_id(f"ingest@{name}")] for name in DATASETS]
    assert max(t[2] for t in first) < min(t[3] for t in first), first
    assert worker_of(cluster, first[0][4]) != worker_of(cluster, first[1][4])
    # the killed task: try 1 on the killed worker, try 2 (the retry) on the other
    instance, worker = killed
    victim = tis[dag_task_id(instance)]
    assert victim[1] == 2, victim
    ((first_try_id, first_state),) = db.rows(
        "SELECT external_executor_id, state FROM task_instance_history WHERE run_id = "
        "'cluster-test' AND task_id = %s AND try_number = 1", dag_task_id(instance),
    )  # fmt: skip
    assert first_state == "failed", first_state
    assert worker_of(cluster, first_try_id) == worker
    assert worker_of(cluster, victim[4]) != worker
    ((start, end),) = db.rows(
        "SELECT start_date, end_date FROM dag_run WHERE run_id = 'cluster-test'"
    )
    db.conn.close()
    return (end - start).total_seconds(), instance


def tail_logs(cluster: Cluster) -> str:
    return "\n".join(
        f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}"
        for log in sorted(cluster.logs.glob("*.log"))
    )
