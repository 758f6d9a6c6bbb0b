"""The Airflow DAG generated from dvc.yaml: it parses, mirrors the stage graph, and a run with
``airflow dags test`` does what ``dvc repro`` would (same outputs, dvc.lock, ``dvc status``).

Airflow reads its configuration once per process, so everything Airflow runs in a subprocess
with its own AIRFLOW_HOME; DAG runs happen in a throw-away copy of the project.
"""

from __future__ import annotations

import json
import re
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rulerag.layout import DataLayout
from rulerag.orchestration.dag_layout import build_layout
from rulerag.orchestration.local_airflow import BIN, airflow_env, run
from rulerag.orchestration.run_copy import branch_name
from rulerag.params import parse_params, read_params_file

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("airflow")]

PROJECT_DIR = Path(__file__).resolve().parents[2]

# What the DagBag subprocess prints: import errors and, per task, its upstreams, assets and
# extra links; of the data-aware DAGs, their schedules and tasks.
DAGBAG_SCRIPT = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
dag = bag.dags.get("rulerag")
out = {"import_errors": {k: str(v) for k, v in bag.import_errors.items()}, "dag": None}
names = lambda assets: sorted(f"{a.name} {a.uri}" for a in assets)
out["others"] = {
    other.dag_id: {
        "timetable": type(other.timetable).__name__,
        "schedule_assets": names(getattr(getattr(other.timetable, "asset_condition", None),
                                         "objects", [])),
        "tasks": {
            t.task_id: {"inlets": names(t.inlets), "outlets": names(t.outlets),
                        "upstream": sorted(t.upstream_task_ids),
                        "conf": {k: str(v) for k, v in (getattr(t, "conf", None) or {}).items()}}
            for t in other.tasks
        },
    }
    for other in bag.dags.values() if other.dag_id != "rulerag"
}
if dag is not None:
    out["dag"] = {
        "max_active_runs": dag.max_active_runs,
        "max_active_tasks": dag.max_active_tasks,
        "timetable": type(dag.timetable).__name__,
        "params": {
            k: {**p.schema, "description": p.description}
            for k, p in ((k, dag.params.get_param(k)) for k in dag.params)
        },
        "tasks": {
            t.task_id: {
                "upstream": sorted(t.upstream_task_ids),
                "retries": t.retries,
                "trigger_rule": str(t.trigger_rule),
                "teardown": t.is_teardown,
                "queue": t.queue,
                "pool": t.pool,
                "operator": type(t).__name__,
                "inlets": names(t.inlets),
                "outlets": names(t.outlets),
                "extra_links": sorted(link.name for link in t.operator_extra_links),
            }
            for t in dag.tasks
        },
    }
print("DAGBAG_JSON=" + json.dumps(out))
"""

# A stand-in for the real stages: two chained foreach stages that record the run tag.
TRIVIAL_DVC_YAML = """\
stages:
  ingest:
    foreach: ${datasets}
    do:
      cmd: mkdir -p data/${item}/kg && echo "$RULERAG_PIPELINE_RUN" > data/${item}/kg/facts.parquet
      params:
        - ingest
      outs:
        - data/${item}/kg/facts.parquet
  count:
    foreach: ${datasets}
    do:
      cmd: wc -c < data/${item}/kg/facts.parquet > data/${item}/count.txt
      deps:
        - data/${item}/kg
      outs:
        - data/${item}/count.txt
"""


def dags_test(project: Path, env: dict[str, str], conf: dict[str, Any]) -> tuple[int, str]:
    """``airflow dags test rulerag -c CONF``: exit status and combined output."""
    done = run(
        [str(BIN / "airflow"), "dags", "test", "rulerag", "-c", json.dumps(conf)],
        project,
        env,
        timeout=240,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def last_run_states(home: Path) -> tuple[str, str, dict[str, str]]:
    """(run_id, dag run state, {task_id: state}) of the newest run, read from Airflow's DB."""
    with sqlite3.connect(home / "airflow.db") as db:
        run_id, state = db.execute(
            "SELECT run_id, state FROM dag_run WHERE dag_id = 'rulerag' ORDER BY id DESC LIMIT 1"
        ).fetchone()
        tasks = dict(
            db.execute(
                "SELECT task_id, state FROM task_instance WHERE dag_id = 'rulerag' AND run_id = ?",
                (run_id,),
            ).fetchall()
        )
    return run_id, state, tasks


