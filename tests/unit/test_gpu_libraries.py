"""`rulerag.gpu_libraries`: the imports that printed bitsandbytes' "Failed to load CPU
gemm_4bit_forward ... kernels" and DeepSpeed's "Setting accelerator to CPU" on a CPU run print
neither (tests/stages/test_gpu_library_notices.py runs a stage)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
NOTICES = ("gemm_4bit_forward", "Setting accelerator to CPU")

#: what reaches both libraries on a CPU run: sentence-transformers (peft imports bitsandbytes)
#: and the Trainer's unwrap_model (accelerate imports DeepSpeed), after quiet_gpu_libraries
BOTH_LIBRARIES = """
from rulerag.gpu_libraries import quiet_gpu_libraries
quiet_gpu_libraries()
import sentence_transformers
from accelerate.utils.other import extract_model_from_parallel
import torch
extract_model_from_parallel(torch.nn.Linear(1, 1))
"""


def _cpu_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    return {**env, "CUDA_VISIBLE_DEVICES": ""}


def test_the_libraries_that_printed_them_are_quiet_on_the_cpu() -> None:
    """Both imports that printed a notice, in a fresh process on the CPU: neither prints."""
    pytest.importorskip("bitsandbytes")
    pytest.importorskip("deepspeed")
    pytest.importorskip("sentence_transformers")
    done = subprocess.run(
        [sys.executable, "-c", BOTH_LIBRARIES],
        cwd=PROJECT, capture_output=True, text=True, timeout=300, env=_cpu_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert not [n for n in NOTICES if n in said], said


def test_a_user_set_accelerator_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from rulerag.gpu_libraries import DS_ACCELERATOR_ENV, quiet_gpu_libraries

    monkeypatch.setenv(DS_ACCELERATOR_ENV, "cuda")
    quiet_gpu_libraries()
    assert os.environ[DS_ACCELERATOR_ENV] == "cuda"
