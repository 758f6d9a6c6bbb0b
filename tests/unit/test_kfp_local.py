"""What of kfp_pipeline the project's interpreter reads (rulerag/orchestration/kfp_local.py):
`run-local --runner docker`'s container options (what the tasks' containers see of the host),
the check that keeps credentials out of the compiled YAML's environment, and what a local run
with params overrides collects and says."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rulerag.orchestration.kfp_local import (
    check_task_env,
    describe_local_run,
    docker_run_args,
    local_run_arguments,
    secret_env_keys,
)


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


SECRET = "hunter2-s3cr3t"
#: the known credentials, and names with a word that names a secret
SECRET_KEYS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "MLFLOW_TRACKING_PASSWORD",
               "MLFLOW_TRACKING_TOKEN", "OPENAI_API_KEY", "RULERAG_API_KEY", "AWS_ACCESS_KEY_ID",
               "DB_PASSWORD", "HF_TOKEN", "MY_SECRET", "SSH_PRIVATE_KEY", "hf_token")  # fmt: skip


@pytest.mark.parametrize(
    "env",
    [
        {"MLFLOW_TRACKING_URI": f"http://admin:{SECRET}@mlflow:5000"},
        {"RULERAG_DVC_URL": f"s3://key:{SECRET}@bucket/path"},
        {"RULERAG_GIT_SOURCE": f"https://{SECRET}@github.com/org/rulerag.git"},
        *({key: SECRET} for key in SECRET_KEYS),
    ],
    ids=lambda env: next(iter(env)),
)
def test_the_tasks_environment_carries_no_credentials(env: dict[str, str]) -> None:
    """`compile --env MLFLOW_TRACKING_URI=http://admin:...@mlflow:5000 AWS_SECRET_ACCESS_KEY=...`
    wrote the secret into every task of the YAML (117 times); the message names the key and
    `--secret`, never the value."""
    with pytest.raises(ValueError, match=r"--secret NAME") as caught:
        check_task_env({"RULERAG_DVC_REMOTE": "minio", **env})
    message = str(caught.value)
    assert next(iter(env)) in message and "RULERAG_DVC_REMOTE" not in message
    assert SECRET not in message


def test_plain_settings_pass_and_every_secret_is_named_at_once() -> None:
    plain = {
        "RULERAG_DVC_REMOTE": "minio",
        "MLFLOW_TRACKING_URI": "http://mlflow.rulerag:5000",
        "MLFLOW_TRACKING_USERNAME": "admin",
        "RULERAG_GIT_SOURCE": "ssh://git@github.com/org/rulerag.git",  # a user, no secret
        "TOKENIZERS_PARALLELISM": "false",  # words, not substrings
        "RULERAG_MAX_TOKENS": "512",
        "RULERAG_CACHE_KEY": "v2",
    }
    check_task_env(plain)
    both = {**plain, "AWS_SECRET_ACCESS_KEY": SECRET,
            "MLFLOW_TRACKING_URI": f"http://admin:{SECRET}@mlflow:5000"}  # fmt: skip
    assert set(secret_env_keys(both)) == {"AWS_SECRET_ACCESS_KEY", "MLFLOW_TRACKING_URI"}


def test_a_local_run_with_overrides_is_not_collected_into_the_project() -> None:
    """A run with `params` overrides collected into the project left dvc.lock entries that
    params.yaml does not match (`dvc status`: params modified); it keeps them in `collect`'s
    artifact and says where, and how to bring them in."""
    assert local_run_arguments({"params": {}})["collect_into_project"] is True
    assert local_run_arguments(None) == {"collect_into_project": True}
    overridden = local_run_arguments(
        {"stages": ["ingest"], "params": {"ingest.duplicates": "keep"}}
    )
    assert overridden["collect_into_project"] is False
    assert overridden["params"] == {"ingest.duplicates": "keep"}
    summary = {"run": "kfp-1", "ran": ["ingest@icews14"], "collected": [],
               "lock": "/runs/collect/lock/dvc.lock", "params": "/runs/prepare/state/params.yaml",
               "kept_out": None}  # fmt: skip
    said = describe_local_run(summary)
    assert "not collected into the project" in said and "params overrides" in said
    assert "the run's dvc.lock: /runs/collect/lock/dvc.lock" in said
    assert ("cp /runs/prepare/state/params.yaml params.yaml && cp /runs/collect/lock/dvc.lock "
            "dvc.lock && dvc pull ingest@icews14") in said  # fmt: skip
    collected = describe_local_run({**summary, "collected": ["ingest@icews14"]})
    assert collected == "KFP local run kfp-1: 1 of 1 stage instances collected"
