"""What the tasks of the Airflow DAG `rulerag` do (dags/rulerag_dag.py builds the DAG from
these and the layout): the trigger form, `apply_conf` (the run plan, a run copy when the conf
changes params.yaml), a stage task (`dvc repro --single-item` in the project, the run's copy or
a workspace of its own), `record_overrides`, and the link from a stage task to its MLflow runs.

Every function takes the project folder: the DAG file names it once (RULERAG_PROJECT_DIR, else
the parent of dags/). What a run is comes from `run_plan.plan_run`, the same code the KFP tasks
and `make run` use.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import BaseOperatorLink, Param
from airflow.sdk.bases.skipmixin import SkipMixin
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from rulerag.orchestration import run_copy
from rulerag.orchestration.dag_layout import TaskSpec, selected_instances
from rulerag.orchestration.dag_settings import DagSettings
from rulerag.orchestration.mlflow_links import (
    experiment_runs_url,
    mlflow_ui_base,
    run_url,
    tags_filter,
)
from rulerag.orchestration.run_plan import plan_run, stage_env
from rulerag.orchestration.workspaces import (
    dvc_executable,
    run_in_workspace,
    stream_command,
)
from rulerag.params import read_params_file

__all__ = [
    "ApplyConfOperator",
    "LINK_DEADLINE_S",
    "MlflowRunLink",
    "StageOperator",
    "apply_conf_to_params",
    "gpu_pod_override",
    "log_mlflow_link",
    "mlflow_runs_link",
    "record_overrides",
    "run_stage",
    "run_stage_in_workspace",
    "skip_unselected",
    "trigger_params",
]

log = logging.getLogger("rulerag.dag")


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


def apply_conf_to_params(
    project: Path, conf: dict[str, Any] | None, run_id: str = "manual"
) -> dict[str, Any]:
    """Plan the run (`run_plan.plan_run`: the conf validated, applied to a private copy of
    params.yaml's text, the instances it selects); return the plan's summary and where it runs.

    A conf that changes params.yaml gets the run a copy of its own (`run_copy.create`: a git
    worktree with the run's params.yaml, sharing the project's DVC cache), named in the
    result's ``workdir``; the project's params.yaml is never written, so an edit made to it
    during the run stays. A bad conf fails the run at once without retries: retrying cannot
    make it valid.
    """
    try:
        plan = plan_run(project, conf, run_tag=run_id)
    except ValueError as exc:
        raise AirflowFailException(f"invalid run conf: {exc}") from exc
    workdir = None
    if plan.changed:
        try:
            workdir = run_copy.create(project, run_id, plan.params_text, plan.env(), log.info)
        except run_copy.BranchExists as exc:
            raise AirflowFailException(str(exc)) from exc
    log.info(
        "%s; datasets: %s",
        f"the run's params.yaml is in {workdir}" if plan.changed else "params.yaml unchanged",
        ", ".join(plan.datasets),
    )
    return {**plan.summary(), "workdir": None if workdir is None else str(workdir)}


def record_overrides(project: Path, run_id: str, applied: dict[str, Any]) -> str | None:
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
        branch, commit = run_copy.record(project, run_id, copy)
    except Exception as exc:
        raise AirflowFailException(f"{exc} (the run's copy is kept: {copy})") from exc
    log.info("the run's params.yaml and dvc.lock are branch %s (%s)", branch, commit)
    if not run_copy.bring_back(project, copy, log.info):
        log.info("git checkout %s -- params.yaml dvc.lock && dvc checkout: the run", branch)
    run_copy.remove(project, copy)
    return branch


def skip_unselected(task: TaskSpec, stages: list[str] | None, workdir: Path) -> None:
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
    project: Path,
    task: TaskSpec,
    run_id: str,
    stages: list[str] | None = None,
    force: list[str] | None = None,
    workdir: str | None = None,
) -> None:
    """``dvc repro`` a selected stage instance (`skip_unselected`) in the project folder, or
    in the run's copy (`workdir`) when its conf changed params.yaml, with ``--force`` when
    its stage is in `force`."""
    where = Path(workdir) if workdir else project
    skip_unselected(task, stages, where)
    forced = ["--force"] if task.stage in (force or ()) else []
    env = stage_env(run_id)
    if workdir:
        env = run_copy.copy_env(project, env)
    cmd = [dvc_executable(env), "repro", "--single-item", *forced, task.instance]
    log.info("running %s in %s (RULERAG_PIPELINE_RUN=%s)", " ".join(cmd), where, run_id)
    stream_command(cmd, where, env, log.info)


def run_stage_in_workspace(
    project: Path,
    settings: DagSettings,
    task: TaskSpec,
    run_id: str,
    applied: dict[str, Any],
    entries: dict[str, Any],
) -> dict[str, Any]:
    """``dvc repro`` a selected stage instance in a workspace of its own (`skip_unselected`);
    its dvc.lock entry, for downstream tasks and `collect`."""
    skip_unselected(task, applied.get("stages"), Path(applied.get("workdir") or project))
    entry = run_in_workspace(
        project,
        task.instance,
        list(task.upstream),
        commit=applied["commit"],
        params_text=applied["params_yaml"],
        lock_text=applied.get("lock_yaml"),
        entries=entries,
        settings=settings,
        env=stage_env(run_id),
        echo=log.info,
        force=task.stage in (applied.get("force") or ()),
    )
    return {task.instance: entry}


#: how long a task waits for the MLflow store to find its run's link (seconds): MLflow's own
#: timeout bounds each read, and a store that trickles would hold the task
LINK_DEADLINE_S = 30.0


def mlflow_runs_link(project: Path, instance: str, dataset: str, run_id: str) -> str:
    """Where the MLflow UI (RULERAG_MLFLOW_UI_URL) shows the runs stage instance `instance`
    logged in DAG run `run_id`: the run's page when there is one, else its experiment's runs
    view filtered on the two tags (a retried task's runs, several runs of one stage); ""
    while the store has no experiment for the dataset (nothing logged, or spooled), or when
    it does not answer within LINK_DEADLINE_S."""
    from rulerag.deadline import DeadlineExceeded, within

    try:
        return within(
            LINK_DEADLINE_S,
            lambda: _find_runs_link(project, instance, dataset, run_id),
            f"the MLflow link of {instance}",
        )
    except DeadlineExceeded as exc:
        log.info("no MLflow link: %s", exc)
        return ""


def _find_runs_link(project: Path, instance: str, dataset: str, run_id: str) -> str:
    from mlflow import MlflowClient

    from rulerag.tracking.config import resolve_tracking_uri, tracking_project
    from rulerag.tracking.names import TAG_PIPELINE_RUN, TAG_STAGE_INSTANCE, experiment_name

    base = mlflow_ui_base()
    uri = resolve_tracking_uri(tracking_project(project))
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


def log_mlflow_link(project: Path, task: TaskSpec, run_id: str) -> None:
    """The stage's MLflow run as the last line of its log: the log is the task instance page's
    first tab, where the extra link (`MlflowRunLink`) sits under Details. A link that cannot
    be made (no store yet, no dataset) is left out; it never fails the task."""
    if task.dataset is None:
        return
    try:
        link = mlflow_runs_link(project, task.instance, task.dataset, run_id)
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
        project = getattr(operator, "stage_project", None)
        if not instance or not dataset or not project:
            return ""
        return mlflow_runs_link(Path(project), instance, dataset, str(ti_key.run_id))


class StageOperator(PythonOperator):
    """A stage task: its callable runs as in PythonOperator; the class adds the extra link to
    the MLflow runs of `stage_instance` (a DVC stage instance of `stage_dataset`, in the
    project folder `stage_project`)."""

    operator_extra_links = (MlflowRunLink(),)

    def __init__(
        self, *, stage_instance: str, stage_dataset: str | None, stage_project: str, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.stage_instance = stage_instance
        self.stage_dataset = stage_dataset
        self.stage_project = stage_project


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
