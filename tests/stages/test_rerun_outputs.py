"""An identical rerun rewrites the same bytes: `mine_rules` and `index` kept their wall-clock
timings inside rules/stats.json and retrieval/stats/index-<name>.json (DVC outputs the docs
call byte-identical), so every rerun changed them. The timings are MLflow metrics now."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import StageProject, ingest_chain_kg, stage_runs
from tests.support.synthetic_retrieval import tiny_benchmark

pytestmark = pytest.mark.slow  # an MLflow SQLite store is created per test

#: a field that holds a timing or a rate of the run (benchmarks/compare_runs.py's rule)
TIMING = re.compile(r"(^|_)seconds($|_)|_per_(second|minute)$")


def timing_fields(value: object, where: str = "") -> list[str]:
    if isinstance(value, dict):
        return [
            found
            for key, item in value.items()
            for found in ([f"{where}{key}"] if TIMING.search(key) else [])
            + timing_fields(item, f"{where}{key}.")
        ]
    return []


def test_mine_rules_rerun_rewrites_the_same_stats(
    tmp_path: Path, mlflow_store: str, stage_project: StageProject
) -> None:
    import pipeline_steps.mine_rules as stage

    overrides = ingest_chain_kg(tmp_path, stage_project, links=60)
    rules = stage_project.layout("mykg").rules_dir
    written = []
    for _ in range(2):
        assert stage_project.run(stage, "--dataset", "mykg", params=overrides) == 0
        written.append({p.name: p.read_bytes() for p in rules.iterdir() if p.is_file()})
    assert timing_fields(json.loads(written[0]["stats.json"])) == []
    assert written[0]["stats.json"] == written[1]["stats.json"]
    assert written[0]["manifest.json"] == written[1]["manifest.json"]
    runs = stage_runs(mlflow_store, "mine_rules")
    assert len(runs) == 2 and all("mining_seconds" in r.data.metrics for r in runs)


def test_index_rerun_rewrites_the_same_stats(
    mlflow_store: str, stage_project: StageProject
) -> None:
    import pipeline_steps.index as stage

    tiny_benchmark(stage_project.layout("tiny").root)
    params = {"index": {"threads": 1, "sparse": {"backend": "bm25s", "parity_check": False}}}
    stats = stage_project.layout("tiny").index_stats("bm25")
    written = []
    for _ in range(2):
        assert stage_project.run(stage, "--dataset", "tiny", "--index", "bm25", params=params) == 0
        written.append(stats.read_bytes())
    assert timing_fields(json.loads(written[0])) == []
    assert written[0] == written[1]
    runs = stage_runs(mlflow_store, "index")
    assert len(runs) == 2
    assert all({"seconds", "bm25s_build_seconds", "docs"} <= set(r.data.metrics) for r in runs)
