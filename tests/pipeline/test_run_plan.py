"""One run plan (`run_plan.plan_run`) for the Airflow DAG, the KFP tasks and `make run`: what it
works out from a conf, checked against DVC's own parser and params.yaml, and the proof that
the DAG's `apply_conf` and KFP's `prepare` now plan the same run for the same conf."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rulerag.orchestration.project_copy import copy_project
from rulerag.orchestration.run_plan import (
    PIPELINE_RUN_ENV,
    plan_run,
    stage_env,
    without_empty_fields,
)
from rulerag.params import read_params_file

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project copy for the module: planning writes nothing in it (the tests check)."""
    return copy_project(tmp_path_factory.mktemp("plan") / "project")


def dvc_instances(project: Path) -> list[str]:
    """The stage instances DVC itself generates from the project's params.yaml."""
    from dvc.repo import Repo

    repo = Repo(str(project))
    try:
        return sorted(stage.name for stage in repo.index.stages)
    finally:
        repo.close()


def test_the_empty_conf_plans_what_dvc_repro_runs(project: Path) -> None:
    before = (project / "params.yaml").read_text()
    plan = plan_run(project, {"datasets": [], "stages": None, "params": {}, "force": []})
    assert not plan.changed and plan.params_text == before
    assert list(plan.datasets) == read_params_file(project / "params.yaml")["datasets"]
    assert sorted(plan.selected) == dvc_instances(project)
    assert plan.stages is None and plan.force == () and dict(plan.params) == {}


def test_a_conf_plans_its_params_and_selection_without_writing(project: Path) -> None:
    before = (project / "params.yaml").read_text()
    conf = {"datasets": ["nell995"], "stages": ["ingest", "mine_rules"],
            "params": {"ingest.duplicates": "error"}, "force": ["ingest"]}  # fmt: skip
    plan = plan_run(project, conf, run_tag="r1")
    assert plan.changed and (project / "params.yaml").read_text() == before
    assert plan.selected == ("ingest@nell995", "mine_rules@nell995")  # dependency order
    assert plan.datasets == ("nell995",) and plan.forces("ingest") and not plan.forces("index")
    assert "duplicates: error" in plan.params_text
    # written like `dvc exp run -S`: every comment stays
    assert plan.params_text.count("#") == before.count("#")
    assert plan.env({"PATH": "/bin"})[PIPELINE_RUN_ENV] == "r1"
    assert json.loads(json.dumps(plan.summary()))["selected"] == list(plan.selected)


def test_a_bad_conf_names_every_problem(project: Path) -> None:
    conf = {"stages": ["ingset"], "params": {"ingest.nope": 1}, "colour": "red"}
    with pytest.raises(ValueError) as caught:
        plan_run(project, conf)
    message = str(caught.value)
    assert "ingset" in message and "ingest.nope" in message and "colour" in message


def test_empty_fields_mean_as_params_yaml_has_it() -> None:
    conf = {"datasets": [], "stages": None, "params": {}, "force": (), "other": []}
    assert without_empty_fields(conf) == {"other": []}  # the validator names the stranger
    env = stage_env("", {"PATH": "/bin"})
    assert PIPELINE_RUN_ENV not in env and env["PATH"].startswith(str(Path(sys.executable).parent))


@pytest.mark.slow  # Airflow's task module is imported; a run copy is a git worktree
@pytest.mark.parametrize(
    "conf",
    [
        {},
        {"stages": ["ingest"]},
        {
            "datasets": ["nell995", "icews14"],
            "stages": ["ingest", "mine_rules"],
            "params": {"ingest.duplicates": "error"},
        },  # fmt: skip
    ],
    ids=["empty", "stages", "datasets-and-params"],
)
def test_the_dag_and_kfp_plan_the_same_run(tmp_path: Path, conf: dict) -> None:
    """The same conf through the DAG's `apply_conf` and KFP's `prepare` (compiled for every
    known dataset): the same datasets, stages, overrides and selected instances, and the same
    params.yaml text (the Airflow run copy's, KFP's run state's)."""
    pytest.importorskip("airflow")
    from rulerag.orchestration import run_copy
    from rulerag.orchestration.airflow_tasks import apply_conf_to_params
    from rulerag.orchestration.dag_layout import build_layout
    from rulerag.orchestration.kfp_tasks import prepare

    project = copy_project(tmp_path / "project")
    layout = build_layout(project, {})
    airflow = apply_conf_to_params(project, conf, run_id="same-plan")
    kfp = prepare(
        datasets=conf.get("datasets"), stages=conf.get("stages"), params=conf.get("params"),
        commit="", compiled=[t.instance for t in layout.tasks],
        compiled_datasets=list(layout.datasets), run_id="same-plan",
        state_dir=tmp_path / "state", project=project, env={"PATH": ""},
    )  # fmt: skip
    for key in ("datasets", "stages", "params", "force", "selected"):
        assert airflow[key] == kfp[key], key
    workdir = Path(airflow["workdir"]) if airflow["workdir"] else project
    assert (workdir / "params.yaml").read_text() == (tmp_path / "state" / "params.yaml").read_text()
    assert airflow["changed"] == bool(conf.get("datasets") or conf.get("params"))
    if airflow["workdir"]:
        run_copy.remove(project, workdir)


def test_make_run_checks_and_prints_the_plan(project: Path) -> None:
    """`make run`'s first step, on the project and with a conf that does not fit."""
    cmd = [sys.executable, "-m", "rulerag.orchestration.run_plan", "--project-dir", str(project)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          env={"PATH": "", "OPENAI_API_KEY": "unused"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"stage instances of {', '.join(plan_run(project, {}).datasets)}" in done.stdout
    bad = subprocess.run([*cmd, "--conf", '{"stages": ["ingset"]}'], capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert bad.returncode == 2 and "ingset" in bad.stderr and "Traceback" not in bad.stderr
