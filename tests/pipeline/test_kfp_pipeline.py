"""The Kubeflow pipeline compiled from dvc.yaml: its IR YAML mirrors DVC's own stage graph, and
a local run through KFP's subprocess runner leaves the project as a serial ``dvc repro`` does.

The KFP SDK lives in a venv of its own (`make setup-kfp`: .venv/kfp, or RULERAG_KFP_PYTHON);
everything of it runs in subprocesses, as `make kfp` and `make kfp-local` run it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rulerag.orchestration.dag_settings import GPU_STAGES
from rulerag.orchestration.project_copy import copy_project, cut_project
from tests.support.serial_compare import data_digests, lock_entries, serial_repro

PROJECT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
KFP_PYTHON = Path(
    os.environ.get("RULERAG_KFP_PYTHON") or PROJECT / ".venv" / "kfp" / "bin" / "python"
)
STAGE_PARAMETERS = {"datasets", "stages", "params", "commit", "collect_into_project"}


def kfp_env(**extra: str) -> dict[str, str]:
    """The project's venv first on PATH (the stages' `python` and `dvc`), this checkout's code."""
    env = dict(os.environ)
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", DVC_NO_ANALYTICS="1")
    env.pop("RULERAG_PIPELINE_RUN", None)
    env.update(extra)
    return env


