"""`dvc repro ingest@<dataset>` for real, in a throw-away copy of the project: outputs, DVC
metrics, `dvc status`, and the MLflow run the stage logged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rulerag.layout import DataLayout

pytestmark = [pytest.mark.slow, pytest.mark.data]

BIN = Path(sys.executable).parent


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
    return done


def run_failing(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run a command that must fail; its stdout and stderr together."""
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0, f"{cmd} succeeded:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.fixture
def env(kg_mirror: Path, project_copy: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "RULERAG_DATA_DIR": str(kg_mirror),
        "RULERAG_PIPELINE_RUN": "test-dvc-ingest",
        "MLFLOW_TRACKING_URI": f"sqlite:///{project_copy / 'mlflow.db'}",
        "DVC_NO_ANALYTICS": "1",
    }


def test_dvc_repro_ingest_then_metrics_and_mlflow(project_copy: Path, env: dict) -> None:
    params = yaml.safe_load((project_copy / "params.yaml").read_text())
    params["datasets"] = ["icews14", "nell995"]
    (project_copy / "params.yaml").write_text(yaml.safe_dump(params))

    out = run(["dvc", "repro", "ingest@nell995"], project_copy, env)
    assert "ingest@nell995: 154,213 facts" in out.stdout
    layout = DataLayout.of(project_copy / "data", "nell995")
    kg = layout.kg
    for name in ("facts.parquet", "entities.parquet", "relations.parquet", "stats.json"):
        assert (kg / name).is_file()
    other = DataLayout.of(project_copy / "data", "icews14")
    assert not other.root.exists(), "only the named instance runs"

    shown = json.loads(run(["dvc", "metrics", "show", "--json"], project_copy, env).stdout)
    metrics = next(iter(shown.values()))["data"]["data/nell995/kg/stats.json"]["data"]
    assert metrics["splits"] == {"train": 149_678, "valid": 543, "test": 3_992}
    assert metrics["entities"] == 75_492

    status = run(["dvc", "status", "ingest@nell995"], project_copy, env).stdout
    assert "up to date" in status or status.strip() == ""

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name("rulerag/nell995")
    assert experiment is not None
    (mlrun,) = client.search_runs(
        [experiment.experiment_id], filter_string="tags.`rulerag.stage` = 'ingest'"
    )
    assert mlrun.info.status == "FINISHED"
    assert mlrun.data.tags["rulerag.pipeline_run"] == "test-dvc-ingest"
    assert mlrun.data.params["ingest.duplicates"] == "drop"
    assert mlrun.data.metrics["splits_train"] == 149_678

    # The next stage runs on what ingest wrote, and DVC sees ingest as up to date.
    out = run(["dvc", "repro", "mine_rules@nell995"], project_copy, env)
    assert "Stage 'ingest@nell995' didn't change" in out.stdout
    rules_dir = layout.rules_dir
    stats = json.loads((rules_dir / "stats.json").read_text())
    assert stats["miner"] == "static" and stats["bank"] > 50
    assert (rules_dir / "rules.txt").read_text().count(" leads to ") == stats["rules"]
    (mine_run,) = client.search_runs(
        [experiment.experiment_id], filter_string="tags.`rulerag.stage` = 'mine_rules'"
    )
    assert mine_run.data.metrics["bank"] == stats["bank"]
    assert mine_run.data.tags["rulerag.pipeline_run"] == "test-dvc-ingest"

    # The benchmark: built once, rebuilt by force with the same seed -> the same bytes.
    out = run(["dvc", "repro", "build_benchmark@nell995"], project_copy, env)
    assert "test queries" in out.stdout
    bench = layout.benchmark
    files = ["corpus.jsonl", "corpus.parquet", "test.jsonl", "f_r.jsonl", "f_g.jsonl"]
    first = {name: (bench / name).read_bytes() for name in files}
    run(["dvc", "repro", "-f", "--single-item", "build_benchmark@nell995"], project_copy, env)
    assert {name: (bench / name).read_bytes() for name in files} == first
    stats = json.loads((bench / "stats.json").read_text())
    assert stats["test"] == 815 and stats["paper"]["test"] == 815


def test_failed_ingest_keeps_nothing_and_reports_line(
    project_copy: Path, env: dict, tmp_path: Path
) -> None:
    """A broken mirror file fails the stage with file:line and leaves no outputs."""
    mirror = tmp_path / "mirror" / "nell-995"
    (mirror / "pp413_NELL-995").mkdir(parents=True)
    source = Path(env["RULERAG_DATA_DIR"]) / "nell-995" / "pp413_NELL-995"
    for split in ("valid", "test"):
        (mirror / "pp413_NELL-995" / f"{split}.txt").write_bytes(
            (source / f"{split}.txt").read_bytes()
        )
    (mirror / "pp413_NELL-995" / "train.txt").write_text("concept_a_b\tconcept:x\n")
    params = yaml.safe_load((project_copy / "params.yaml").read_text())
    params["datasets"] = ["nell995"]
    (project_copy / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**env, "RULERAG_DATA_DIR": str(tmp_path / "mirror")}
    output = run_failing(["dvc", "repro", "ingest@nell995"], project_copy, env)
    assert "train.txt:1: expected 3 columns" in output
    assert not DataLayout.of(project_copy / "data", "nell995").facts.exists()


def test_a_dataset_name_with_shell_syntax_runs_no_command(project_copy: Path, env: dict) -> None:
    """DVC runs stage commands through a shell; a name with `;` used to run what follows it.
    The name is quoted in dvc.yaml's commands and refused by the stage (and by `make run`'s
    params check before DVC starts)."""
    params = yaml.safe_load((project_copy / "params.yaml").read_text())
    name = "x;touch PWNED;"
    params["datasets"] = [name]
    params["ingest"]["custom"] = {name: {"path": str(project_copy)}}
    (project_copy / "params.yaml").write_text(yaml.safe_dump(params))
    output = run_failing(["dvc", "repro", f"ingest@{name}"], project_copy, env)
    assert not (project_copy / "PWNED").exists()
    assert "invalid dataset name" in output
    check = [sys.executable, "-m", "rulerag.orchestration.run_plan"]
    assert "invalid dataset name" in run_failing(check, project_copy, env)


@pytest.mark.parametrize(
    ("key", "value", "stage"),
    [
        ("datasets", ["icews14", "y'; touch PWNED; echo '"], "ingest"),  # breaks out of '...'
        ("retrieve.indexes", ["bm25;touch PWNED;true"], "index"),  # was interpolated unquoted
    ],
)
def test_a_name_that_slipped_into_params_reaches_no_shell(
    project_copy: Path, env: dict, key: str, value: list[str], stage: str
) -> None:
    """Issue 28's two injections, written into params.yaml as `dvc exp run -S` writes it
    (no check runs before DVC): dvc.yaml's commands interpolate nothing, so the name reaches
    the stage script only through DVC_STAGE, which refuses it."""
    params = yaml.safe_load((project_copy / "params.yaml").read_text())
    section, _, knob = key.rpartition(".")
    (params[section] if section else params)[knob] = value
    (project_copy / "params.yaml").write_text(yaml.safe_dump(params))
    item = value[-1] if key == "datasets" else f"icews14-{value[-1]}"
    run_failing(["dvc", "repro", "--single-item", f"{stage}@{item}"], project_copy, env)
    assert not (project_copy / "PWNED").exists()  # (index: DVC stops first, its deps missing)
    check = [sys.executable, "-m", "rulerag.orchestration.run_plan"]
    assert "invalid" in run_failing(check, project_copy, env)
