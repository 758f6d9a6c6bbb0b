"""The rulerag Airflow DAG, generated from dvc.yaml: one task per DVC stage instance.

Thin glue over rulerag.orchestration: the graph (stages, ``foreach`` over every known dataset,
edges from deps/outs) comes from dvc.yaml, so a stage added there appears here with no edit;
``dag_layout`` keeps it worked out in a file, so that Airflow's frequent parses of this file
cost milliseconds. The first task, ``apply_conf``, applies the run's conf to the run's
params.yaml and skips every stage task the run does not select before any starts.
Each stage task runs the very command DVC runs, ``dvc repro --single-item <stage>@<item>``, so
dvc.lock is written as by ``dvc repro`` and ``dvc status`` agrees with Airflow. DVC holds a
repository lock, hence, by default, one task at a time (``max_active_tasks=1``) and one run
at a time. With ``RULERAG_DAG_MODE=workspaces`` each stage task runs in a workspace of its own
at the run's commit and exchanges outputs through a DVC remote, ``RULERAG_DAG_PARALLELISM`` at
a time on whatever workers the executor has; a final ``collect`` task brings every output into
the project folder (rulerag/orchestration/workspaces.py, dag_settings.py).

Trigger with a conf (validated; an empty conf leaves params.yaml as it is)::

    {"datasets": ["icews14"], "params": {"ingest.duplicates": "error"}}

``"stages": ["ingest", "mine_rules"]`` runs only those dvc.yaml stages (the rest skip);
``"force": ["ingest"]`` runs those stages' instances with ``dvc repro --force``. A run
whose conf changes params.yaml runs in a copy of its own (``rulerag.orchestration.run_copy``:
the project's params.yaml is never written) and ends by committing its params.yaml and
dvc.lock to the branch ``airflow-<run id>`` (``record_overrides``); what it built comes into
the project, as ``dvc repro`` leaves it, when params.yaml would have built the same.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, TaskGroup, TriggerRule, get_current_context, task

# Only what the DAG's shape needs is imported here (the layout is read back from its file,
# dag_layout.py): Airflow parses this file every half minute and in every task process.
# rulerag is the project's (installed, or on PYTHONPATH where a copy is run).
from rulerag.orchestration import run_copy
from rulerag.orchestration.airflow_tasks import (
    ApplyConfOperator,
    StageOperator,
    apply_conf_to_params,
    gpu_pod_override,
    log_mlflow_link,
    record_overrides,
    run_stage,
    run_stage_in_workspace,
    trigger_params,
)
from rulerag.orchestration.assets import ASSET_GROUP
from rulerag.orchestration.dag_layout import DagLayout, TaskSpec, dag_layout, unselected_task_ids
from rulerag.orchestration.dag_settings import GPU_STAGES, DagSettings
from rulerag.orchestration.run_plan import project_dir, stage_env
from rulerag.orchestration.workspaces import collect, head_commit, push_outputs

#: the project: RULERAG_PROJECT_DIR (tests point it at a copy), else the parent of dags/
PROJECT_DIR = project_dir(default=Path(__file__).resolve().parent.parent)
LAYOUT = dag_layout(PROJECT_DIR)
SETTINGS = DagSettings.from_env()
WORKSPACES = SETTINGS.mode == "workspaces"
log = logging.getLogger("rulerag.dag")


def _applied() -> dict[str, Any]:
    """What `apply_conf` returned for this run (its XCom)."""
    return get_current_context()["ti"].xcom_pull(task_ids="apply_conf") or {}


def apply_conf() -> dict[str, Any]:
    """Validate dag_run.conf and plan the run (like dvc exp run -S, in the run's copy); name
    the stage tasks it does not select, for `ApplyConfOperator` to skip."""
    context = get_current_context()
    run_id = str(context["run_id"])
    applied = apply_conf_to_params(PROJECT_DIR, dict(context["dag_run"].conf or {}), run_id)
    applied["unselected"] = unselected_task_ids(LAYOUT, applied["selected"])
    log.info("%d of %d stage tasks selected", len(applied["selected"]), len(LAYOUT.tasks))
    workdir = Path(applied["workdir"]) if applied["workdir"] else None
    env = stage_env(run_id)
    if workdir is not None and not WORKSPACES:
        # what the selected stages need and the project has built, from the cache
        run_copy.checkout(
            workdir, applied["selected"], run_copy.copy_env(PROJECT_DIR, env), log.info
        )
    if WORKSPACES:  # what each workspace starts from, as text
        push_outputs(PROJECT_DIR, SETTINGS, env, echo=log.info)
        lock = PROJECT_DIR / "dvc.lock"
        applied.update(
            commit=head_commit(PROJECT_DIR),
            params_yaml=((workdir or PROJECT_DIR) / "params.yaml").read_text(encoding="utf-8"),
            lock_yaml=lock.read_text(encoding="utf-8") if lock.is_file() else None,
        )
    return applied


def stage_callable(spec: TaskSpec):  # noqa: ANN201 - a task callable
    """What stage task `spec` runs: `dvc repro` of its instance in the project or the run's
    copy, or (workspaces mode) in a workspace of its own, returning its dvc.lock entry."""

    def stage() -> dict[str, Any] | None:
        context = get_current_context()
        ti, run_id = context["ti"], str(context["run_id"])
        applied = _applied()
        entry = None
        if not WORKSPACES:
            run_stage(
                PROJECT_DIR, spec, run_id, applied.get("stages"), applied.get("force"),
                applied.get("workdir"),
            )  # fmt: skip
        else:
            by_instance = LAYOUT.by_instance()
            entries: dict[str, Any] = {}
            for up in spec.upstream:  # what this run rebuilt upstream (skipped: nothing)
                entries.update(ti.xcom_pull(task_ids=by_instance[up].full_task_id) or {})
            entry = run_stage_in_workspace(PROJECT_DIR, SETTINGS, spec, run_id, applied, entries)
        log_mlflow_link(PROJECT_DIR, spec, run_id)
        return entry

    return stage


def gpu_routing(stage: str) -> dict[str, Any]:
    """Where a GPU stage's task goes (queue, pool, a pod asking for a GPU), as DagSettings say."""
    if stage not in GPU_STAGES:
        return {}
    routing: dict[str, Any] = {}
    if SETTINGS.gpu_queue:
        routing["queue"] = SETTINGS.gpu_queue
    if SETTINGS.gpu_pool:
        routing["pool"] = SETTINGS.gpu_pool
    if SETTINGS.gpu_resource:
        routing["executor_config"] = gpu_pod_override(SETTINGS.gpu_resource)
    return routing


def _asset(value: Any) -> Asset:
    return Asset(name=value.name, uri=value.uri, group=ASSET_GROUP)


def stage_task(spec: TaskSpec) -> StageOperator:
    """The task of one stage instance."""
    return StageOperator(
        task_id=spec.task_id,
        python_callable=stage_callable(spec),
        stage_instance=spec.instance,
        stage_dataset=spec.dataset,
        stage_project=str(PROJECT_DIR),
        # after its upstream stages when none failed: one the run did not select is skipped,
        # and this one still runs if selected (apply_conf skipped it if not); a root stage
        # follows apply_conf, a setup, which asks all_success
        trigger_rule=TriggerRule.NONE_FAILED if spec.upstream else TriggerRule.ALL_SUCCESS,
        outlets=[_asset(spec.outlet)] if spec.outlet is not None else [],
        inlets=[_asset(a) for a in spec.inlets],
        doc_md=f"`dvc repro --single-item {spec.instance}`\n\n```\n{spec.cmd}\n```",
        **gpu_routing(spec.stage),
    )


@task(task_id="record_overrides", retries=0)
def record() -> str | None:
    """Commit a run's params.yaml and dvc.lock to a branch; bring back what it built."""
    return record_overrides(PROJECT_DIR, str(get_current_context()["run_id"]), _applied())


@task(task_id="collect", retries=0, trigger_rule=TriggerRule.ALL_DONE)
def collect_outputs() -> list[str]:
    """Workspaces mode: every finished stage's dvc.lock entry into the project's dvc.lock
    and its outputs pulled there, whatever else failed (nothing is lost)."""
    context = get_current_context()
    ti = context["ti"]
    entries: dict[str, Any] = {}
    for spec in LAYOUT.tasks:
        entries.update(ti.xcom_pull(task_ids=spec.full_task_id) or {})
    applied = _applied()
    # a run in a copy of its own collects there (record_overrides takes it from there)
    where = Path(applied["workdir"]) if applied.get("workdir") else PROJECT_DIR
    return collect(where, entries, SETTINGS, stage_env(str(context["run_id"])), echo=log.info)


def stage_tasks(layout: DagLayout) -> dict[str, StageOperator]:
    """One task per stage instance, in a TaskGroup per dataset (and per stage where it has
    several instances), wired to its upstream instances."""
    groups: dict[tuple[str, ...], TaskGroup] = {}

    def group_of(path: tuple[str, ...]) -> TaskGroup | None:
        if path and path not in groups:
            groups[path] = TaskGroup(path[-1], parent_group=group_of(path[:-1]))
        return groups.get(path)

    tasks: dict[str, StageOperator] = {}
    for spec in layout.tasks:
        group = group_of(spec.group)
        with group if group is not None else contextlib.nullcontext():
            tasks[spec.instance] = stage_task(spec)
        for up in spec.upstream:
            tasks[up] >> tasks[spec.instance]
    return tasks


def build_dag(layout: DagLayout) -> DAG:
    """The stage tasks of `layout` between `apply_conf` and `record_overrides`."""
    with DAG(
        dag_id="rulerag",
        description="RuleRAG pipeline: the DVC stages of dvc.yaml, one task per stage instance",
        doc_md=__doc__,
        schedule=None,
        catchup=False,
        max_active_runs=1,
        max_active_tasks=SETTINGS.max_active_tasks,
        default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
        tags=["rulerag", "dvc"],
        params=trigger_params(list(layout.datasets), list(layout.stages)),
    ) as dag:
        # apply_conf precedes every stage (the roots directly, the rest through them) and skips
        # the unselected ones before any can start. record_overrides is a teardown: it runs
        # whatever happened, after every stage (a stage skipped at the start may sit upstream
        # of nothing but be downstream of one still running), and the run's state is the
        # stages' (a failed stage fails the run even though the teardown succeeds).
        first = ApplyConfOperator(task_id="apply_conf", python_callable=apply_conf, retries=0)
        last = record().as_teardown(setups=first)
        end = collect_outputs() if WORKSPACES else last
        if WORKSPACES:
            end >> last
        tasks = stage_tasks(layout)
        for spec in layout.tasks:
            if not spec.upstream:
                first >> tasks[spec.instance]
            tasks[spec.instance] >> end
    return dag


rulerag_dag = build_dag(LAYOUT)
