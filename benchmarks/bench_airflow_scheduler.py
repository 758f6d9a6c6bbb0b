"""A one-stage DAG run under a running scheduler: wall time, and which tasks started a process.

Run by hand, never as a test:

    .venv/bin/python benchmarks/bench_airflow_scheduler.py [--project DIR]
        [--dataset nell995] [--stages ingest] [--timeout 1800]

A scratch copy of `--project` (default: this checkout; another checkout, e.g. an older commit's
`git worktree`, measures its DAG) with a throw-away Airflow home: api-server, scheduler and DAG
processor as `make airflow` runs them (LocalExecutor, SQLite, one task at a time,
rulerag/orchestration/local_airflow.py), the KG mirror from RULERAG_DATA_DIR or ../shared/kg.
The run
`{"datasets": [DATASET], "stages": STAGES}` is triggered through the REST API; printed: its
wall time (the DAG run's start to end), the task instances, and those that started a process
with their seconds. Figures depend on what else runs on the machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from rulerag.orchestration.local_airflow import (  # noqa: E402
    running_airflow,
    started_a_process,
    task_instances,
    wait_for_run,
)
from rulerag.orchestration.project_copy import copy_project, kg_mirror_dir  # noqa: E402


def seconds(stamp: str | None) -> float:
    if not stamp:
        return float("nan")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, default=PROJECT)
    parser.add_argument("--dataset", default="nell995")
    parser.add_argument("--stages", nargs="+", default=["ingest"])
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    source = args.project.resolve()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=source,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    scratch = Path(tempfile.mkdtemp(prefix="rulerag-bench-airflow-"))
    try:
        project = copy_project(scratch / "project", source, keep_lock=True)
        conf = {"datasets": [args.dataset], "stages": args.stages}
        started = time.monotonic()
        mirror = str(kg_mirror_dir())
        with running_airflow(project, scratch / "home", RULERAG_DATA_DIR=mirror) as api:
            ready_s = time.monotonic() - started
            api.call("POST", "/dags/rulerag/dagRuns",
                     {"dag_run_id": "bench", "logical_date": None, "conf": conf})  # fmt: skip
            dag_run = wait_for_run(api, "bench", args.timeout)
            tis = task_instances(api, "bench")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ran = {t: ti for t, ti in tis.items() if started_a_process(ti)}
    wall = seconds(dag_run["end_date"]) - seconds(dag_run["start_date"])
    print(f"project {source} (commit {commit}); conf {conf}; load average {os.getloadavg()}")
    print(f"Airflow up and DAG parsed in {ready_s:.0f} s")
    print(f"DAG run: {dag_run['state']}, {wall:.1f} s; {len(tis)} task instances, "
          f"{len(ran)} started a process:")  # fmt: skip
    for task_id, ti in sorted(ran.items(), key=lambda kv: kv[1]["start_date"] or ""):
        span = seconds(ti["end_date"]) - seconds(ti["start_date"])
        print(f"  {task_id:40s} {ti['state']:10s} {span:6.1f} s")
    return 0 if dag_run["state"] == "success" else 1


if __name__ == "__main__":
    raise SystemExit(main())
