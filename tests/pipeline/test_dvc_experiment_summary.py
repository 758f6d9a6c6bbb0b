"""`exp_summary` on a real `dvc exp run` in a throw-away repository: what `make exp-*` prints
after its experiments (the table `dvc exp show --only-changed --md` gave had 61,054-character
lines)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STEP = """\
import json, os, yaml
p = yaml.safe_load(open("params.yaml"))
for config in ("rag", "rulerag"):
    os.makedirs(f"data/icews14/generation/{config}", exist_ok=True)
    em = 0.1 * p["gen"]["k"] if config == "rulerag" else 0.25
    json.dump({"em": em, "token_f1": em + 0.5, "queries": 100, "sha": "ab" * 32},
              open(f"data/icews14/generation/{config}/metrics.json", "w"))
"""
DVC_YAML = """\
stages:
  generate:
    cmd: python step.py
    deps: [step.py]
    params: [gen.k]
    metrics:
      - data/icews14/generation/rag/metrics.json: {cache: false}
      - data/icews14/generation/rulerag/metrics.json: {cache: false}
"""


def test_an_experiment_reads_as_its_params_and_the_metrics_it_moved(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PYTHONPATH": str(ROOT),
    }

    def run(*cmd: str) -> str:
        done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{cmd}: {done.stdout}\n{done.stderr}"
        return done.stdout

    (tmp_path / "step.py").write_text(STEP)
    (tmp_path / "dvc.yaml").write_text(DVC_YAML)
    (tmp_path / "params.yaml").write_text("gen: {k: 1, other: x}\n")
    run("git", "init", "-q", "-b", "main")
    run("dvc", "init", "-q")
    run("dvc", "repro", "-q")
    run("git", "add", "-A")
    run("git", "commit", "-qm", "baseline")
    run("dvc", "exp", "run", "-q", "--name", "k3", "-S", "gen.k=3")

    out = run(sys.executable, "-m", "rulerag.orchestration.exp_summary")
    assert out.startswith("## k3 (against main)")
    assert "- `gen.k`: 1 → 3" in out
    assert "| icews14 generation/rulerag | em | 0.1 | 0.3 |" in out
    assert "| icews14 generation/rulerag | token_f1 | 0.6 | 0.8 |" in out
    assert "generation/rag " not in out  # unmoved: not shown
    assert "queries" not in out and "abab" not in out  # counts and hashes are no headline
    assert max(map(len, out.splitlines())) < 100
    assert run(sys.executable, "-m", "rulerag.orchestration.exp_summary", "k3") == out

    missing = subprocess.run(
        [sys.executable, "-m", "rulerag.orchestration.exp_summary", "nope"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1 and "no experiment named nope" in missing.stderr
