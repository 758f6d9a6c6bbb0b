"""docker/compose.yaml's stack for real, from the images `make images` built: Postgres, Redis,
the S3 remote, the MLflow server, Airflow's API server, scheduler and DAG processor, and two
Celery workers. The first two stages of two datasets run through the DAG in workspaces mode;
a worker container is killed (SIGKILL, its restart policy off: the machine is gone) while a
stage runs there, and the scheduler retries that task on the other worker. The project after
`collect` equals a serial `dvc repro` of the same instances byte for byte; the outputs are in
the S3 remote, the stage runs in the stack's MLflow server with their links back to the
Airflow tasks; `compose down` leaves no container, network or volume.

Marker `docker` (`make test-docker`): minutes, an engine and the images.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from rulerag.orchestration.local_airflow import RestApi, task_instances, wait_for_run
from rulerag.orchestration.project_copy import copy_project, cut_project
from tests.support.compose_stack import docker, require_docker, running_stack
from tests.support.serial_compare import dag_task_id, data_digests, lock_entries, serial_repro

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.data,
              pytest.mark.xdist_group("docker")]  # fmt: skip

BIN = Path(sys.executable).parent
DATASETS = ["icews14", "wiki"]
STAGES = ["ingest", "mine_rules"]
INSTANCES = [f"{stage}@{name}" for stage in STAGES for name in DATASETS]
VICTIM = "mine_rules"  # the stage whose worker is killed while it runs (tens of seconds)
RUN_ID = "stack-test"


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_the_compose_stack_runs_two_datasets_on_two_workers_like_a_serial_repro(
    kg_mirror: Path, tmp_path: Path
) -> None:
    require_docker()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "RULERAG_DATA_DIR": str(kg_mirror), "DVC_NO_ANALYTICS": "1"}  # fmt: skip
    serial, serial_s = serial_repro(tmp_path / "serial", STAGES, DATASETS, env)

    project = copy_project(tmp_path / "project")
    cut_project(project, STAGES, DATASETS)
    name = f"rulerag-stack-{os.getpid()}"
    started = time.monotonic()
    with running_stack(
        project, name, scale={"worker": 2}, RULERAG_DATA_DIR=str(kg_mirror),
        RULERAG_MIRROR_MOUNT=str(kg_mirror), RULERAG_HEARTBEAT_TIMEOUT="20",
    ) as stack:  # fmt: skip
        up_s = time.monotonic() - started
        password = json.loads(stack.compose(
            "exec", "-T", "airflow-apiserver", "cat",
            "/home/rulerag/airflow/simple_auth_manager_passwords.json.generated",
        ))  # fmt: skip
        user, secret = next(iter(password.items()))
        api = RestApi.login(stack.url("airflow"), user, secret)
        deadline = time.monotonic() + 300
        while not api.ready("/dags/rulerag"):  # the DAG processor's first parse
            assert time.monotonic() < deadline, stack.compose("logs", "--tail", "50")
            time.sleep(2)
        api.call("PATCH", "/dags/rulerag", {"is_paused": False})
        api.call("POST", "/dags/rulerag/dagRuns",
                 {"dag_run_id": RUN_ID, "logical_date": None, "conf": {}})  # fmt: skip
        killed = kill_a_worker_mid_stage(api)
        dag_run = wait_for_run(api, RUN_ID, timeout=900)
        tis = task_instances(api, RUN_ID)
        tries = api.call(
            "GET", f"/dags/rulerag/dagRuns/{RUN_ID}/taskInstances/{dag_task_id(killed[0])}/tries"
        )["task_instances"]
        remote = stack.compose("exec", "-T", "minio", "find", "/data/rulerag-dvc", "-type", "f")
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=stack.url("mlflow"))
        links = {
            run.data.tags["rulerag.stage_instance"]: run.data.tags.get("rulerag.airflow.task_url")
            for dataset in DATASETS
            for run in client.search_runs(
                [client.get_experiment_by_name(f"rulerag/{dataset}").experiment_id],
                "attributes.status = 'FINISHED'",
            )
            if "rulerag.stage_instance" in run.data.tags
        }
        airflow_url = stack.url("airflow")
        run_s = seconds(dag_run["end_date"]) - seconds(dag_run["start_date"])
    left = stack.leftovers()
    print(f"stack up: {up_s:.0f} s; serial dvc repro: {serial_s:.1f} s; compose DAG run (with"
          f" the kill and its retry): {run_s:.1f} s")  # fmt: skip

    assert dag_run["state"] == "success", {t: ti["state"] for t, ti in tis.items()}
    for instance in INSTANCES:
        assert tis[dag_task_id(instance)]["state"] == "success", instance
    assert tis["collect"]["state"] == "success"
    # both ingest tasks at the same time, on the two workers
    first = [tis[dag_task_id(f"ingest@{name}")] for name in DATASETS]
    assert max(seconds(t["start_date"]) for t in first) < min(seconds(t["end_date"]) for t in first)
    assert first[0]["hostname"] != first[1]["hostname"]
    # the killed task: try 1 failed on the killed worker, try 2 succeeded on the other
    instance, host = killed
    by_try = {t["try_number"]: t for t in tries}
    assert by_try[1]["state"] == "failed" and by_try[1]["hostname"] == host, by_try
    assert tis[dag_task_id(instance)]["try_number"] == 2
    assert tis[dag_task_id(instance)]["hostname"] not in ("", host)
    # nothing lost: the project equals the serial run; the outputs reached the remote
    assert data_digests(project) == data_digests(serial) and data_digests(serial)
    assert lock_entries(project, INSTANCES) == lock_entries(serial, INSTANCES)
    for entry in lock_entries(project, INSTANCES).values():
        for out in entry["outs"]:
            digest = out["md5"].removesuffix(".dir")
            assert f"/files/md5/{digest[:2]}/{digest[2:]}" in remote, out["path"]
    status = subprocess.run([str(BIN / "dvc"), "status", "--json", *INSTANCES], cwd=project,
                            env=env, capture_output=True, text=True, check=True)  # fmt: skip
    assert json.loads(status.stdout) == {}, status.stdout
    # every stage run in the stack's server, linked back to its task in the stack's Airflow
    assert sorted(links) == sorted(INSTANCES)
    for instance, url in links.items():
        assert url == f"{airflow_url}/dags/rulerag/runs/{RUN_ID}/tasks/{dag_task_id(instance)}"
    assert left == {"container": [], "network": [], "volume": []}, left


def kill_a_worker_mid_stage(api: RestApi) -> tuple[str, str]:
    """SIGKILL the worker container of the first VICTIM task seen running (a few seconds into
    it), its restart policy off first: (instance, the worker's host name)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        tis = task_instances(api, RUN_ID)
        for instance in (f"{VICTIM}@{name}" for name in DATASETS):
            ti = tis.get(dag_task_id(instance))
            if ti and ti["state"] == "running" and ti["hostname"]:
                time.sleep(3)  # well into the stage
                docker("update", "--restart", "no", ti["hostname"])
                docker("kill", ti["hostname"])  # a container's host name is its id
                return instance, ti["hostname"]
        time.sleep(1)
    raise AssertionError(f"no {VICTIM} task was seen running")
