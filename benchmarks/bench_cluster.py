"""The same stage instances serial (`dvc repro`) and through the Celery cluster
(rulerag.orchestration.cluster: Postgres, Redis, N workers, workspaces mode): wall times, and
where the cluster's time goes (per task: Airflow's span, and the stage's own seconds).

Run by hand, never as a test:

    .venv/bin/python benchmarks/bench_cluster.py [--stages ingest mine_rules]
        [--datasets icews14 wiki] [--workers 2]

Two scratch copies of the project (cut to the stages and datasets, project_copy.cut_project);
the cluster's state in a temporary folder under /tmp, removed afterwards. Outputs of both runs
are compared byte for byte. Figures depend on what else runs on the machine.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from rulerag import markdown  # noqa: E402
from rulerag.orchestration.cluster import Cluster  # noqa: E402
from rulerag.orchestration.project_copy import copy_project, cut_project, kg_mirror_dir  # noqa: E402

BIN = Path(sys.executable).parent


def outputs(project: Path) -> dict[str, str]:
    return {
        str(p.relative_to(project)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((project / "data").rglob("*"))
        if p.is_file()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", nargs="+", default=["ingest", "mine_rules"])
    parser.add_argument("--datasets", nargs="+", default=["icews14", "wiki"])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    instances = [f"{s}@{d}" for s in args.stages for d in args.datasets]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHONPATH"))}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", DVC_NO_ANALYTICS="1",
               RULERAG_DATA_DIR=str(kg_mirror_dir()))  # fmt: skip

    scratch = Path(tempfile.mkdtemp(prefix="rulerag-bench-cluster-"))
    scratch.chmod(0o711)  # as root, Postgres runs as the user postgres and must reach state/
    state = scratch / "state"
    cluster = None
    try:
        serial = copy_project(scratch / "serial")
        cut_project(serial, args.stages, args.datasets)
        started = time.monotonic()
        subprocess.run([str(BIN / "dvc"), "repro", "--single-item", *instances], cwd=serial,
                       env=env, check=True, capture_output=True)  # fmt: skip
        serial_s = time.monotonic() - started

        project = copy_project(scratch / "project")
        cut_project(project, args.stages, args.datasets)
        cluster = Cluster(project, state, workers=args.workers, base_env=env)
        started = time.monotonic()
        cluster.up(echo=lambda line: None)
        up_s = time.monotonic() - started
        airflow_env = cluster.airflow_env()
        trigger = [str(BIN / "airflow"), "dags", "trigger", "rulerag", "--run-id", "bench"]
        while subprocess.run(trigger, env=airflow_env, capture_output=True).returncode != 0:
            time.sleep(2)  # until the DAG processor has parsed the DAG
        conn = cluster.metadata_connection()
        with conn.cursor() as cur:
            while True:
                cur.execute(
                    "SELECT state, start_date, end_date FROM dag_run WHERE run_id = 'bench'"
                )
                state_, start, end = cur.fetchone()
                if state_ in ("success", "failed"):
                    break
                time.sleep(1)
            cur.execute("SELECT task_id, state, start_date, end_date FROM task_instance WHERE "
                        "run_id = 'bench' AND state != 'skipped' ORDER BY start_date")  # fmt: skip
            tasks = cur.fetchall()
        conn.close()
        if state_ != "success":
            print(f"the DAG run {state_}; logs in {cluster.logs}", file=sys.stderr)
            return 1
        same = outputs(project) == outputs(serial)
    finally:
        if cluster is not None:
            cluster.down(echo=lambda line: None)
    run_s = (end - start).total_seconds()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    print(f"{time.strftime('%Y-%m-%d', time.gmtime())}, commit {commit}, {platform.node()}, "
          f"{os.cpu_count()} CPUs; {', '.join(instances)}")  # fmt: skip
    print(markdown.table(["run", "seconds"], [
        ["serial `dvc repro --single-item`", f"{serial_s:.1f}"],
        [f"cluster start (`up`, {args.workers} workers)", f"{up_s:.1f}"],
        [f"Celery DAG run, {args.workers} workers (trigger to end)", f"{run_s:.1f}"],
    ]))  # fmt: skip
    print("\n" + markdown.table(["task", "state", "seconds"], [
        [task, task_state, f"{(task_end - task_start).total_seconds():.1f}"]
        for task, task_state, task_start, task_end in tasks
    ]))  # fmt: skip
    print(f"\noutputs identical to the serial run: {same}")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
