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
import os
import shutil
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import (
    DAG,
    Asset,
    BaseOperatorLink,
    Param,
    TaskGroup,
    TriggerRule,
    get_current_context,
    task,
)
from airflow.sdk.bases.skipmixin import SkipMixin
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

# The project is the parent of dags/ unless RULERAG_PROJECT_DIR says otherwise (tests point it
# at a copy). It goes first on sys.path so the DAG uses that project's rulerag package.
PROJECT_DIR = Path(
    os.environ.get("RULERAG_PROJECT_DIR") or Path(__file__).resolve().parent.parent
).resolve()
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

# Only what the DAG's shape needs is imported here (the layout is read back from its file,
# dag_layout.py): Airflow parses this file every half minute and in every task process.
from rulerag.orchestration import run_copy  # noqa: E402
from rulerag.orchestration.assets import ASSET_GROUP  # noqa: E402
from rulerag.orchestration.dag_layout import (  # noqa: E402
    DagLayout,
    TaskSpec,
    dag_layout,
    selected_instances,
    unselected_task_ids,
)
from rulerag.orchestration.dag_settings import GPU_STAGES, DagSettings  # noqa: E402
from rulerag.orchestration.mlflow_links import (  # noqa: E402
    experiment_runs_url,
    mlflow_ui_base,
    run_url,
    tags_filter,
)
from rulerag.orchestration.run_conf import apply_run_conf, validate_run_conf  # noqa: E402
from rulerag.orchestration.workspaces import (  # noqa: E402
    collect,
    head_commit,
    push_outputs,
    run_in_workspace,
    stream_command,
)
from rulerag.params import read_params_file  # noqa: E402

DVC_YAML = PROJECT_DIR / "dvc.yaml"
PARAMS_YAML = PROJECT_DIR / "params.yaml"
LAYOUT = dag_layout(PROJECT_DIR)
DVC_LOCK = PROJECT_DIR / "dvc.lock"
SETTINGS = DagSettings.from_env()
log = logging.getLogger("rulerag.dag")


def _dvc_executable() -> str:
    """The dvc next to this interpreter (the project venv), else the one on PATH."""
    local = Path(sys.executable).parent / "dvc"
    found = str(local) if local.exists() else shutil.which("dvc")
    if not found:
        raise AirflowFailException("dvc not found next to the Python interpreter nor on PATH")
    return found


