"""The GPU check's CPU dry run (benchmarks/gpu_check.py, issue 29 §3): the same script that runs
on a GPU, here without CUDA, on a slice of the real ICEWS14. Every part that can run on the CPU
trains through the stages' own functions and its loss falls; the GPU-only parts are skipped
with their reason; the table is printed and the JSON report written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.gpu_check import CPU_SKIPS, PARTS
from tests.helpers import PROJECT

pytestmark = [pytest.mark.data, pytest.mark.slow]


def test_the_cpu_dry_run_trains_what_it_can_and_says_why_it_skips_the_rest(
    kg_mirror: Path, tmp_path: Path
) -> None:
    report_file = tmp_path / "gpu_check.json"
    env = {**os.environ, "RULERAG_DATA_DIR": str(kg_mirror), "PYTHONPATH": str(PROJECT)}
    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--dry-run", "--json", str(report_file)],
        cwd=PROJECT, env=env, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(report_file.read_text(encoding="utf-8"))
    assert report["cuda"] is False and report["failed"] == []
    rows = {row["part"]: row for row in report["rows"]}
    assert list(rows) == list(PARTS)
    for part in ("models", "lora_bf16", "rgft_retriever", "r2ag", "faiss"):
        assert rows[part]["status"] == "ran", rows[part]
        assert rows[part]["device"] == "cpu" and rows[part]["peak_gpu_mib"] is None
    for part in ("lora_bf16", "rgft_retriever", "r2ag"):
        assert rows[part]["loss_after"] < rows[part]["loss_before"], rows[part]
    for part, why in CPU_SKIPS.items():
        assert rows[part]["status"] == "skipped" and rows[part]["why"] == why
    assert "CPU faiss" in rows["faiss"]["why"]
    assert "| part | status | device | seconds |" in proc.stdout
    assert "GPU check (CPU dry run)" in proc.stdout
    print(proc.stdout[proc.stdout.index("GPU check (CPU dry run)") :])  # the table, under -s