@pytest.fixture
def airflow_project(project_copy: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A project copy and a migrated, empty Airflow home for it."""
    home = tmp_path / "airflow_home"
    home.mkdir()
    run([str(BIN / "airflow"), "db", "migrate"], project_copy, airflow_env(project_copy, home))
    return project_copy, home


def test_dag_imports_and_mirrors_the_stage_graph(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    for folder in ("nell-995", "wiki"):
        (mirror / folder).mkdir(parents=True)
    done = run(
        [sys.executable, "-c", DAGBAG_SCRIPT, str(PROJECT_DIR / "dags")],
        PROJECT_DIR,
        airflow_env(PROJECT_DIR, tmp_path / "airflow_home", RULERAG_PROJECT_DIR="",
                    RULERAG_DATA_DIR=str(mirror)),
    )  # fmt: skip
    line = next(x for x in done.stdout.splitlines() if x.startswith("DAGBAG_JSON="))
    bag = json.loads(line.removeprefix("DAGBAG_JSON="))
    assert bag["import_errors"] == {}
    dag = bag["dag"]
    assert dag is not None, "DAG 'rulerag' not found"
    assert dag["max_active_runs"] == 1 and dag["max_active_tasks"] == 1
    assert dag["timetable"] == "NullTimetable"  # schedule=None: runs are triggered

    layout = build_layout(PROJECT_DIR, {"RULERAG_DATA_DIR": str(mirror)})
    placed = {spec.instance: spec.full_task_id for spec in layout.tasks}
    # apply_conf first (it skips what the run does not select), each stage after its
    # upstream stages along dvc.yaml's edges (the stages that need none after apply_conf),
    # record_overrides last: no gate, done marker or branch task around each stage any more
    expected: dict[str, set[str]] = {"apply_conf": set()}
    for spec in layout.tasks:
        expected[spec.full_task_id] = {placed[u] for u in spec.upstream} or {"apply_conf"}
    # record_overrides: the teardown of apply_conf, after every stage, whatever happened
    expected["record_overrides"] = {"apply_conf", *placed.values()}
    tasks = dag["tasks"]
    assert {t: set(v["upstream"]) for t, v in tasks.items()} == expected
    assert len(tasks) == len(layout.tasks) + 2
    assert tasks["record_overrides"]["teardown"]
    # a stage runs when no upstream failed (an unselected upstream is skipped; apply_conf
    # skipped this one if the run does not select it); a root follows apply_conf, a setup
    rules = {tasks[placed[s.instance]]["trigger_rule"] for s in layout.tasks if s.upstream}
    assert rules == {"TriggerRule.NONE_FAILED"}
    roots = {tasks[placed[s.instance]]["trigger_rule"] for s in layout.tasks if not s.upstream}
    assert roots == {"TriggerRule.ALL_SUCCESS"}
    assert tasks["apply_conf"]["operator"] == "ApplyConfOperator"
    # Assets: the KG, rule bank, benchmark and report of each dataset, named after it (the
    # Assets page searches by name prefix), and each KG mirror; inlets from upstream ones
    data = (PROJECT_DIR / "data").as_uri()
    assert tasks["nell995.ingest"]["outlets"] == [f"nell995/kg {data}/nell995/kg"]
    assert tasks["nell995.ingest"]["inlets"] == [
        f"nell995/kg_mirror {(mirror / 'nell-995').as_uri()}"
    ]
    assert tasks["nell995.mine_rules"]["outlets"] == [f"nell995/rule_bank {data}/nell995/rules"]
    assert tasks["nell995.mine_rules"]["inlets"] == [f"nell995/kg {data}/nell995/kg"]
    assert tasks["nell995.train_generator.rgft"]["outlets"] == []
    assert sum(len(t["outlets"]) for t in tasks.values()) == 4 * len(layout.datasets)
    for name in placed.values():
        assert tasks[name]["extra_links"] == ["MLflow run"]

    # A changed KG mirror runs its dataset's chain: a check per mirror emits its asset
    # (inlet: the latest event's fingerprint); the chain DAG is scheduled on any of them.
    watch, changed = bag["others"]["rulerag_kg_watch"], bag["others"]["rulerag_kg_changed"]
    assert set(watch["tasks"]) == {"check_nell995", "check_wiki"}  # the mirrors that exist
    check = watch["tasks"]["check_nell995"]
    assert check["inlets"] == check["outlets"] == tasks["nell995.ingest"]["inlets"]
    assert changed["timetable"] == "AssetTriggeredTimetable"
    assert len(changed["schedule_assets"]) == 2
    assert changed["tasks"]["run_chain"]["upstream"] == ["changed_datasets"]
    assert changed["tasks"]["run_chain"]["conf"]["force"] == "['ingest']"
    # Grouped per dataset, and per stage where a dataset has several of its instances
    assert placed["generate@icews14-rulerag_ft"] == "icews14.generate.rulerag_ft"
    assert placed["ingest@icews14"] == "icews14.ingest"
    # Every known dataset has its ingest task, whatever params.yaml selects today.
    for name in layout.datasets:
        assert f"{name}.ingest" in dag["tasks"]
    assert dag["tasks"]["icews14.ingest"]["retries"] == 1
    assert dag["tasks"]["apply_conf"]["retries"] == 0
    # The trigger form: multi-selects of the known datasets and stages, overrides as an object;
    # the stage names are the form's choices and the override keys no schema (apply_conf
    # checks both): every task carries a copy of the form
    form = dag["params"]
    params = read_params_file(PROJECT_DIR / "params.yaml")
    assert form["datasets"]["items"]["enum"] == sorted(parse_params(params).known_datasets())
    assert tuple(form["datasets"]["items"]["enum"]) == layout.datasets
    stages = list(read_params_file(PROJECT_DIR / "dvc.yaml")["stages"])
    assert form["stages"]["examples"] == stages and "enum" not in form["stages"]["items"]
    assert form["force"]["examples"] == stages  # dvc repro --force for these
    assert form["params"] == {
        "type": ["object", "null"], "title": "params.yaml overrides",
        "description": form["params"]["description"],
    }  # fmt: skip
    assert len(json.dumps(form)) < 3000
    assert all(form[k]["title"] for k in ("datasets", "stages", "params", "force"))
    # optional: Airflow's form marks a field required unless its type admits null
    assert all("null" in form[k]["type"] for k in ("datasets", "stages", "params", "force"))


def test_workspaces_mode_collects_at_the_end_and_routes_gpu_stages(tmp_path: Path) -> None:
    env = airflow_env(
        PROJECT_DIR, tmp_path / "airflow_home", RULERAG_PROJECT_DIR="",
        RULERAG_DAG_MODE="workspaces", RULERAG_DAG_PARALLELISM="3",
        RULERAG_GPU_QUEUE="gpu", RULERAG_GPU_POOL="gpus",
    )  # fmt: skip
    done = run([sys.executable, "-c", DAGBAG_SCRIPT, str(PROJECT_DIR / "dags")], PROJECT_DIR, env)
    line = next(x for x in done.stdout.splitlines() if x.startswith("DAGBAG_JSON="))
    bag = json.loads(line.removeprefix("DAGBAG_JSON="))
    assert bag["import_errors"] == {}
    dag = bag["dag"]
    assert dag["max_active_tasks"] == 3
    tasks = dag["tasks"]
    stages = set(tasks) - {"apply_conf", "collect", "record_overrides"}
    assert set(tasks["collect"]["upstream"]) == stages  # after every stage, whatever ran
    assert "collect" in tasks["record_overrides"]["upstream"]
    assert tasks["icews14.generate.rulerag_ft"]["queue"] == "gpu"
    assert tasks["icews14.generate.rulerag_ft"]["pool"] == "gpus"
    assert tasks["icews14.train_generator.rgft"]["queue"] == "gpu"
    assert tasks["icews14.ingest"]["queue"] == "default"
    assert tasks["icews14.ingest"]["pool"] == "default_pool"


def test_dags_test_runs_selected_stages_like_dvc(airflow_project: tuple[Path, Path]) -> None:
    """Chained stages on a stand-in dvc.yaml: order, skips, run tag, dvc.lock, bad conf."""
    project, home = airflow_project
    (project / "dvc.yaml").write_text(TRIVIAL_DVC_YAML, encoding="utf-8")
    env = airflow_env(project, home)

    params_text = (project / "params.yaml").read_text(encoding="utf-8")
    code, out = dags_test(project, env, {"datasets": ["wiki"]})
    run_id, state, tasks = last_run_states(home)
    assert code == 0 and state == "success", out[-6000:]
    assert tasks.pop("apply_conf") == "success"
    assert tasks.pop("record_overrides") == "success"
    assert tasks.pop("wiki.ingest") == "success"
    assert tasks.pop("wiki.count") == "success"
    assert set(tasks.values()) == {"skipped"}, tasks
    # The stage saw the DAG run's id as its pipeline-run tag.
    wiki = DataLayout.of(project / "data", "wiki")
    facts = wiki.facts
    assert facts.read_text().strip() == run_id
    assert (wiki.root / "count.txt").read_text().strip() == str(facts.stat().st_size)
    # The overrides are a branch; the workspace's params.yaml, index and HEAD are as they were.
    assert (project / "params.yaml").read_text(encoding="utf-8") == params_text
    head = run(["git", "rev-parse", "HEAD"], project, env).stdout.strip()
    ref = branch_name(run_id)
    # the run ran in a copy of its own, which is gone; what it built came back (it only selected)
    assert not list((project / ".dvc" / "tmp" / "airflow-runs").glob("airflow-*"))
    assert run(["git", "rev-parse", f"{ref}^"], project, env).stdout.strip() == head
    assert run(["git", "diff", "--cached", "--name-only"], project, env).stdout == ""
    saved = run(["git", "show", f"{ref}:params.yaml"], project, env).stdout
    assert "datasets:\n  - wiki\n" in saved
    assert "# Stage `ingest`" in saved  # comments survive apply_conf
    lock = run(["git", "show", f"{ref}:dvc.lock"], project, env).stdout
    assert "ingest@wiki" in lock

    # A hostile dataset name is refused by the trigger form's schema before any task runs.
    code, out = dags_test(project, env, {"datasets": ["wiki; touch /tmp/pwned"]})
    assert code != 0 and "is not one of" in out, out[-3000:]
    assert last_run_states(home)[0] == run_id  # no run was created
    assert (project / "params.yaml").read_text(encoding="utf-8") == params_text
    # What the form's schema does not check fails in apply_conf, every problem at once with a
    # suggestion for a mistyped key; params.yaml and the stages are left alone.
    bad = {"ingest.duplicate": "error", "generation.test_queries": -3, "generation.max_rules": 9}
    code, out = dags_test(project, env, {"params": bad})
    _, state, tasks = last_run_states(home)
    assert code != 0 and state == "failed"
    assert tasks["apply_conf"] == "failed"
    assert "unknown key 'ingest.duplicate'; did you mean 'ingest.duplicates'?" in out
    assert "generation.test_queries: Input should be greater than or equal to 1" in out
    assert "generation.max_rules is 9, but the benchmark selects at most" in out
    stages = {s for t, s in tasks.items() if t not in ("apply_conf", "record_overrides")}
    assert stages == {"upstream_failed"}
    assert (project / "params.yaml").read_text(encoding="utf-8") == params_text
    # The form's untouched fields ([] / {}) change nothing: params.yaml's datasets run
    code, out = dags_test(project, env, {"datasets": [], "stages": [], "params": {}})
    _, state, tasks = last_run_states(home)
    assert code == 0 and state == "success", out[-6000:]
    assert tasks["icews14.ingest"] == "success" and tasks["wiki.ingest"] == "skipped"
    assert (project / "params.yaml").read_text(encoding="utf-8") == params_text


@pytest.mark.data
def test_dags_test_ingests_one_dataset(airflow_project: tuple[Path, Path], kg_mirror: Path) -> None:
    """The real stages for nell995 through Airflow (ingest, mine_rules, build_benchmark, chosen
    with the conf's `stages`); other datasets and later stages skipped; DVC agrees."""
    project, home = airflow_project
    env = airflow_env(project, home, RULERAG_DATA_DIR=str(kg_mirror))

    early = ["ingest", "mine_rules", "build_benchmark"]
    code, out = dags_test(project, env, {"datasets": ["nell995"], "stages": early})
    run_id, state, tasks = last_run_states(home)
    assert code == 0 and state == "success", out[-8000:]
    assert "ingest@nell995: 154,213 facts" in out  # the stage's output reached the task log
    for task_id in ("apply_conf", "record_overrides", *(f"nell995.{s}" for s in early)):
        assert tasks.pop(task_id) == "success", task_id
    # every other stage task was skipped (by apply_conf, before any stage ran)
    assert tasks and set(tasks.values()) == {"skipped"}, tasks
    assert any(t.startswith("nell995.") for t in tasks)  # index, retrieve, generate...
    assert DataLayout.of(project / "data", "nell995").facts.is_file()
    assert not DataLayout.of(project / "data", "icews14").root.exists()

    # params.yaml is back as it was; the run's branch brings it back, and DVC agrees with it
    assert "datasets:\n  - nell995" not in (project / "params.yaml").read_text(encoding="utf-8")
    branch = branch_name(run_id)
    run(["git", "checkout", branch, "--", "params.yaml", "dvc.lock"], project, env)
    for stage in ("ingest@nell995", "mine_rules@nell995", "build_benchmark@nell995"):
        status = run([str(BIN / "dvc"), "status", "--json", stage], project, env)
        assert json.loads(status.stdout) == {}, status.stdout

    # The stage's MLflow run carries the DAG run id as its pipeline-run tag.
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name("rulerag/nell995")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    runs = [r for r in runs if r.data.tags.get("rulerag.run_kind") != "pipeline"]  # stage runs
    assert {r.data.tags["rulerag.stage"] for r in runs} == set(early)
    assert {r.data.tags["rulerag.pipeline_run"] for r in runs} == {run_id}


# Two datasets' first stage; each records when it ran (the task log shows it through the
# stage's output) and waits, up to 90 s, until the other has started too: run at once, their
# spans overlap whatever the machine's load; run one after the other, they cannot.
SLOW_DVC_YAML = """\
stages:
  ingest:
    foreach: ${datasets}
    do:
      cmd: >-
        python rendezvous.py ${item} @RENDEZVOUS@ && mkdir -p data/${item}/kg &&
        echo ${item} > data/${item}/kg/facts.parquet
      params:
        - ingest
      outs:
        - data/${item}/kg/facts.parquet
"""
RENDEZVOUS_PY = """\
import sys, time
from pathlib import Path

name, folder = sys.argv[1], Path(sys.argv[2])
folder.mkdir(exist_ok=True)
print("stage", name, "start", time.time(), flush=True)
(folder / name).touch()
deadline = time.monotonic() + 90
while len(list(folder.iterdir())) < 2 and time.monotonic() < deadline:
    time.sleep(0.2)
print("stage", name, "end", time.time(), flush=True)
"""


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Until something listens on `port` (or `process` exits, or `timeout` seconds pass)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the server exited with {process.returncode}"
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(1)
    raise AssertionError(f"nothing listens on port {port} after {timeout} s")


def test_workspaces_mode_runs_two_datasets_at_once(airflow_project: tuple[Path, Path]) -> None:
    """RULERAG_DAG_MODE=workspaces, LocalExecutor with parallelism 2: both datasets' ingest
    tasks run at the same time in workspaces of their own over a local DVC remote; `collect`
    brings their outputs into the project, and DVC agrees."""
    project, home = airflow_project
    rendezvous = project.parent / "rendezvous"
    (project / "dvc.yaml").write_text(
        SLOW_DVC_YAML.replace("@RENDEZVOUS@", str(rendezvous)), encoding="utf-8"
    )
    (project / "rendezvous.py").write_text(RENDEZVOUS_PY, encoding="utf-8")
    remote = project.parent / "remote"
    env = airflow_env(
        project, home,
        AIRFLOW__CORE__EXECUTOR="LocalExecutor", AIRFLOW__CORE__PARALLELISM="2",
        RULERAG_DAG_MODE="workspaces", RULERAG_DAG_PARALLELISM="2",
        RULERAG_WORKSPACE_ROOT=str(project.parent / "workspaces"),
    )  # fmt: skip
    run([str(BIN / "dvc"), "remote", "add", "-d", "store", str(remote)], project, env)
    git = ["git", "-c", "user.email=test@rulerag", "-c", "user.name=test"]
    run([*git, "add", "rendezvous.py"], project, env)
    run([*git, "commit", "-q", "-am", "stand-in stages that meet, a local remote"], project, env)

    # Airflow 3's executors run tasks through the execution API: serve it (only it) for them
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env.update(
        AIRFLOW__API_AUTH__JWT_SECRET="rulerag-test-secret",
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
    )
    server = subprocess.Popen(
        [str(BIN / "airflow"), "api-server", "--apps", "execution", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_port(port, server, timeout=180)
        done = run(
            [str(BIN / "airflow"), "dags", "test", "--use-executor", "rulerag", "-c",
             json.dumps({"datasets": ["icews14", "wiki"], "stages": ["ingest"]})],
            project, env, timeout=400, check=False,
        )  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=60)
    out = done.stdout + done.stderr
    _, state, tasks = last_run_states(home)
    assert done.returncode == 0 and state == "success", out[-8000:]
    for task_id in ("apply_conf", "icews14.ingest", "wiki.ingest", "collect"):
        assert tasks[task_id] == "success", (task_id, tasks)
    spans = {}
    for log_file in (home / "logs").rglob("*.log"):
        for match in re.finditer(r"stage (\w+) (start|end) ([0-9.]+)", log_file.read_text()):
            spans.setdefault(match[1], {})[match[2]] = float(match[3])
    assert set(spans) == {"icews14", "wiki"}, spans
    assert max(s["start"] for s in spans.values()) < min(s["end"] for s in spans.values())
    for name in ("icews14", "wiki"):
        assert DataLayout.of(project / "data", name).facts.read_text().strip() == name
    status = run([str(BIN / "dvc"), "status", "--json"], project, env)
    assert json.loads(status.stdout) == {}, status.stdout
    assert not list((project.parent / "workspaces").iterdir())
