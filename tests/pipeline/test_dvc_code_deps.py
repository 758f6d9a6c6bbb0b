"""What `dvc status` makes of an edit to code, on a copy of the project where `ingest` and
`mine_rules` really ran (a small custom KG): an edit to code that decides no result (every
module of tracking, and the deadline on its sends: `NO_RESULT_CODE`) changes nothing; an edit
to the static miner changes `mine_rules`, through its code dep `rulerag/rules`, and so
everything downstream of it, while `ingest` stays as it was."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rulerag.orchestration.dvc_graph import build_graph, stage_edges
from tests.support.code_deps import NO_RESULT_CODE

pytestmark = pytest.mark.slow  # dvc repro of two stages, then dvc status

BIN = Path(sys.executable).parent
DATASET = "mykg"
RAN = [f"ingest@{DATASET}", f"mine_rules@{DATASET}"]


def dvc(*args: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["dvc", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"dvc {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def status(project: Path, env: dict[str, str], *targets: str, with_deps: bool = False) -> dict:
    """`dvc status --json` of `targets`: stage name -> what changed ({} when nothing did)."""
    flags = ["--with-deps"] if with_deps else []
    return json.loads(dvc("status", "--json", *flags, *targets, cwd=project, env=env) or "{}")


def edit(path: Path) -> None:
    """An edit that changes the file's bytes and nothing it does."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("# edited by tests/pipeline/test_dvc_code_deps.py\n")


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_dvc_status_follows_only_the_code_that_decides_results(
    project_copy: Path, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.tsv").write_text(
        "".join(f"e{i}\tr\te{i + 1}\ne{i + 1}\ts\te{i}\n" for i in range(40)), encoding="utf-8"
    )
    params_file = project_copy / "params.yaml"
    params = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    params["datasets"] = [DATASET]
    params["ingest"]["custom"] = {DATASET: {"path": str(source)}}
    params["mine_rules"]["static"]["min_initial_support"] = 0  # so few facts still give rules
    params_file.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        # no store: the runs are spooled at once, which is all tracking is for here
        "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{closed_port()}",
        "DVC_NO_ANALYTICS": "1",
    }
    dvc("repro", RAN[1], cwd=project_copy, env=env)
    assert status(project_copy, env, *RAN) == {}

    left_out = [
        path
        for entry in NO_RESULT_CODE
        for path in ([project_copy / entry] if entry.endswith(".py") else [])
        + sorted((project_copy / entry).rglob("*.py"))
    ]
    assert len(left_out) > 10 and all(path.is_file() for path in left_out)
    for path in left_out:
        edit(path)
    assert status(project_copy, env, *RAN) == {}, "an edit to tracking reran a stage"

    edit(project_copy / "rulerag" / "rules" / "static_miner.py")  # outside data/<dataset>/
    assert status(project_copy, env, *RAN) == {
        RAN[1]: [{"changed deps": {"rulerag/rules": "modified"}}]
    }
    instances = build_graph(project_copy / "dvc.yaml", params)
    below, frontier = set(), {RAN[1]}
    while frontier:
        frontier = {down for up, down in stage_edges(instances) if up in frontier} - below
        below |= frontier
    assert {f"build_benchmark@{DATASET}", f"apply_rules@{DATASET}"} <= below
    seen = status(project_copy, env, *sorted(below), with_deps=True)
    assert RAN[1] in seen and RAN[0] not in seen  # every stage below reruns the miner first
