"""The images `make images` built, for real: what they hold, and stages run in the CPU image
on the project bind-mounted give the host's outputs byte for byte, their MLflow runs in the
stack's tracking server (docker/compose.yaml's `mlflow` on its Postgres).

Marker `docker`: `make test-docker` runs these (an engine, the images, minutes), `make test`
does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from benchmarks.compare_runs import compare
from rulerag.orchestration.project_copy import copy_project, cut_project
from tests.support.compose_stack import docker, image_settings, require_docker, running_stack

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.xdist_group("docker")]

BIN = Path(sys.executable).parent
IMAGE = "rulerag-cpu:latest"


def lock_stages(project: Path) -> dict:
    return yaml.safe_load((project / "dvc.lock").read_text(encoding="utf-8"))["stages"]


def test_the_cpu_image_holds_the_project_and_its_tools() -> None:
    require_docker()
    probe = (
        "import sys, torch, rulerag, airflow, mlflow, dvc, pyserini; "
        "print(sys.version.split()[0], torch.__version__, torch.version.cuda)"
    )
    out = docker("run", "--rm", IMAGE, "python", "-c", probe).split()
    assert out[0].startswith("3.11.") and out[1].startswith("2.13.0") and out[2] == "None"
    # KFP's executor, as a component's command runs it (kfp without its dependencies: its
    # runtime mode, _KFP_RUNTIME, imports none of them)
    docker("run", "--rm", "-e", "_KFP_RUNTIME=true", IMAGE, "python", "-c",
           "import kfp.dsl.executor_main")  # fmt: skip
    java = subprocess.run(["docker", "run", "--rm", IMAGE, "java", "-version"],
                          capture_output=True, text=True)  # fmt: skip
    assert java.returncode == 0 and 'version "17' in java.stderr
    assert docker("run", "--rm", IMAGE, "id", "-u").strip() == "1000"  # not root
    settings = image_settings()
    for key in ("RULERAG_POSTGRES_IMAGE", "RULERAG_REDIS_IMAGE", "RULERAG_S3_IMAGE"):
        docker("image", "inspect", settings[key])


@pytest.mark.data
def test_stages_in_the_image_equal_the_hosts_and_log_to_the_stacks_server(
    kg_mirror: Path, tmp_path: Path
) -> None:
    """ingest, mine_rules and build_benchmark of NELL-995, then ICEWS14's (its default graph's
    first stages, the BM25 index, Java in the image, and the retrieval with it), in the CPU
    image with the project bind-mounted and the KG mirror at its host path (its path is
    provenance in the outputs): every output equals the same stages' on the host byte for byte
    (`benchmarks/compare_runs.py`'s verdicts: no file different or on one side; the BM25 index
    files differ between any two runs, on one machine too, and the retrieval through them is
    identical), as do the dvc.lock entries up to the index; the runs are in the stack's MLflow
    server."""
    require_docker()
    names = {
        "nell995": ["ingest", "mine_rules", "build_benchmark"],
        "icews14": ["ingest", "mine_rules", "build_benchmark", "index"],
    }
    stages = ["ingest", "mine_rules", "build_benchmark", "index", "retrieve"]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "RULERAG_DATA_DIR": str(kg_mirror), "DVC_NO_ANALYTICS": "1"}  # fmt: skip
    host = copy_project(tmp_path / "host")
    cut_project(host, stages, list(names))
    before_index = [f"{s}@{d}" for d, ss in names.items() for s in ss if s != "index"]
    instances = [*before_index, "index@icews14-bm25", "retrieve@icews14-bm25-standard"]
    started = time.monotonic()
    done = subprocess.run(
        [str(BIN / "dvc"), "repro", "--single-item", *instances], cwd=host,
        env={**env, "MLFLOW_TRACKING_URI": f"sqlite:///{host / 'mlflow.db'}"},
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    host_s = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    boxed = copy_project(tmp_path / "boxed")
    cut_project(boxed, stages, list(names))
    with running_stack(boxed, f"rulerag-images-{os.getpid()}", ["mlflow"]) as stack:
        network = f"{stack.name}_default"
        started = time.monotonic()
        run = subprocess.run(
            ["docker", "run", "--rm", "--network", network,
             "--user", f"{os.getuid()}:{os.getgid()}",
             "-v", f"{boxed}:/app", "-v", f"{kg_mirror}:{kg_mirror}:ro",
             "-e", f"RULERAG_DATA_DIR={kg_mirror}", "-e", "MLFLOW_TRACKING_URI=http://mlflow:5000",
             IMAGE, "dvc", "repro", "--single-item", *instances],
            capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        boxed_s = time.monotonic() - started
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=stack.url("mlflow"))
        logged = {
            dataset: sorted(
                r.data.tags["rulerag.stage_instance"]
                for r in client.search_runs(
                    [client.get_experiment_by_name(f"rulerag/{dataset}").experiment_id]
                )
                if "rulerag.stage_instance" in r.data.tags
            )
            for dataset in names
        }
    print(f"host: {host_s:.1f} s; in the image: {boxed_s:.1f} s ({len(instances)} stages)")
    verdicts = compare(host / "data", boxed / "data")
    assert verdicts["different"] == verdicts["one side"] == [], verdicts
    assert verdicts["identical"] and all(
        "/retrieval/index/bm25/" in name for name in verdicts["run-dependent"]
    ), verdicts["run-dependent"]
    assert any(name.startswith("icews14/retrieval/bm25-standard/") for name in
               verdicts["identical"])  # fmt: skip
    host_lock, boxed_lock = lock_stages(host), lock_stages(boxed)
    assert {k: boxed_lock[k] for k in before_index} == {k: host_lock[k] for k in before_index}
    assert sorted(sum(logged.values(), [])) == sorted(instances)
    assert not (boxed / "mlflow.db").exists()  # nothing went to a store of the project
