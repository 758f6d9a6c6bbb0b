"""The DAG under a running scheduler, as `make airflow` runs it (LocalExecutor, SQLite): a
one-stage run starts a process for the tasks it runs and none for the others.

`airflow dags test` hides how a run costs under the scheduler: there, every task the scheduler
sends to the executor is a process of its own (about 9 s of Python start-up and DAG parsing
each, on this machine) even when it only decides to skip. A branch operator skips only its
direct children that are not downstream of a task it follows, so stage tasks downstream of a
selected one ran just to skip themselves: a one-stage run (`ingest` of one dataset) took about
6 minutes. `apply_conf` now skips every unselected stage task itself, in one call, before any
can start. Here the api-server (REST and execution API), scheduler and DAG processor run as
processes of their own on a throw-away project and Airflow home; the run is triggered and read
back through the REST API.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from rulerag.layout import DataLayout
from rulerag.orchestration.local_airflow import (
    RestApi,
    running_airflow,
    started_a_process,
    task_instances,
    wait_for_run,
)
from tests.pipeline.test_airflow_dag import TRIVIAL_DVC_YAML

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("airflow")]

#: the tasks that are no stage instance
CONTROL_TASKS = {"apply_conf", "record_overrides"}


@pytest.mark.data
def test_one_stage_run_under_the_scheduler_starts_no_process_for_unselected_tasks(
    project_copy: Path, tmp_path: Path, kg_mirror: Path
) -> None:
    home = tmp_path / "airflow_home"
    run_id = "one-stage"
    ui = "http://mlflow.example.test:5001"
    with running_airflow(
        project_copy, home, RULERAG_DATA_DIR=str(kg_mirror), RULERAG_MLFLOW_UI_URL=ui + "/"
    ) as api:
        api.call("POST", "/dags/rulerag/dagRuns", {
            "dag_run_id": run_id, "logical_date": None,
            "conf": {"datasets": ["nell995"], "stages": ["ingest"]},
        })  # fmt: skip
        dag_run = wait_for_run(api, run_id, timeout=600)
        tis = task_instances(api, run_id)
        runs = f"/dags/rulerag/dagRuns/{run_id}"
        links = {
            task_id: api.call("GET", f"{runs}/taskInstances/{task_id}/links")
            for task_id in ("nell995.ingest", "nell995.mine_rules")
        }
        log = json.dumps(api.call("GET", f"{runs}/taskInstances/nell995.ingest/logs/1"))
    ran = {t for t, ti in tis.items() if started_a_process(ti)}
    assert ran <= {*CONTROL_TASKS, "nell995.ingest"}, f"processes for {sorted(ran)}"
    assert dag_run["state"] == "success", {t: ti["state"] for t, ti in tis.items()}
    wall_s = _seconds(dag_run["end_date"]) - _seconds(dag_run["start_date"])
    print(f"one-stage run under the scheduler: {wall_s:.1f} s ({len(tis)} task instances)")
    assert ran == {*CONTROL_TASKS, "nell995.ingest"}, sorted(ran)
    for task_id in (*CONTROL_TASKS, "nell995.ingest"):
        assert tis[task_id]["state"] == "success", (task_id, tis[task_id])
    stage_ids = {t for t in tis if t not in CONTROL_TASKS and t.split(".")[0] in _datasets(tis)}
    for task_id in stage_ids - {"nell995.ingest"}:
        ti = tis[task_id]  # an unselected stage: skipped by apply_conf, never queued
        assert ti["state"] == "skipped", (task_id, ti["state"])
        assert ti["try_number"] == 0, (task_id, ti["try_number"])
    assert any(t.startswith("nell995.mine_rules") for t in stage_ids)
    assert DataLayout.of(project_copy / "data", "nell995").facts.is_file()

    # The stage task's extra link opens the MLflow run it logged (found by the two tags); a
    # skipped stage logged nothing and has no link.
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project_copy / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("rulerag/nell995")
    assert experiment is not None
    (logged,) = client.search_runs(
        [experiment.experiment_id],
        f"tags.`rulerag.pipeline_run` = '{run_id}' and "
        "tags.`rulerag.stage_instance` = 'ingest@nell995'",
    )
    expected = f"{ui}/#/experiments/{experiment.experiment_id}/runs/{logged.info.run_id}"
    assert links["nell995.ingest"]["extra_links"] == {"MLflow run": expected}
    assert f"MLflow run: {expected}" in log  # the log, the page's first tab, names it too
    assert not links["nell995.mine_rules"]["extra_links"].get("MLflow run")


def _datasets(tis: dict[str, Any]) -> set[str]:
    return {t.split(".")[0] for t in tis if "." in t}


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def dag_runs(api: RestApi, dag_id: str) -> list[dict[str, Any]]:
    reply = api.call("GET", f"/dags/{dag_id}/dagRuns?order_by=run_after&limit=100")
    return reply["dag_runs"]


def wait_until_idle(api: RestApi, dag_ids: tuple[str, ...], timeout: float) -> None:
    """Until no run of `dag_ids` is queued or running (a run the scheduler is about to create
    from an asset event gets a few seconds)."""
    deadline = time.monotonic() + timeout
    quiet_since = None
    while time.monotonic() < deadline:
        busy = any(
            run["state"] in ("queued", "running") for d in dag_ids for run in dag_runs(api, d)
        )
        if busy:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > 20:
            return
        time.sleep(2)
    raise AssertionError(f"runs of {dag_ids} still going after {timeout} s")


def mirror_events(home: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute(
            "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE a.name = 'wiki/kg_mirror' ORDER BY e.id"
        ).fetchall()
    return [json.loads(extra) for (extra,) in rows]


def test_a_changed_kg_mirror_runs_its_datasets_chain(project_copy: Path, tmp_path: Path) -> None:
    """rulerag_kg_watch under the scheduler: its first look at a mirror emits a baseline
    event (nothing runs), a changed mirror an event that makes rulerag_kg_changed trigger
    `rulerag` for that dataset with `ingest` forced, an unchanged one no event. Stand-in
    stages (tests/pipeline/test_airflow_dag.py's) keep the chain short."""
    (project_copy / "dvc.yaml").write_text(TRIVIAL_DVC_YAML, encoding="utf-8")
    mirror = tmp_path / "mirror"
    (mirror / "wiki").mkdir(parents=True)
    (mirror / "wiki" / "train.txt").write_text("a\tr\tb\n", encoding="utf-8")
    home = tmp_path / "airflow_home"
    dags = ("rulerag", "rulerag_kg_watch", "rulerag_kg_changed")
    extra = {"RULERAG_DATA_DIR": str(mirror), "RULERAG_KG_WATCH_SCHEDULE": "none"}  # looks by hand
    with running_airflow(project_copy, home, unpause=dags, **extra) as api:
        for look, change in (("first", False), ("changed", True), ("unchanged", False)):
            if change:
                (mirror / "wiki" / "train.txt").write_text("a\tr\tb\nb\tr\tc\n", encoding="utf-8")
            api.call("POST", "/dags/rulerag_kg_watch/dagRuns",
                     {"dag_run_id": look, "logical_date": None})  # fmt: skip
            wait_until_idle(api, dags, timeout=600)
        chains = dag_runs(api, "rulerag")
        changed_runs = dag_runs(api, "rulerag_kg_changed")
        watch = {
            look: task_instances(api, look, "rulerag_kg_watch")
            for look in ("first", "changed", "unchanged")
        }
        chain_tis = task_instances(api, chains[0]["dag_run_id"]) if chains else {}

    assert [w["check_wiki"]["state"] for w in watch.values()] == ["success", "success", "skipped"]
    events = mirror_events(home)
    assert [e["baseline"] for e in events] == [True, False]  # none for the unchanged look
    assert events[0]["fingerprint"] != events[1]["fingerprint"]
    # the baseline's run of rulerag_kg_changed triggered nothing; the change's triggered one
    assert len(changed_runs) == 2, changed_runs
    assert len(chains) == 1, chains
    assert chains[0]["conf"] == {"datasets": ["wiki"], "force": ["ingest"]}
    assert chains[0]["state"] == "success", {t: ti["state"] for t, ti in chain_tis.items()}
    assert chain_tis["wiki.ingest"]["state"] == "success"
    assert chain_tis["wiki.count"]["state"] == "success"
    assert chain_tis["icews14.ingest"]["state"] == "skipped"
