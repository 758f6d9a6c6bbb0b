"""A stage killed in the middle of `dvc repro` (kill -9 of the whole process group) leaves the
last good outputs byte for byte, metrics included; the next run sweeps what it left behind.

The delay is planted with a `sitecustomize` module on PYTHONPATH that holds the stage after its
new outputs are complete in the staging folder and before they replace the old ones: the
moment a kill does the most harm. DVC used to delete the outputs before running the command.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from rulerag.layout import DataLayout
from tests.pipeline.test_dvc_stages import run, run_failing

pytestmark = [pytest.mark.slow, pytest.mark.data]

BIN = Path(sys.executable).parent
STAGE = "ingest@nell995"

HOOK = """
import os, sys
marker = os.environ.get("RULERAG_TEST_STALL")
if marker and any("pipeline_steps" in arg for arg in sys.orig_argv):
    import contextlib, time
    from pathlib import Path
    import rulerag.io as io

    original = io.staged_outputs

    @contextlib.contextmanager
    def stalled(out_dir, prefix="stage"):
        with original(out_dir, prefix) as staging:
            yield staging
            Path(marker).write_text(str(staging))
            time.sleep(600)

    io.staged_outputs = stalled
"""


def digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


@pytest.fixture
def built(project_copy: Path, kg_mirror: Path) -> tuple[Path, dict[str, str], dict[str, str]]:
    """The project with `ingest@nell995` built: (project, environment, its outputs' sha256)."""
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "RULERAG_DATA_DIR": str(kg_mirror),
        "MLFLOW_TRACKING_URI": f"sqlite:///{project_copy / 'mlflow.db'}",
        "DVC_NO_ANALYTICS": "1",
    }
    params = yaml.safe_load((project_copy / "params.yaml").read_text())
    params["datasets"] = ["nell995"]
    (project_copy / "params.yaml").write_text(yaml.safe_dump(params))
    run(["dvc", "repro", STAGE], project_copy, env)
    good = digests(DataLayout.of(project_copy / "data", "nell995").kg)
    assert {"facts.parquet", "stats.json", "manifest.json"} <= set(good)
    return project_copy, env, good


def test_kill_9_mid_write_keeps_the_last_good_outputs(
    built: tuple[Path, dict[str, str], dict[str, str]], tmp_path: Path
) -> None:
    project_copy, env, good = built
    kg = DataLayout.of(project_copy / "data", "nell995").kg

    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(HOOK))
    marker = tmp_path / "stalled"
    stalled_env = {**env, "PYTHONPATH": str(hook), "RULERAG_TEST_STALL": str(marker)}
    proc = subprocess.Popen(
        ["dvc", "repro", "-f", "--single-item", STAGE],
        cwd=project_copy,
        env=stalled_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert proc.poll() is None, "the stage ended before the planted stall"
            assert time.monotonic() < deadline, "the stage never reached the stall"
            time.sleep(0.2)
        staging = Path(marker.read_text())
        assert staging.is_dir() and (staging / "facts.parquet").is_file()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)

    assert digests(kg) == good, "the killed run changed or removed the good outputs"
    assert staging.exists(), "the staging folder of the killed run is what the next run sweeps"
    status = run(["dvc", "status", STAGE], project_copy, env).stdout
    assert "changed outs" not in status and "deleted" not in status, status

    run(["dvc", "repro", "-f", "--single-item", STAGE], project_copy, env)
    assert not staging.exists()
    assert sorted(p.name for p in kg.iterdir() if p.name.startswith(".")) == []
    assert digests(kg) == good  # the same input and parameters give the same bytes


def test_a_failing_stage_keeps_the_last_good_outputs(
    built: tuple[Path, dict[str, str], dict[str, str]],
) -> None:
    """A params.yaml typo makes the rerun fail (exit 2, the key named); the outputs stay."""
    project_copy, env, good = built
    params = yaml.safe_load((project_copy / "params.yaml").read_text())
    params["ingest"]["duplicats"] = "error"
    (project_copy / "params.yaml").write_text(yaml.safe_dump(params))
    output = run_failing(["dvc", "repro", STAGE], project_copy, env)
    assert "unknown key 'duplicats'" in output and "Traceback" not in output
    assert digests(DataLayout.of(project_copy / "data", "nell995").kg) == good
