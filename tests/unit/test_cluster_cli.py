"""rulerag.orchestration.cluster without starting anything: the environment its Airflow
processes get mirrors docker/compose.yaml's x-airflow-common, secrets stay out of sight, and a
missing binary or an unstarted cluster fails in one line that says what to do."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from rulerag.orchestration import cluster as cluster_module
from rulerag.orchestration.airflow_home import PASSWORDS_FILE_ENV, PASSWORDS_FILE_NAME
from rulerag.orchestration.cluster import Cluster, ClusterError, main, postgres_bin
from rulerag.orchestration.dag_settings import DagSettings

PROJECT = Path(__file__).resolve().parents[2]


def started(tmp_path: Path, workers: int = 2) -> Cluster:
    """A cluster whose state says it was started on these ports (nothing runs)."""
    state = tmp_path / "state"
    state.mkdir()
    ports = {"postgres": 5999, "redis": 6999, "api": 7999}
    (state / "cluster.json").write_text(json.dumps({"ports": ports, "workers": workers}))
    return Cluster(PROJECT, state, workers=workers, base_env={"PATH": "/usr/bin"})


def test_airflow_env_mirrors_the_compose_file(tmp_path: Path) -> None:
    cluster = started(tmp_path, workers=3)
    env = cluster.airflow_env()
    compose = yaml.safe_load((PROJECT / "docker" / "compose.yaml").read_text(encoding="utf-8"))
    common = compose["services"]["worker"]["environment"]
    # every Airflow setting of compose's x-airflow-common, pointed at this machine
    assert {k for k in common if k.startswith("AIRFLOW__")} <= set(env)
    assert env["AIRFLOW__CORE__EXECUTOR"] == common["AIRFLOW__CORE__EXECUTOR"]
    assert env["AIRFLOW__CELERY__BROKER_URL"].endswith("@127.0.0.1:6999/0")
    scheme = common["AIRFLOW__CELERY__RESULT_BACKEND"].split("://")[0]
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith(f"{scheme}://rulerag:")
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"].endswith("@127.0.0.1:5999/airflow")
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:7999/execution/"
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1"
    assert env["AIRFLOW__API__BASE_URL"] == "http://127.0.0.1:7999"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(PROJECT / "dags")
    assert env["AIRFLOW_HOME"] == str(cluster.state_dir / "airflow")
    settings = DagSettings.from_env(env)
    assert settings.mode == "workspaces" and settings.parallelism == 3
    assert settings.remote == "cluster" and settings.root == cluster.state_dir / "workspaces"
    assert settings.gpu_queue is None  # no GPU queue: nothing would serve it
    # the caller's settings pass through unless the cluster sets them
    env = Cluster(PROJECT, cluster.state_dir, base_env={
        "RULERAG_DATA_DIR": "/kg", "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor"}).airflow_env()  # fmt: skip
    assert env["RULERAG_DATA_DIR"] == "/kg"
    assert env["AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT"] == "20"
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"


def test_secrets_are_generated_once_and_private(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    first = cluster.secrets()
    assert first == cluster.secrets()  # kept: Postgres' password is set once, by initdb
    assert len(set(first.values())) == 4 and all(len(v) >= 32 for v in first.values())
    mode = stat.S_IMODE((cluster.state_dir / "secrets.json").stat().st_mode)
    assert mode == 0o600


def test_secrets_an_older_version_left_readable_are_tightened(tmp_path: Path) -> None:
    """secrets.json written 0644 (by hand, an older version, a umask) stayed 0644 after
    `secrets()` wrote new passwords into it: `O_CREAT, 0o600` sets the mode only of a file
    it creates. Now it ends 0600 whether it is written or only read, in a state folder only
    its owner lists (0711 as root: the user postgres passes through to postgres/)."""
    cluster = started(tmp_path)
    path = cluster.state_dir / "secrets.json"
    cluster.state_dir.chmod(0o755)
    path.write_text(json.dumps({"redis_password": "kept-as-it-was"}))
    path.chmod(0o644)
    made = cluster.secrets()
    assert made["redis_password"] == "kept-as-it-was" and all(made.values())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cluster.state_dir.stat().st_mode) == (0o711 if os.geteuid() == 0 else 0o700)
    path.chmod(0o644)  # complete, so only read
    assert cluster.secrets() == made
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_every_airflow_process_is_told_the_login_file(tmp_path: Path) -> None:
    """The API server generated the admin password and printed it into logs/api-server.log;
    `up` now writes the passwords file first (`ensure_passwords`) and names it to every Airflow
    process, so none has a password to generate or print."""
    cluster = started(tmp_path)
    env = cluster.airflow_env()
    assert env[PASSWORDS_FILE_ENV] == str(cluster.airflow_home / PASSWORDS_FILE_NAME)
    assert cluster.passwords_file == cluster.airflow_home / PASSWORDS_FILE_NAME
    assert str(cluster.passwords_file) in cluster.status_line()


def test_the_processes_logs_are_private(tmp_path: Path) -> None:
    """A process's log (what a server prints: a generated password, a connection URL in a
    traceback) was 0644; it is 0600, also one an earlier start left 0644."""
    cluster = started(tmp_path)
    cluster.logs.mkdir()
    cluster.pids.mkdir()
    log = cluster.logs / "api-server.log"
    log.write_text("an earlier start\n")
    log.chmod(0o644)
    pid = cluster._spawn("api-server", ["true"], {"PATH": "/usr/bin:/bin"})
    with contextlib.suppress(ChildProcessError):  # reaped already by another test's handler
        os.waitpid(pid, 0)
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert log.read_text().startswith("an earlier start\n--- ")
    checked = cluster.logs / "migrate.log"
    cluster._checked(["true"], checked, "true", env={"PATH": "/usr/bin:/bin"})
    assert stat.S_IMODE(checked.stat().st_mode) == 0o600


def test_errors_say_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    never = Cluster(PROJECT, tmp_path / "never")
    with pytest.raises(ClusterError, match="no cluster started in .*never .run up first"):
        never.airflow_env()
    monkeypatch.setenv("RULERAG_PG_BIN", str(tmp_path))
    with pytest.raises(ClusterError, match=r"initdb is not in .*apt-get install -y postgresql"):
        postgres_bin()
    monkeypatch.setattr(cluster_module.shutil, "which", lambda name, path=None: None)
    with pytest.raises(ClusterError, match=r"redis-server is not installed .apt-get install"):
        cluster_module._executable("redis-server", tmp_path)
    with pytest.raises(ClusterError, match="--workers must be at least 1"):
        Cluster(PROJECT, tmp_path / "x", workers=0)
    assert main(["env", "--state-dir", str(tmp_path / "never")]) == 1
    assert "cluster: no cluster started" in capsys.readouterr().err
    # stopping what never started is a no-op
    assert main(["down", "--state-dir", str(tmp_path / "never")]) == 0


def test_env_command_prints_shell_exports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = started(tmp_path)
    assert main(["env", "--state-dir", str(cluster.state_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("export ") for line in lines)
    assert any(line.startswith("export AIRFLOW__CORE__EXECUTOR=CeleryExecutor") for line in lines)
    assert lines[-1].endswith(':"$PATH"')


def test_up_leaves_a_running_cluster_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second `up` fails naming what runs, and stops nothing (it used to tear it down)."""
    cluster = started(tmp_path)
    cluster.pids.mkdir()
    stand_in = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        (cluster.pids / "redis.pid").write_text(f"{stand_in.pid}\n")
        assert main(["up", "--state-dir", str(cluster.state_dir)]) == 1
        assert "already runs (redis): use it, or run down first" in capsys.readouterr().err
        assert stand_in.poll() is None
        assert cluster.running() == ["redis"]
        # down stops the group it recorded
        assert main(["down", "--state-dir", str(cluster.state_dir)]) == 0
        assert stand_in.wait(timeout=30) == -15
        assert cluster.running() == [] and not (cluster.pids / "redis.pid").exists()
    finally:
        stand_in.kill()
        stand_in.wait()


