"""A CPU stage says nothing on behalf of the GPU libraries: bitsandbytes' "Failed to load CPU
gemm_4bit_forward ... kernels" and DeepSpeed's "Setting accelerator to CPU" were printed by
every stage that loaded an encoder or trained a generator on a CPU run
(`rulerag.gpu_libraries`). DeepSpeed's logger writes to stdout, bitsandbytes' to stderr: both
are read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pipeline_steps.index as index
from tests.helpers import StageProject, require_minilm
from tests.support.synthetic_retrieval import tiny_benchmark

PROJECT = Path(__file__).resolve().parents[2]
NOTICES = ("gemm_4bit_forward", "Setting accelerator to CPU")

#: a stage (module argv[2]) in a process of its own, its project under argv[1]
STAGE = """
import sys
from pathlib import Path
import importlib
import pipeline_steps.common as common

root = Path(sys.argv[1])
common.PROJECT_DIR, common.DATA_DIR, common.MODEL_CACHE = root, root / "data", root / ".models"
stage = importlib.import_module(sys.argv[2])
sys.exit(common.run_stage(stage.main, sys.argv[3:]))
"""


def _cpu_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DVC_STAGE", "DS_ACCELERATOR")}
    return {**env, "CUDA_VISIBLE_DEVICES": "", **extra}


@pytest.mark.slow
def test_a_cpu_index_stage_prints_no_gpu_library_notice(
    stage_project: StageProject, tmp_path: Path
) -> None:
    """`index --index minilm` loads a sentence-transformer (peft, bitsandbytes) on the CPU."""
    require_minilm()
    tiny_benchmark(stage_project.layout("tiny").root)
    params = stage_project.write_params(
        {"index.threads": 1, "index.dense": {"minilm": {"model": "minilm", "max_length": 32}}}
    )
    done = subprocess.run(
        [sys.executable, "-c", STAGE, str(tmp_path), index.__name__,
         "--dataset", "tiny", "--index", "minilm", "--params", str(params)],
        cwd=PROJECT, capture_output=True, text=True, timeout=600,
        env=_cpu_env(MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert not [n for n in NOTICES if n in said], said[-3000:]
