"""Links from an MLflow run back to the Airflow task that ran it.

Airflow's task runner exports the task's identity into its environment (`AIRFLOW_CTX_DAG_ID`,
`AIRFLOW_CTX_DAG_RUN_ID`, `AIRFLOW_CTX_TASK_ID`, `AIRFLOW_CTX_TRY_NUMBER`); the DAG's stage tasks
pass their whole environment to the `dvc repro` they start (dags/rulerag_dag.py), so a stage
run reads it here and carries the URLs of its DAG run and task instance in Airflow 3's UI
(`<base>/dags/<dag>/runs/<run>/tasks/<task>`, the routes of Airflow's React UI), as tags and as
the run's description (`mlflow.note.content`, Markdown: a link in MLflow's run page).

The base URL is `RULERAG_AIRFLOW_URL`, else Airflow's own `[api] base_url`
(`AIRFLOW__API__BASE_URL`, which `make airflow` sets to where it serves), else
`http://127.0.0.1:8080`, `make airflow`'s default address: the very host the UI is opened on,
since a browser logged in on 127.0.0.1 has no session on localhost. Outside Airflow nothing
is added. Nothing here imports mlflow or airflow.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

__all__ = [
    "AIRFLOW_ENV",
    "AIRFLOW_URL_ENV",
    "DEFAULT_AIRFLOW_URL",
    "TAG_AIRFLOW_DAG_RUN_URL",
    "TAG_AIRFLOW_TASK_URL",
    "AirflowTask",
    "airflow_base_url",
    "airflow_task",
]

#: the Airflow UI's address, for the links (a setting of this project)
AIRFLOW_URL_ENV = "RULERAG_AIRFLOW_URL"
#: Airflow's own setting of its address (`[api] base_url`), used when ours is unset
AIRFLOW_BASE_URL_ENV = "AIRFLOW__API__BASE_URL"
#: what `make airflow` serves by default (its AIRFLOW_HOST and AIRFLOW_PORT)
DEFAULT_AIRFLOW_URL = "http://127.0.0.1:8080"
TAG_AIRFLOW_DAG_RUN_URL = "rulerag.airflow.dag_run_url"
#: every variable read here: the task's identity (Airflow's task runner sets them) and the URLs
AIRFLOW_ENV = (
    "AIRFLOW_CTX_DAG_ID",
    "AIRFLOW_CTX_DAG_RUN_ID",
    "AIRFLOW_CTX_TASK_ID",
    "AIRFLOW_CTX_TRY_NUMBER",
    AIRFLOW_URL_ENV,
    AIRFLOW_BASE_URL_ENV,
)
TAG_AIRFLOW_TASK_URL = "rulerag.airflow.task_url"


def airflow_base_url(env: Mapping[str, str] | None = None) -> str:
    """The Airflow UI's base URL (see the module's doc), without a trailing slash; ValueError
    naming the variable when it is not an http(s) URL."""
    env = os.environ if env is None else env
    for name in (AIRFLOW_URL_ENV, AIRFLOW_BASE_URL_ENV):
        value = env.get(name, "").strip()
        if value:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"{name}={value!r} is not an http(s) URL of the Airflow UI")
            return value.rstrip("/")
    return DEFAULT_AIRFLOW_URL


def _segment(value: str) -> str:
    """One path segment of a UI route: everything but unreserved characters escaped (a run id
    `manual__2026-11-27T06:14:00+00:00` keeps its `+` as `%2B`, as Airflow's UI encodes it)."""
    return quote(value, safe="")


@dataclass(frozen=True)
class AirflowTask:
    """The Airflow task instance a process runs in, and its URLs in Airflow's UI."""

    dag_id: str
    run_id: str
    task_id: str
    try_number: str
    base_url: str

    @property
    def dag_run_url(self) -> str:
        return f"{self.base_url}/dags/{_segment(self.dag_id)}/runs/{_segment(self.run_id)}"

    @property
    def task_url(self) -> str:
        return f"{self.dag_run_url}/tasks/{_segment(self.task_id)}"

    def tags(self) -> dict[str, str]:
        """The URLs as tags (searchable, shown in the run's tag list)."""
        return {TAG_AIRFLOW_DAG_RUN_URL: self.dag_run_url, TAG_AIRFLOW_TASK_URL: self.task_url}

    def note(self, *, task: bool = True) -> str:
        """The run's description: Markdown links to the task (when `task`) and the DAG run."""
        lines = [f"Airflow DAG run: [{self.dag_id} / {self.run_id}]({self.dag_run_url})"]
        if task:
            attempt = f" (try {self.try_number})" if self.try_number else ""
            lines.insert(0, f"Airflow task: [{self.task_id}]({self.task_url}){attempt}")
        return "\n\n".join(lines)


def airflow_task(env: Mapping[str, str] | None = None) -> AirflowTask | None:
    """The Airflow task this process runs under (from `AIRFLOW_CTX_*`), or None outside one."""
    env = os.environ if env is None else env
    dag_id = env.get("AIRFLOW_CTX_DAG_ID", "").strip()
    run_id = env.get("AIRFLOW_CTX_DAG_RUN_ID", "").strip()
    task_id = env.get("AIRFLOW_CTX_TASK_ID", "").strip()
    if not (dag_id and run_id and task_id):
        return None
    return AirflowTask(
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        try_number=env.get("AIRFLOW_CTX_TRY_NUMBER", "").strip(),
        base_url=airflow_base_url(env),
    )