def test_gpu_workers_get_the_queue_and_pool_and_none_without_them(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    # a GPU queue from the caller's shell would hold GPU stages where no worker serves it
    base = {"PATH": "/usr/bin", "RULERAG_GPU_QUEUE": "gpu", "RULERAG_GPU_POOL": "gpus"}
    plain = Cluster(PROJECT, cluster.state_dir, base_env=base).airflow_env()
    assert "RULERAG_GPU_QUEUE" not in plain and "RULERAG_GPU_POOL" not in plain
    gpu = Cluster(PROJECT, cluster.state_dir, workers=2, gpu_workers=1, base_env=base)
    env = gpu.airflow_env()
    settings = DagSettings.from_env(env)
    assert (settings.gpu_queue, settings.gpu_pool, settings.parallelism) == ("gpu", "gpus", 3)
    assert env["AIRFLOW__CORE__PARALLELISM"] == "3"
    assert gpu.worker_names() == ["worker1", "worker2", "gpu-worker1"]
    with pytest.raises(ClusterError, match="--gpu-workers must be at least 0"):
        Cluster(PROJECT, cluster.state_dir, gpu_workers=-1)


def test_a_missing_module_of_the_celery_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    def find_spec(name: str, *args: object) -> object:  # every other module is there
        return None if name == "asyncpg" else object()

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ClusterError, match=r"not installed: asyncpg \(make cluster-deps"):
        cluster_module.require_celery_extra()