def kfp(args: list[str], project: Path, env: dict[str, str], timeout: int = 120) -> str:
    """`python -m rulerag.orchestration.kfp_pipeline ARGS` in the KFP SDK's venv, as make does."""
    assert KFP_PYTHON.is_file(), f"no KFP SDK venv at {KFP_PYTHON}: run `make setup-kfp`"
    done = subprocess.run(
        [str(KFP_PYTHON), "-m", "rulerag.orchestration.kfp_pipeline", "--project-dir",
         str(project), *args],
        cwd=project, env={**env, "PYTHONPATH": str(project)}, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, f"{args[0]}: {done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    return done.stdout


def kfp_name(instance: str) -> str:
    return re.sub("-+", "-", re.sub("[^-0-9a-z]+", "-", instance.lower())).strip("-")


def dvc_graph(project: Path) -> dict[str, list[str]]:
    """DVC's own view of the project: stage instance -> the instances it depends on."""
    from dvc.repo import Repo

    repo = Repo(str(project))
    try:
        graph = repo.index.graph  # edges point from a stage to the stages it depends on
        return {
            stage.name: sorted(up.name for up in graph.successors(stage))
            for stage in repo.index.stages
        }
    finally:
        repo.close()


@pytest.mark.slow
def test_make_kfp_compiles_the_stage_graph_of_the_chosen_datasets(tmp_path: Path) -> None:
    """Every stage instance of the chosen datasets is a task running `dvc repro --single-item`
    on it, every edge of DVC's graph a dependency; GPU stages ask for a GPU, stage tasks
    retry, KFP's cache is off; the run's choices are pipeline parameters."""
    project = copy_project(tmp_path / "project")
    datasets = ["icews14", "wiki"]
    stages = list(yaml.safe_load((project / "dvc.yaml").read_text())["stages"])
    cut_project(project, stages, datasets)  # params.yaml: these datasets, so DVC sees them
    theirs = dvc_graph(project)
    assert {name.split("@")[1].split("-")[0] for name in theirs} == set(datasets)

    out = tmp_path / "pipeline.yaml"
    kfp(["compile", "--output", str(out), "--env", "RULERAG_DVC_REMOTE=minio",
         "--secret", "rulerag-dvc"], project, kfp_env())  # fmt: skip
    # the pipeline, then its Kubernetes settings (kfp-kubernetes: the secret)
    spec, platform = yaml.safe_load_all(out.read_text())
    assert spec["pipelineInfo"]["name"] == "rulerag"
    assert set(spec["root"]["inputDefinitions"]["parameters"]) == STAGE_PARAMETERS
    tasks = spec["root"]["dag"]["tasks"]
    # prepare takes the run's choices from the pipeline's parameters, the run id from KFP
    wired = tasks["prepare"]["inputs"]["parameters"]
    for name in ("datasets", "stages", "params", "commit"):
        assert wired[name] == {"componentInputParameter": name}
    assert wired["run_id"]["runtimeValue"]["constant"] == "{{$.pipeline_job_uuid}}"
    executors = spec["deploymentSpec"]["executors"]
    links = sorted((k for k in tasks if k.startswith("collect")), key=lambda k: (len(k), k))
    stage_tasks = {k: t for k, t in tasks.items() if k != "prepare" and k not in links}
    by_instance = {t["inputs"]["parameters"]["instance"]["runtimeValue"]["constant"]: (k, t)
                   for k, t in stage_tasks.items()}  # fmt: skip
    assert set(by_instance) == set(theirs)
    assert len(stage_tasks) == len(theirs)
    for instance, (key, task) in by_instance.items():
        assert key == kfp_name(instance) and task["taskInfo"]["name"] == instance
        wanted = {kfp_name(up) for up in theirs[instance]} | {"prepare"}
        assert set(task["dependentTasks"]) == wanted, instance
        assert task["retryPolicy"]["maxRetryCount"] == 1
        assert not task["cachingOptions"].get("enableCache")
        container = executors[spec["components"][task["componentRef"]["name"]]["executorLabel"]]
        container = container["container"]
        code = container["command"][-1]
        assert "rulerag.orchestration.kfp_tasks" in code and '"run-stage"' in code
        assert "pip install" not in " ".join(container["command"])
        gpu = instance.split("@")[0] in GPU_STAGES
        assert container["image"] == ("rulerag-gpu:latest" if gpu else "rulerag-cpu:latest")
        accelerator = container.get("resources", {}).get("accelerator", {})
        gpu_ask = {"count": "1", "resourceCount": "1", "resourceType": "nvidia.com/gpu",
                   "type": "nvidia.com/gpu"}  # fmt: skip
        assert accelerator == (gpu_ask if gpu else {})
        assert {"name": "RULERAG_DVC_REMOTE", "value": "minio"} in container["env"]
    # `collect` is a chain of links, each after a few stage tasks and the link before it
    assert links[0] == "collect" and links[1:] == [f"collect-{i}" for i in range(1, len(links))]
    chain = [*links[1:], "collect"]
    gathered: list[str] = []
    for number, link in enumerate(chain):
        ups = set(tasks[link]["dependentTasks"]) - {"prepare"}
        before = {chain[number - 1]} if number else set()
        assert before <= ups and 0 < len(ups - before) <= 8, (link, ups)
        gathered += sorted(ups - before)
    assert sorted(gathered) == sorted(stage_tasks)
    assert any(instance.split("@")[0] in GPU_STAGES for instance in theirs)
    # the DVC remote's credentials come from a Kubernetes secret, never from the YAML
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert len(k8s) == len(executors)
    for config in k8s.values():
        assert [s["secretName"] for s in config["secretAsEnv"]] == ["rulerag-dvc"]
        keys = {m["secretKey"] for s in config["secretAsEnv"] for m in s["keyToEnv"]}
        assert keys == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert "AWS_SECRET_ACCESS_KEY=" not in out.read_text()


def test_compile_refuses_credentials_in_the_tasks_environment(tmp_path: Path) -> None:
    """`compile --env MLFLOW_TRACKING_URI=http://admin:<secret>@mlflow:5000
    AWS_SECRET_ACCESS_KEY=<secret>` wrote the secret into every task of the YAML in plain
    text (117 times for the whole graph). It is refused before anything is compiled: no YAML,
    a message that names both keys and `--secret`, and the secret in no output."""
    assert KFP_PYTHON.is_file(), f"no KFP SDK venv at {KFP_PYTHON}: run `make setup-kfp`"
    secret = "hunter2-s3cr3t"
    out = tmp_path / "kfp" / "pipeline.yaml"
    done = subprocess.run(
        [str(KFP_PYTHON), "-m", "rulerag.orchestration.kfp_pipeline", "--project-dir",
         str(PROJECT), "compile", "--output", str(out), "--env", "RULERAG_DVC_REMOTE=minio",
         f"MLFLOW_TRACKING_URI=http://admin:{secret}@mlflow:5000",
         f"AWS_SECRET_ACCESS_KEY={secret}"],
        cwd=tmp_path, env={**kfp_env(), "PYTHONPATH": str(PROJECT)}, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-4000:]
    assert "kfp: KFP --env carries credentials" in done.stderr, said[-4000:]
    assert "AWS_SECRET_ACCESS_KEY: names a secret" in done.stderr
    assert "MLFLOW_TRACKING_URI: its value holds URL credentials" in done.stderr
    assert "--secret NAME" in done.stderr
    assert secret not in said
    assert not out.exists() and not out.parent.exists()


@pytest.mark.slow
@pytest.mark.data
def test_a_local_kfp_run_equals_a_serial_dvc_repro(kg_mirror: Path, tmp_path: Path) -> None:
    """`ingest` and `mine_rules` of NELL-995 (the project's dvc.yaml cut to them) through the
    compiled pipeline in kfp.local: each stage task in a workspace over a local DVC remote,
    then `collect`. The project ends byte-identical to a serial `dvc repro` of the same
    instances, `dvc status` clean, and the stages' MLflow runs carry the KFP run's tag."""
    dataset, stages = "nell995", ["ingest", "mine_rules"]
    names = [f"{stage}@{dataset}" for stage in stages]
    env = kfp_env(RULERAG_DATA_DIR=str(kg_mirror))

    serial_store = f"sqlite:///{tmp_path / 'serial' / 'mlflow.db'}"
    serial, serial_s = serial_repro(
        tmp_path / "serial", stages, [dataset], {**env, "MLFLOW_TRACKING_URI": serial_store}
    )

    project = copy_project(tmp_path / "project")
    cut_project(project, stages, [dataset])
    remote = tmp_path / "remote"
    subprocess.run([str(BIN / "dvc"), "remote", "add", "-d", "--local", "store", str(remote)],
                   cwd=project, env=env, check=True, capture_output=True)  # fmt: skip
    pipeline = tmp_path / "pipeline.yaml"
    kfp(["compile", "--output", str(pipeline)], project, env)
    store = f"sqlite:///{project / 'mlflow.db'}"
    run_env = {**env, "MLFLOW_TRACKING_URI": store,
               "RULERAG_WORKSPACE_ROOT": str(tmp_path / "workspaces")}  # fmt: skip
    timings = tmp_path / "timings.json"
    kfp(["run-local", "--pipeline", str(pipeline), "--pipeline-root", str(tmp_path / "kfp"),
         "--timings", str(timings)], project, run_env, timeout=900)  # fmt: skip
    summary = json.loads(timings.read_text())
    print(f"serial dvc repro: {serial_s:.1f} s; kfp.local run: {summary['seconds']:.1f} s")
    assert summary["ran"] == summary["collected"] == sorted(names)
    assert re.fullmatch(r"kfp-[0-9A-Za-z._-]+", summary["run"])

    assert data_digests(project) == data_digests(serial)
    assert data_digests(project)  # something was compared
    assert lock_entries(project, names) == lock_entries(serial, names)
    status = subprocess.run([str(BIN / "dvc"), "status", "--json"], cwd=project, env=env,
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert json.loads(status.stdout) == {}, status.stdout
    assert not list((tmp_path / "workspaces").iterdir())

    # a bad choice fails the run in `prepare`, before any stage task starts
    failed = subprocess.run(
        [str(KFP_PYTHON), "-m", "rulerag.orchestration.kfp_pipeline", "run-local", "--pipeline",
         str(pipeline), "--pipeline-root", str(tmp_path / "kfp"), "--datasets", "atlantis"],
        cwd=project, env={**run_env, "PYTHONPATH": str(project)}, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    said = failed.stdout + failed.stderr
    assert failed.returncode == 1 and "unknown dataset 'atlantis'" in said, said[-4000:]
    assert "Inner task failed: 'prepare'" in said.replace("\x1b[96m", "").replace("\x1b[0m", "")

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name(f"rulerag/{dataset}")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    # one parent run for the KFP run, every stage run nested under it
    (parent,) = [r for r in runs if r.data.tags.get("rulerag.run_kind") == "pipeline"]
    runs = [r for r in runs if r is not parent]
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {parent.info.run_id}
    assert parent.data.tags["rulerag.pipeline_run"] == summary["run"]
    assert sorted(r.data.tags["rulerag.stage"] for r in runs) == sorted(stages)
    assert {r.data.tags["rulerag.pipeline_run"] for r in runs} == {summary["run"]}

    # a run with params overrides keeps its results out of the project (it used to collect
    # them: `dvc status` then said ingest@nell995's params were modified, without a word);
    # the project's dvc.lock stays the one its params.yaml matches, and the run says where
    # its own dvc.lock is
    lock_before = (project / "dvc.lock").read_bytes()
    said = kfp(["run-local", "--pipeline", str(pipeline), "--pipeline-root",
                str(tmp_path / "kfp"), "--stages", "ingest", "--param",
                "ingest.duplicates=keep"], project, run_env, timeout=900)  # fmt: skip
    assert (project / "dvc.lock").read_bytes() == lock_before
    status = subprocess.run([str(BIN / "dvc"), "status", "--json"], cwd=project, env=env,
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert json.loads(status.stdout) == {}, status.stdout
    assert "not collected into the project" in said, said[-4000:]
    found = re.search(r"the run's dvc\.lock: (\S+)", said)
    assert found, said[-4000:]
    run_lock = yaml.safe_load(Path(found[1]).read_text(encoding="utf-8"))["stages"]
    assert run_lock[names[0]]["params"]["params.yaml"]["ingest"]["duplicates"] == "keep"
    assert f"dvc pull {names[0]}" in said
