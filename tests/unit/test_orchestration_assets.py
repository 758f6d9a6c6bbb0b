"""DVC outputs and KG mirrors as Airflow Assets: which path stands for an instance's outputs,
which stages read the mirrors, where a mirror is, and when it changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rulerag.orchestration.assets import (
    folder_fingerprint,
    mirror_folder,
    output_assets,
    root_stages,
)
from rulerag.orchestration.dvc_graph import StageInstance, build_graph
from rulerag.params import parse_params, read_params_file

PROJECT = Path(__file__).resolve().parents[2]


def test_project_outputs_are_the_kg_rules_benchmark_indexes_models_and_adapters() -> None:
    params = read_params_file(PROJECT / "params.yaml")
    instances = build_graph(PROJECT / "dvc.yaml", params, parse_params(params).known_datasets())
    paths = output_assets(instances)
    assert paths["ingest@nell995"] == "data/nell995/kg"
    assert paths["mine_rules@nell995"] == "data/nell995/rules"
    assert paths["build_benchmark@nell995"] == "data/nell995/benchmark"
    assert paths["index@nell995-bm25"] == "data/nell995/retrieval/index/bm25"
    assert (
        paths["train_retriever@nell995-minilm-rgft"] == "data/nell995/retrieval/models/minilm-rgft"
    )
    assert paths["train_generator@nell995-rgft"] == "data/nell995/generation/adapters/rgft"
    assert len(set(paths.values())) == len(paths) == len(instances)  # one asset each
    assert root_stages(instances) == ["ingest"]


def test_a_shared_folder_is_no_ones_asset() -> None:
    a = StageInstance(name="a", stage="a", outs=["d/x/one", "d/x/two/"])
    b = StageInstance(name="b", stage="b", outs=["d/m/model", "d/stats/b.json"], deps=["d/x"])
    c = StageInstance(name="c", stage="c", outs=["d/stats/c.json"], deps=["d/m/model"])
    e = StageInstance(name="e", stage="e")
    assert output_assets([a, b, c, e]) == {
        "a": "d/x",  # its own folder
        "b": "d/m/model",  # d/ holds c's outputs too: its first output
        "c": "d/stats/c.json",
    }
    assert root_stages([a, b, c, e]) == ["a", "e"]


def test_mirror_folder_is_the_custom_path_or_the_mirror_env(tmp_path: Path) -> None:
    params = read_params_file(PROJECT / "params.yaml")
    assert mirror_folder("nell995", params, {}) is None
    assert mirror_folder("nell995", params, {"RULERAG_DATA_DIR": str(tmp_path)}) == (
        tmp_path / "nell-995"
    )
    custom = {**params, "ingest": {**params["ingest"], "custom": {"mykg": {"path": str(tmp_path)}}}}
    assert mirror_folder("mykg", custom, {}) == tmp_path


def test_fingerprint_changes_with_a_file_and_only_then(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "train.txt").write_text("a\tr\tb\n")
    (tmp_path / "sub" / "x").write_text("1")
    first, files = folder_fingerprint(tmp_path)
    assert files == 2 and folder_fingerprint(tmp_path) == (first, 2)
    stat = (tmp_path / "train.txt").stat()
    os.utime(tmp_path / "train.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    touched, _ = folder_fingerprint(tmp_path)
    assert touched != first
    (tmp_path / "valid.txt").write_text("")
    assert folder_fingerprint(tmp_path)[1] == 3
    with pytest.raises(FileNotFoundError, match="not a folder"):
        folder_fingerprint(tmp_path / "missing")
