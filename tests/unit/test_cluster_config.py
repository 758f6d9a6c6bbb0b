"""The compose file's Celery cluster and the Helm values agree with the DAG's settings: a
scalable worker service, GPU workers on the queue the GPU stages are routed to, the DVC remote
the workspaces use, and credentials only from the environment."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest
import yaml

from rulerag.orchestration.dag_settings import DagSettings

PROJECT = Path(__file__).resolve().parents[2]


def compose() -> dict:
    return yaml.safe_load((PROJECT / "docker" / "compose.yaml").read_text(encoding="utf-8"))


def dvc_remotes() -> set[str]:
    parser = configparser.ConfigParser()
    parser.read(PROJECT / ".dvc" / "config", encoding="utf-8")
    return {s.strip("'")[len('remote "') : -1] for s in parser.sections() if "remote" in s}


def test_compose_runs_celery_workspaces_and_gpu_workers() -> None:
    services = compose()["services"]
    for name in ("redis", "minio", "minio-bucket", "airflow-init", "airflow-apiserver",
                 "airflow-scheduler", "airflow-dag-processor", "worker", "gpu-worker"):  # fmt: skip
        assert name in services, name
    env = services["worker"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://redis:")
    # the driver named: SQLAlchemy 2.1's bare postgresql:// means psycopg 3, which is not installed
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql+psycopg2://")
    settings = DagSettings.from_env({k: str(v) for k, v in env.items() if "${" not in str(v)})
    assert settings.mode == "workspaces" and settings.remote in dvc_remotes()
    # scalable: no fixed name or host port on a worker
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker
    assert worker["command"][:3] == ["airflow", "celery", "worker"]
    assert worker["command"][worker["command"].index("--queues") + 1] == "default"
    gpu = services["gpu-worker"]
    assert gpu["profiles"] == ["gpu"]
    assert gpu["command"][gpu["command"].index("--queues") + 1] == settings.gpu_queue
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert settings.gpu_pool and settings.gpu_pool in services["airflow-init"]["command"][-1]
    # every Airflow process shares the settings and the execution API's address
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "gpu-worker"):
        assert services[name]["environment"] == env, name
    assert "airflow-apiserver:8080/execution" in env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]


def test_compose_takes_secrets_from_the_environment_only() -> None:
    text = (PROJECT / "docker" / "compose.yaml").read_text(encoding="utf-8")
    services = compose()["services"]
    for key in ("AWS_SECRET_ACCESS_KEY", "AIRFLOW__API_AUTH__JWT_SECRET"):
        assert services["worker"]["environment"][key].startswith("${"), key
    assert services["minio"]["environment"]["MINIO_ROOT_PASSWORD"].startswith("${")
    assert ":?" in text  # no default password for the object store or the JWT secret
    assert "AWS" not in (PROJECT / "params.yaml").read_text(encoding="utf-8")


def test_helm_values_run_the_kubernetes_executor_in_workspaces_mode() -> None:
    values = yaml.safe_load((PROJECT / "docker" / "helm" / "values.yaml").read_text())
    assert values["executor"] == "KubernetesExecutor"
    env = {e["name"]: e["value"] for e in values["env"]}
    settings = DagSettings.from_env(env)
    assert settings.mode == "workspaces" and settings.source and settings.gpu_resource
    assert "secretRef" in values["extraEnvFrom"]
    assert not any("SECRET" in name or "PASSWORD" in name for name in env)


def test_gpu_pods_ask_for_one_gpu() -> None:
    pytest.importorskip("kubernetes")  # the `cluster` extra (Docker images), not `make setup`
    from rulerag.orchestration.airflow_tasks import gpu_pod_override

    pod = gpu_pod_override("nvidia.com/gpu")["pod_override"]
    assert pod.spec.containers[0].name == "base"
    assert pod.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
