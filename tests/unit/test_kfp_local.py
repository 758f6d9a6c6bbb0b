"""`kfp_pipeline run-local --runner docker`'s container options (rulerag/orchestration/
kfp_local.py): what the tasks' containers see of the host."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rulerag.orchestration.kfp_local import docker_run_args


def mounts(args: dict) -> dict[str, bool]:
    return {m["Target"]: m["ReadOnly"] for m in args["mounts"]}


def test_the_tasks_see_the_hosts_paths_the_mirror_read_only(tmp_path: Path) -> None:
    project, mirror, remote = (tmp_path / n for n in ("project", "mirror", "remote"))
    for folder in (project, mirror, remote):
        folder.mkdir()
    env = {
        "RULERAG_DATA_DIR": str(mirror),
        "RULERAG_WORKSPACE_ROOT": str(tmp_path / "ws"),
        "MLFLOW_TRACKING_URI": "http://127.0.0.1:5000",
        "AWS_SECRET_ACCESS_KEY": "not for the containers",
        "RULERAG_GIT_SOURCE": "",
    }
    args = docker_run_args(project, [remote], env)
    assert mounts(args) == {
        str(project): False,
        str(remote): False,
        str(mirror): True,
        str(tmp_path / "ws"): False,
    }
    assert (tmp_path / "ws").is_dir()  # made for the workspaces
    assert args["environment"] == {
        "RULERAG_PROJECT_DIR": str(project),
        "RULERAG_DATA_DIR": str(mirror),
        "RULERAG_WORKSPACE_ROOT": str(tmp_path / "ws"),
        "MLFLOW_TRACKING_URI": "http://127.0.0.1:5000",
    }
    assert args["user"] == f"{os.getuid()}:{os.getgid()}" and args["network_mode"] == "host"


def test_an_empty_mirror_setting_leaves_the_project_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """make exports RULERAG_DATA_DIR empty where ../shared/kg is missing: Path('') is the
    working directory, the project, which was then mounted read-only (its stages' MLflow runs
    could be neither logged nor spooled)."""
    monkeypatch.chdir(tmp_path)
    args = docker_run_args(tmp_path, env={"RULERAG_DATA_DIR": ""})
    assert mounts(args) == {str(tmp_path): False}
    assert "RULERAG_DATA_DIR" not in args["environment"]


def test_a_missing_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no-such-remote: no such folder"):
        docker_run_args(tmp_path, [tmp_path / "no-such-remote"], {})
