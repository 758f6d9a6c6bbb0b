"""The Kubeflow pipeline's tasks on the project, without kfp: the graph the compiler reads (DVC's
own parser as the ground truth), the run state `prepare` writes from a conf checked like an
Airflow run conf, an unselected stage task, the collect chain's links."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rulerag.orchestration.kfp_tasks import (
    StateError,
    collect,
    graph,
    pack_entries,
    prepare,
    run_stage,
)
from rulerag.orchestration.project_copy import copy_project
from rulerag.params import read_params_file

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[2]
ENTRY = {
    "cmd": "python -m pipeline_steps.ingest",
    "outs": [{"path": "data/icews14/kg", "hash": "md5", "md5": "0123abcd.dir", "size": 12}],
}


def test_the_graph_is_dvcs() -> None:
    """Instances, commands and edges as DVC's own parser sees the project (params.yaml's
    datasets), in an order where every instance comes after its upstreams."""
    from dvc.repo import Repo

    ours = graph(PROJECT)
    repo = Repo(str(PROJECT))
    try:
        stages = {s.name: s for s in repo.index.stages}
        dvc_graph = repo.index.graph  # edges point from a stage to the stages it depends on
        theirs = {
            name: (stage.cmd, sorted(up.name for up in dvc_graph.successors(stage)))
            for name, stage in stages.items()
        }
    finally:
        repo.close()
    assert ours["datasets"] == read_params_file(PROJECT / "params.yaml")["datasets"]
    assert {i["name"]: (i["cmd"], sorted(i["upstream"])) for i in ours["instances"]} == theirs
    seen: set[str] = set()
    for inst in ours["instances"]:
        assert set(inst["upstream"]) <= seen, inst["name"]
        seen.add(inst["name"])


def test_graph_refuses_an_unknown_dataset() -> None:
    with pytest.raises(ValueError, match="unknown dataset 'atlantis'"):
        graph(PROJECT, ["atlantis"])


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One project copy for the module: `prepare` reads it and writes only its state folder."""
    return copy_project(tmp_path_factory.mktemp("kfp") / "project")


def _prepare(project: Path, state: Path, **conf: object) -> dict:
    compiled = conf.pop("compiled", None)
    names = [i["name"] for i in graph(project)["instances"]] if compiled is None else compiled
    return prepare(
        datasets=conf.get("datasets"), stages=conf.get("stages"), params=conf.get("params"),
        commit=str(conf.get("commit", "")), compiled=names, compiled_datasets=["icews14"],
        run_id="123", state_dir=state, project=project, env={},
    )  # fmt: skip


def test_prepare_writes_the_runs_params_and_selection(project: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    run = _prepare(project, state, stages=["ingest", "mine_rules"],
                   params={"ingest.duplicates": "error"})  # fmt: skip
    assert run["selected"] == ["ingest@icews14", "mine_rules@icews14"]
    assert run["params"] == {"ingest.duplicates": "error"}
    assert len(run["commit"]) == 40 and run["run_id"] == "123"
    assert json.loads((state / "run.json").read_text()) == run
    text = (state / "params.yaml").read_text()
    assert read_params_file(state / "params.yaml")["ingest"]["duplicates"] == "error"
    # written like `dvc exp run -S`: the comments stay, the project's file is untouched
    assert text.count("#") == (project / "params.yaml").read_text().count("#")
    assert read_params_file(project / "params.yaml")["ingest"]["duplicates"] != "error"

    # an instance this run does not select returns no entry and starts nothing
    skipped = run_stage(instance="index@icews14", upstream=[], upstream_tokens="",
                        state_dir=state, project=project, env={})  # fmt: skip
    assert skipped == {"entry": "", "pull": ""}
    with pytest.raises(StateError, match="does not depend on"):
        run_stage(instance="mine_rules@icews14", upstream=["ingest@icews14"],
                  upstream_tokens=pack_entries({"ingest@wiki": ENTRY}), state_dir=state,
                  project=project, env={})  # fmt: skip
    # the collect chain: each link adds its entries to the lock the previous one wrote
    first, second = tmp_path / "link1", tmp_path / "link2"
    summary = collect(tokens=pack_entries({"ingest@icews14": ENTRY}), state_dir=state,
                      previous_dir=state, lock_dir=first, into_project=False, project=project,
                      env={})  # fmt: skip
    assert summary["run"] == "kfp-123" and summary["ran"] == ["ingest@icews14"]
    other = {**ENTRY, "cmd": "python -m pipeline_steps.mine_rules"}
    summary = collect(tokens=pack_entries({"mine_rules@icews14": other}), state_dir=state,
                      previous_dir=first, lock_dir=second, into_project=False, project=project,
                      env={})  # fmt: skip
    assert summary["ran"] == ["ingest@icews14", "mine_rules@icews14"]
    lock = read_params_file(second / "dvc.lock")  # YAML, as DVC reads it
    assert lock["stages"] == {"ingest@icews14": ENTRY, "mine_rules@icews14": other}
    assert not (project / "dvc.lock").exists()


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"params": {"ingest.nope": 1}}, "unknown key 'ingest.nope'"),
        ({"params": {"ingest.duplicates": "sometimes"}}, "ingest"),
        ({"stages": ["ingset"]}, "unknown stage"),
        ({"datasets": ["nell995"]}, "compiled for icews14; recompile"),
        ({"datasets": ["atlantis"]}, "unknown dataset 'atlantis'"),
        ({"compiled": ["ingest@icews14"]}, "no task for: mine_rules@icews14"),
        ({"commit": "--upload-pack=touch /tmp/x"}, "a commit's hex id"),
        ({"datasets": "icews14"}, "must be a non-empty list"),
    ],
)
def test_prepare_refuses_a_bad_run(project: Path, tmp_path: Path, conf: dict, message: str) -> None:
    """The checks of an Airflow run conf, and a params.yaml that would need tasks the
    compiled pipeline lacks; nothing is written."""
    with pytest.raises(ValueError, match=message):
        _prepare(project, tmp_path / "state", **conf)
    assert not (tmp_path / "state" / "run.json").exists()


def test_a_task_without_state_says_so(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="no run state"):
        run_stage(instance="ingest@icews14", upstream=[], upstream_tokens="",
                  state_dir=tmp_path, project=PROJECT, env={})  # fmt: skip
