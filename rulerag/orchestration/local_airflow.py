"""A local Airflow for tests and benchmarks: api-server (REST and execution API), scheduler
and DAG processor on a project copy's dags/ (`project_copy`), with a throw-away home and SQLite
database, as `make airflow` runs them (LocalExecutor, one task at a time). Everything Airflow
runs is a subprocess with its own AIRFLOW_HOME: Airflow reads its configuration once per
process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rulerag.orchestration.processes import start_group, stop_group

BIN = Path(sys.executable).parent


def airflow_env(project: Path, home: Path, **extra: str) -> dict[str, str]:
    """An environment for Airflow CLI calls that touches nothing outside tmp dirs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(project / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        RULERAG_PROJECT_DIR=str(project),
        # the DAG files import the copy's rulerag, not the one installed from the checkout
        PYTHONPATH=str(project),
        MLFLOW_TRACKING_URI=f"sqlite:///{project / 'mlflow.db'}",
        DVC_NO_ANALYTICS="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def run(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run an Airflow CLI command; with `check`, an exit status other than 0 raises
    RuntimeError with the ends of its output."""
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(
            f"{cmd} exited {done.returncode}:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
        )
    return done


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RestApi:
    """Airflow 3's REST API at `base`: without `token` for the simple auth manager with every
    user an admin, else with the token of a user (`login`); `timeout` seconds per request."""

    def __init__(self, base: str, token: str | None = None, timeout: float = 30) -> None:
        self.base = base.rstrip("/")
        self.token = token
        self.timeout = timeout

    @classmethod
    def login(cls, base: str, user: str, password: str) -> RestApi:
        """The API as `user` of the simple auth manager (its generated password)."""
        body = {"username": user, "password": password}
        return cls(base, cls(base).request("POST", "/auth/token", body)["access_token"])

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """`path` under the server's root (`/auth/token`, `/ui/...`), JSON both ways."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(
            f"{self.base}{path}", data=data, method=method, headers=headers
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as reply:
            return json.loads(reply.read().decode() or "null")

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """`path` of the REST API (`/dags/rulerag`: under /api/v2)."""
        return self.request(method, f"/api/v2{path}", body)

    def ready(self, path: str) -> bool:
        try:
            self.call("GET", path)
        except (urllib.error.URLError, OSError):
            return False
        return True


@contextmanager
def running_airflow(
    project: Path, home: Path, unpause: tuple[str, ...] = ("rulerag",), **extra: str
) -> Iterator[RestApi]:
    """api-server, scheduler and DAG processor on `project`'s dags/, each a process group of
    its own, stopped as a whole on exit; logs in `home`/servers/. Yields the REST API once
    the DAGs `unpause` are parsed and unpaused (every other DAG stays paused, as new DAGs
    start)."""
    port = free_port()
    env = airflow_env(
        project, home,
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__CORE__PARALLELISM="1",  # as `make airflow`
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        AIRFLOW__API__HOST="127.0.0.1",
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}",
        AIRFLOW__API_AUTH__JWT_SECRET="rulerag-test-secret",
        AIRFLOW__API__SECRET_KEY="rulerag-test-secret",
        AIRFLOW__API__MAXIMUM_PAGE_LIMIT="1000",  # every task instance of a run in one page
        # a loaded machine (CI's two workers) parses the DAG file slowly: more than the DAG
        # processor's default 50 s kills it, and the DAG never appears (an older commit's
        # DAG, which a benchmark may measure, took minutes to serialize)
        AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT="600",
        AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT="600",
        **extra,
    )  # fmt: skip
    run([str(BIN / "airflow"), "db", "migrate"], project, env, timeout=300)
    logs = home / "servers"
    logs.mkdir(parents=True, exist_ok=True)
    commands = {
        "api-server": ["api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        # no log server (0.0.0.0:8793, as make airflow): the API server reads the task logs
        # from the home's logs/ folder itself
        "scheduler": ["scheduler", "--skip-serve-logs"],
        "dag-processor": ["dag-processor"],
    }
    servers: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, args in commands.items():
            with (logs / f"{name}.log").open("wb") as out:
                servers[name] = start_group(
                    [str(BIN / "airflow"), *args], cwd=project, env=env,
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                )  # fmt: skip
        api = RestApi(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 600
        while not all(api.ready(f"/dags/{dag_id}") for dag_id in unpause):
            for name, proc in servers.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited:\n{tail(logs / f'{name}.log')}")
            if time.monotonic() >= deadline:
                logs_tails = "\n".join(tail(logs / f"{name}.log") for name in servers)
                raise RuntimeError(f"{unpause} not served after 600 s:\n{logs_tails}")
            time.sleep(2)
        for dag_id in unpause:
            api.call("PATCH", f"/dags/{dag_id}", {"is_paused": False})
        yield api
    finally:
        for proc in servers.values():
            stop_group(proc)


def tail(path: Path, chars: int = 3000) -> str:
    return f"--- {path.name}\n" + path.read_text(errors="replace")[-chars:]


def wait_for_run(api: RestApi, run_id: str, timeout: float) -> dict[str, Any]:
    """The DAG run once it has finished, or as it is after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        dag_run = api.call("GET", f"/dags/rulerag/dagRuns/{run_id}")
        if dag_run["state"] in ("success", "failed") or time.monotonic() > deadline:
            return dag_run
        time.sleep(2)


def task_instances(api: RestApi, run_id: str, dag_id: str = "rulerag") -> dict[str, dict[str, Any]]:
    """Every task instance of DAG run `run_id`, by task id, as the REST API describes it."""
    reply = api.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=1000")
    if reply.get("total_entries", len(reply["task_instances"])) != len(reply["task_instances"]):
        raise RuntimeError(f"run {run_id}: more task instances than one page holds")
    return {ti["task_id"]: ti for ti in reply["task_instances"]}


def started_a_process(ti: dict[str, Any]) -> bool:
    """Whether a task process ever ran for this task instance: the execution API records its
    host and pid when the process starts, and the scheduler its queued time when it sends it
    to the executor; a task the scheduler settles itself (skips, or marks an EmptyOperator
    done) has none of them."""
    return bool(ti["hostname"]) or ti["pid"] is not None or ti["queued_when"] is not None