def _stage_env(run_id: str) -> dict[str, str]:
    """The task's environment plus the run tag; the venv's bin/ first so stage commands
    (``python -m pipeline_steps...``) use the same interpreter as Airflow."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["RULERAG_PIPELINE_RUN"] = run_id
    env.setdefault("DVC_NO_ANALYTICS", "1")
    return env


def trigger_params(datasets: list[str], stages: list[str]) -> dict[str, Param]:
    """The trigger form: datasets and stages as multi-selects of the known names, param
    overrides as a JSON object; each empty by default, meaning "as params.yaml has it".

    Every task carries a copy of these (Airflow serializes the DAG's params into each task),
    so they stay small: the stage names are the form's choices (`examples`), not a schema
    enum, and the override keys are no schema at all. `apply_conf` checks all of it, every
    problem at once with a suggestion for a mistyped name. (A schema enum of params.yaml's
    ~400 keys made 10.2 MB of the 10.9 MB serialized DAG, and every DAG page waited on it.)
    The dataset names keep their enum, so a hostile name is refused before a run exists.
    """

    def multi_select(title: str, description: str, names: list[str], enum: bool) -> Param:
        # optional: Airflow's form marks a field required unless its type admits null
        items = {"type": "string", **({"enum": names} if enum else {})}
        return Param(
            [], type=["array", "null"], title=title, description=description, items=items,
            uniqueItems=True, examples=names,
        )  # fmt: skip

    return {
        "datasets": multi_select(
            "Datasets", "The KGs to run (params.yaml `datasets`); none: params.yaml's.",
            datasets, enum=True,
        ),
        "stages": multi_select(
            "Stages", "dvc.yaml stages to run, the others skip; none: every stage.",
            stages, enum=False,
        ),
        "force": multi_select(
            "Force", "Stages to rerun even when DVC sees no change (dvc repro --force), e.g. "
            "ingest after the KG mirror changed; none: none.", stages, enum=False,
        ),
        "params": Param(
            {}, type=["object", "null"], title="params.yaml overrides",
            description='Dotted keys that exist in params.yaml, e.g. {"ingest.duplicates": '
            '"error", "generation.test_queries": 50}; checked before anything runs.',
        ),
    }  # fmt: skip


def _without_empty_fields(conf: dict[str, Any]) -> dict[str, Any]:
    """The form's untouched or cleared fields (`[]`, `{}`, null) mean "unchanged", as if the
    key were absent."""
    return {k: v for k, v in conf.items() if not (k in _FORM_FIELDS and v in ([], {}, None))}


_FORM_FIELDS = ("datasets", "stages", "params", "force")


def apply_conf_to_params(conf: dict[str, Any] | None, run_id: str = "manual") -> dict[str, Any]:
    """Validate the run's conf; return what the run selected and where it runs.

    A conf that changes params.yaml gets the run a copy of its own (`run_copy.create`: a git
    worktree with the run's params.yaml, sharing the project's DVC cache), named in the
    result's ``workdir``; the project's params.yaml is never written, so an edit made to it
    during the run stays. A bad conf fails the run at once without retries: retrying cannot
    make it valid.
    """
    conf = _without_empty_fields(dict(conf or {}))
    params = read_params_file(PARAMS_YAML)
    from rulerag.orchestration.dvc_graph import cmd_param_keys
    from rulerag.params import parse_params

    try:
        run_conf = validate_run_conf(
            conf,
            params,
            parse_params(params, str(PARAMS_YAML)).known_datasets(),
            cmd_keys=cmd_param_keys(DVC_YAML),
            stage_names=list(LAYOUT.stages),
        )
    except ValueError as exc:
        raise AirflowFailException(f"invalid run conf: {exc}") from exc
    # the conf applied to a private copy of params.yaml's text: the project's file stays
    scratch = PROJECT_DIR / run_copy.RUNS_DIR / f".params-{run_copy.branch_name(run_id)}.yaml"
    scratch.parent.mkdir(parents=True, exist_ok=True)
    scratch.write_text(PARAMS_YAML.read_text(encoding="utf-8"), encoding="utf-8")
    try:
        changed = apply_run_conf(scratch, run_conf)
        params_text = scratch.read_text(encoding="utf-8")
    finally:
        scratch.unlink(missing_ok=True)
    workdir = None
    if changed:
        try:
            workdir = run_copy.create(
                PROJECT_DIR, run_id, params_text, _stage_env(run_id), log.info
            )
        except run_copy.BranchExists as exc:
            raise AirflowFailException(str(exc)) from exc
    selected = read_params_file(Path(workdir or PROJECT_DIR) / "params.yaml").get("datasets") or []
    log.info(
        "%s; datasets: %s",
        f"the run's params.yaml is in {workdir}" if changed else "params.yaml unchanged",
        ", ".join(map(str, selected)),
    )
    stages = None if run_conf.stages is None else list(run_conf.stages)
    return {
        "changed": changed,
        "workdir": None if workdir is None else str(workdir),
        "datasets": list(selected),
        "params": dict(run_conf.params),
        "stages": stages,
        "force": list(run_conf.force),
    }


def record_overrides(run_id: str, applied: dict[str, Any]) -> str | None:
    """After a run in a copy of its own (`apply_conf_to_params`): its params.yaml and dvc.lock
    become the branch `run_copy.branch_name(run_id)` on top of HEAD (the project's working
    tree, index and HEAD untouched; an existing branch is never replaced); what it built
    comes into the project when the project's params.yaml would have built the same
    (`run_copy.bring_back`); the copy goes.
    `git checkout <branch> -- params.yaml dvc.lock && dvc checkout` brings a run back (its
    outputs are in the DVC cache). A `dvc exp save` would refuse the common partial run (it
    wants every stage's outputs). A copy whose record failed is kept, and the error names it."""
    workdir = applied.get("workdir")
    if not applied.get("changed") or not workdir:
        return None
    copy = Path(workdir)
    try:
        branch, commit = run_copy.record(PROJECT_DIR, run_id, copy)
    except Exception as exc:
        raise AirflowFailException(f"{exc} (the run's copy is kept: {copy})") from exc
    log.info("the run's params.yaml and dvc.lock are branch %s (%s)", branch, commit)
    if not run_copy.bring_back(PROJECT_DIR, copy, log.info):
        log.info("git checkout %s -- params.yaml dvc.lock && dvc checkout: the run", branch)
    run_copy.remove(PROJECT_DIR, copy)
    return branch


def skip_unselected(task: TaskSpec, stages: list[str] | None, workdir: Path = PROJECT_DIR) -> None:
    """Skip a stage instance the current params.yaml does not select, or whose stage is not
    among the run's ``stages`` (None: all).

    `apply_conf` already skipped every unselected task before any ran; this check stands for
    the run's selection when a task is run by hand (a cleared task instance): "selected" means
    DVC itself would generate this instance from params.yaml as it is now, e.g.
    ``ingest@nell995`` only while nell995 is in ``datasets``, or ``dvc repro --single-item``
    would fail with an unknown stage.
    """
    if stages is not None and task.stage not in stages:
        raise AirflowSkipException(f"{task.instance}: stage not in this run's stages {stages}")
    params = read_params_file(workdir / "params.yaml")
    selected = [str(d) for d in params.get("datasets") or []]
    if task.instance not in selected_instances(workdir / "dvc.yaml", params):
        why = (
            f"dataset {task.dataset!r} is not selected (datasets: {', '.join(selected)})"
            if task.dataset is not None
            else "params.yaml does not generate it"
        )
        raise AirflowSkipException(f"{task.instance}: {why}")


def run_stage(
    task: TaskSpec,
    run_id: str,
    stages: list[str] | None = None,
    force: list[str] | None = None,
    workdir: str | None = None,
) -> None:
    """``dvc repro`` a selected stage instance (`skip_unselected`) in the project folder, or
    in the run's copy (`workdir`) when its conf changed params.yaml, with ``--force`` when
    its stage is in `force`."""
    where = Path(workdir) if workdir else PROJECT_DIR
    skip_unselected(task, stages, where)
    forced = ["--force"] if task.stage in (force or ()) else []
    cmd = [_dvc_executable(), "repro", "--single-item", *forced, task.instance]
    env = _stage_env(run_id)
    if workdir:
        env = run_copy.copy_env(PROJECT_DIR, env)
    log.info("running %s in %s (RULERAG_PIPELINE_RUN=%s)", " ".join(cmd), where, run_id)
    stream_command(cmd, where, env, log.info)


def run_stage_in_workspace(
    task: TaskSpec,
    run_id: str,
    applied: dict[str, Any],
    entries: dict[str, Any],
) -> dict[str, Any]:
    """``dvc repro`` a selected stage instance in a workspace of its own (`skip_unselected`);
    its dvc.lock entry, for downstream tasks and `collect`."""
    skip_unselected(task, applied.get("stages"), Path(applied.get("workdir") or PROJECT_DIR))
    entry = run_in_workspace(
        PROJECT_DIR,
        task.instance,
        list(task.upstream),
        commit=applied["commit"],
        params_text=applied["params_yaml"],
        lock_text=applied.get("lock_yaml"),
        entries=entries,
        settings=SETTINGS,
        env=_stage_env(run_id),
        echo=log.info,
        force=task.stage in (applied.get("force") or ()),
    )
    return {task.instance: entry}


#: how long a task waits for the MLflow store to find its run's link (seconds): MLflow's own
#: timeout bounds each read, and a store that trickles would hold the task
LINK_DEADLINE_S = 30.0


def mlflow_runs_link(instance: str, dataset: str, run_id: str) -> str:
    """Where the MLflow UI (RULERAG_MLFLOW_UI_URL) shows the runs stage instance `instance`
    logged in DAG run `run_id`: the run's page when there is one, else its experiment's runs
    view filtered on the two tags (a retried task's runs, several runs of one stage); ""
    while the store has no experiment for the dataset (nothing logged, or spooled), or when
    it does not answer within LINK_DEADLINE_S."""
    from rulerag.deadline import DeadlineExceeded, within

    try:
        return within(
            LINK_DEADLINE_S,
            lambda: _find_runs_link(instance, dataset, run_id),
            f"the MLflow link of {instance}",
        )
    except DeadlineExceeded as exc:
        log.info("no MLflow link: %s", exc)
        return ""


def _find_runs_link(instance: str, dataset: str, run_id: str) -> str:
    from mlflow import MlflowClient

    from rulerag.tracking.config import resolve_tracking_uri, tracking_project
    from rulerag.tracking.names import TAG_PIPELINE_RUN, TAG_STAGE_INSTANCE, experiment_name

    base = mlflow_ui_base()
    uri = resolve_tracking_uri(tracking_project(PROJECT_DIR))
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        return ""  # no store yet; opening one would create it
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(experiment_name(dataset))
    if experiment is None:
        return ""
    search = tags_filter({TAG_PIPELINE_RUN: run_id, TAG_STAGE_INSTANCE: instance})
    runs = client.search_runs([experiment.experiment_id], search, max_results=2)
    if len(runs) == 1:
        return run_url(base, experiment.experiment_id, runs[0].info.run_id)
    return experiment_runs_url(base, experiment.experiment_id, search)


def log_mlflow_link(task: TaskSpec, run_id: str) -> None:
    """The stage's MLflow run as the last line of its log: the log is the task instance page's
    first tab, where the extra link (`MlflowRunLink`) sits under Details. A link that cannot
    be made (no store yet, no dataset) is left out; it never fails the task."""
    if task.dataset is None:
        return
    try:
        link = mlflow_runs_link(task.instance, task.dataset, run_id)
    except Exception as exc:  # noqa: BLE001 - a link is a convenience, the stage succeeded
        log.info("no MLflow link: %s", exc)
        return
    if link:
        log.info("MLflow run: %s", link)


class MlflowRunLink(BaseOperatorLink):
    """A stage task's extra link "MLflow run". Airflow 3 computes it in the worker when the
    task ends (any state) and keeps it as an XCom (`_link_MlflowRunLink`), which the UI and
    the REST API read back: no plugin is needed for it."""

    name = "MLflow run"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        instance = getattr(operator, "stage_instance", None)
        dataset = getattr(operator, "stage_dataset", None)
        if not instance or not dataset:
            return ""
        return mlflow_runs_link(instance, dataset, str(ti_key.run_id))


class StageOperator(PythonOperator):
    """A stage task: its callable runs as in PythonOperator; the class adds the extra link to
    the MLflow runs of `stage_instance` (a DVC stage instance of `stage_dataset`)."""

    operator_extra_links = (MlflowRunLink(),)

    def __init__(self, *, stage_instance: str, stage_dataset: str | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stage_instance = stage_instance
        self.stage_dataset = stage_dataset


def gpu_pod_override(resource: str) -> dict[str, Any]:
    """KubernetesExecutor: a task pod that asks for one `resource` (e.g. nvidia.com/gpu)."""
    from kubernetes.client import models as k8s

    limits = {resource: "1"}
    container = k8s.V1Container(name="base", resources=k8s.V1ResourceRequirements(limits=limits))
    return {"pod_override": k8s.V1Pod(spec=k8s.V1PodSpec(containers=[container]))}


class ApplyConfOperator(PythonOperator, SkipMixin):
    """`apply_conf`: its callable validates the run's conf and applies it (returning
    what the run selected, as an XCom), then this skips every stage task the run does not
    select, in one call, before any stage task can start: the scheduler never sends them to
    the executor, so an unselected task costs no process (a stage downstream of a skipped one
    still runs: stage tasks are `none_failed`)."""

    def execute(self, context: Any) -> Any:
        applied = super().execute(context)
        # skip() ends the task by an exception, before Airflow would push the return value
        context["ti"].xcom_push(key="return_value", value=applied)
        unselected = set(applied.get("unselected") or ())
        self.skip(context["ti"], [t for t in self.dag.tasks if t.task_id in unselected])
        return applied


def _build_dag(layout: DagLayout) -> DAG:
    """One task per stage instance of `layout` (every known dataset's), in a TaskGroup per
    dataset (and per stage where it has several instances), between `apply_conf` and
    `record_overrides`."""
    by_instance = layout.by_instance()
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

        def apply_conf() -> dict[str, Any]:
            """Validate dag_run.conf and apply it (like dvc exp run -S) in the run's copy."""
            context = get_current_context()
            conf = dict(context["dag_run"].conf or {})
            applied = apply_conf_to_params(conf, str(context["run_id"]))
            workdir = Path(applied["workdir"]) if applied["workdir"] else None
            applied["unselected"] = unselected_task_ids(
                layout, workdir or PROJECT_DIR, applied["stages"]
            )
            log.info(
                "%d of %d stage tasks selected",
                len(layout.tasks) - len(applied["unselected"]),
                len(layout.tasks),
            )
            env = _stage_env(str(context["run_id"]))
            if workdir is not None and SETTINGS.mode != "workspaces":
                # what the selected stages need and the project has built, from the cache
                unselected = set(applied["unselected"])
                wanted = [t.instance for t in layout.tasks if t.full_task_id not in unselected]
                run_copy.checkout(workdir, wanted, run_copy.copy_env(PROJECT_DIR, env), log.info)
            if SETTINGS.mode == "workspaces":  # what each workspace starts from, as text
                push_outputs(PROJECT_DIR, SETTINGS, env, echo=log.info)
                applied.update(
                    commit=head_commit(PROJECT_DIR),
                    params_yaml=((workdir or PROJECT_DIR) / "params.yaml").read_text(
                        encoding="utf-8"
                    ),
                    lock_yaml=DVC_LOCK.read_text(encoding="utf-8") if DVC_LOCK.is_file() else None,
                )
            return applied

        @task(task_id="record_overrides", retries=0)
        def record() -> str | None:
            """Commit a run's params.yaml and dvc.lock to a branch; bring back what it built."""
            context = get_current_context()
            applied = context["ti"].xcom_pull(task_ids="apply_conf") or {}
            return record_overrides(str(context["run_id"]), applied)

        def stage_task(spec: TaskSpec) -> StageOperator:
            routing = {}
            if spec.stage in GPU_STAGES:
                if SETTINGS.gpu_queue:
                    routing["queue"] = SETTINGS.gpu_queue
                if SETTINGS.gpu_pool:
                    routing["pool"] = SETTINGS.gpu_pool
                if SETTINGS.gpu_resource:
                    routing["executor_config"] = gpu_pod_override(SETTINGS.gpu_resource)

            def stage() -> dict[str, Any] | None:
                context = get_current_context()
                ti, run_id = context["ti"], str(context["run_id"])
                applied = ti.xcom_pull(task_ids="apply_conf") or {}
                if SETTINGS.mode != "workspaces":
                    run_stage(
                        spec, run_id, applied.get("stages"), applied.get("force"),
                        applied.get("workdir"),
                    )  # fmt: skip
                    log_mlflow_link(spec, run_id)
                    return None
                entries: dict[str, Any] = {}
                for up in spec.upstream:  # what this run rebuilt upstream (skipped: nothing)
                    entries.update(ti.xcom_pull(task_ids=by_instance[up].full_task_id) or {})
                entry = run_stage_in_workspace(spec, run_id, applied, entries)
                log_mlflow_link(spec, run_id)
                return entry

            def asset(value: Any) -> Asset:
                return Asset(name=value.name, uri=value.uri, group=ASSET_GROUP)

            return StageOperator(
                task_id=spec.task_id,
                python_callable=stage,
                stage_instance=spec.instance,
                stage_dataset=spec.dataset,
                # after its upstream stages when none failed: one the run did not select is
                # skipped, and this one still runs if selected (apply_conf skipped it if
                # not); a root stage follows apply_conf, a setup, which asks all_success
                trigger_rule=TriggerRule.NONE_FAILED if spec.upstream else TriggerRule.ALL_SUCCESS,
                outlets=[asset(spec.outlet)] if spec.outlet is not None else [],
                inlets=[asset(a) for a in spec.inlets],
                doc_md=f"`dvc repro --single-item {spec.instance}`\n\n```\n{spec.cmd}\n```",
                **routing,
            )

        groups: dict[tuple[str, ...], TaskGroup] = {}

        def group_of(path: tuple[str, ...]) -> TaskGroup | None:
            if not path:
                return None
            if path not in groups:
                groups[path] = TaskGroup(path[-1], parent_group=group_of(path[:-1]))
            return groups[path]

        @task(task_id="collect", retries=0, trigger_rule=TriggerRule.ALL_DONE)
        def collect_outputs() -> list[str]:
            """Workspaces mode: every finished stage's dvc.lock entry into the project's
            dvc.lock and its outputs pulled there, whatever else failed (nothing is lost)."""
            context = get_current_context()
            ti = context["ti"]
            entries: dict[str, Any] = {}
            for spec in layout.tasks:
                entries.update(ti.xcom_pull(task_ids=spec.full_task_id) or {})
            env = _stage_env(str(context["run_id"]))
            applied = ti.xcom_pull(task_ids="apply_conf") or {}
            # a run in a copy of its own collects there (record_overrides takes it from there)
            where = Path(applied["workdir"]) if applied.get("workdir") else PROJECT_DIR
            return collect(where, entries, SETTINGS, env, echo=log.info)

        # apply_conf precedes every stage (the roots directly, the rest through them) and skips
        # the unselected ones before any can start. record_overrides is a teardown: it runs
        # whatever happened, after every stage (a stage skipped at the start may sit upstream
        # of nothing but be downstream of one still running), and the run's state is the
        # stages' (a failed stage fails the run even though the teardown succeeds).
        first = ApplyConfOperator(task_id="apply_conf", python_callable=apply_conf, retries=0)
        last = record().as_teardown(setups=first)
        gather = collect_outputs() if SETTINGS.mode == "workspaces" else None
        if gather is not None:
            gather >> last
        tasks: dict[str, StageOperator] = {}
        for spec in layout.tasks:
            group = group_of(spec.group)
            with group if group is not None else contextlib.nullcontext():
                tasks[spec.instance] = stage_task(spec)
            if not spec.upstream:
                first >> tasks[spec.instance]
            for up in spec.upstream:
                tasks[up] >> tasks[spec.instance]
            tasks[spec.instance] >> (gather if gather is not None else last)
    return dag


rulerag_dag = _build_dag(LAYOUT)
