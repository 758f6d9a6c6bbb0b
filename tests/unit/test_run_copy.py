"""A DAG run whose conf changes params.yaml runs in a copy of its own (`run_copy`).

Issue 45: the run wrote its conf into the project's params.yaml and put the old text back at
the end, undoing an edit made in between (cases 8 and 9); these are the DAG's steps on a real
git + DVC project: `create` (apply_conf), `dvc repro` in the copy (a stage task), `record`
and `bring_back` (record_overrides).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rulerag.orchestration import run_copy

DVC = str(Path(sys.executable).parent / "dvc")
DVC_YAML = """\
stages:
  ingest:
    foreach: ${datasets}
    do:
      cmd: mkdir -p data/${item} && echo ${item} ${ingest.size} > data/${item}/facts.txt
      params:
        - ingest
      outs:
        - data/${item}/facts.txt
"""
PARAMS = "# the user's params\ndatasets:\n  - a\ningest:\n  size: 1\n"
GIT_ID = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@rulerag.invalid",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@rulerag.invalid",
}  # fmt: skip


def sh(cmd: list[str], cwd: Path) -> str:
    env = {**os.environ, **GIT_ID, "DVC_NO_ANALYTICS": "1"}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{cmd}: {done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git + DVC project with one foreach stage, committed, ingest@a built."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "dvc.yaml").write_text(DVC_YAML, encoding="utf-8")
    (root / "params.yaml").write_text(PARAMS, encoding="utf-8")
    (root / ".gitignore").write_text("/data/\n", encoding="utf-8")
    sh(["git", "init", "-q", "-b", "main"], root)
    sh([DVC, "init", "-q"], root)
    sh(["git", "add", "-A"], root)
    sh(["git", "commit", "-q", "-m", "init"], root)
    sh([DVC, "repro", "-q"], root)
    return root


def env() -> dict[str, str]:
    return {**os.environ, **GIT_ID, "PATH": f"{Path(DVC).parent}{os.pathsep}{os.environ['PATH']}"}


def branch_file(project: Path, branch: str, name: str) -> str:
    return sh(["git", "show", f"{branch}:{name}"], project)


def test_a_users_edit_to_params_yaml_during_a_run_is_kept(project: Path) -> None:
    """Case 8: the run's conf (ingest.size 7) goes into the copy only; the user's edit made
    during the run (a dataset and a comment) stays in the project's params.yaml, and the run's
    branch records what the run used, not the user's edit."""
    run_text = PARAMS.replace("size: 1", "size: 7")
    lock_before = (project / "dvc.lock").read_text(encoding="utf-8")
    copy = run_copy.create(project, "manual__1", run_text, env(), lambda _: None)
    assert (project / "params.yaml").read_text(encoding="utf-8") == PARAMS

    edited = PARAMS.replace("  - a\n", "  - a\n  - b\n") + "# a note of the user's\n"
    (project / "params.yaml").write_text(edited, encoding="utf-8")  # during the run
    run_copy.checkout(copy, ["ingest@a"], env(), lambda _: None)
    sh([DVC, "repro", "--single-item", "ingest@a"], copy)  # the stage task, in the copy
    assert (copy / "data" / "a" / "facts.txt").read_text().strip() == "a 7"

    branch, commit = run_copy.record(project, "manual__1", copy)
    said: list[str] = []
    assert run_copy.bring_back(project, copy, said.append) == []  # size 7 is not the project's
    assert "(ingest@a: ingest)" in said[0]  # the section dvc.yaml names as its params
    run_copy.remove(project, copy)
    assert (project / "params.yaml").read_text(encoding="utf-8") == edited
    assert branch_file(project, branch, "params.yaml") == run_text
    lock = yaml.safe_load(branch_file(project, branch, "dvc.lock"))
    assert lock["stages"]["ingest@a"]["params"]["params.yaml"]["ingest"] == {"size": 7}
    # the project's outputs, dvc.lock, index and HEAD are as they were
    assert (project / "data" / "a" / "facts.txt").read_text().strip() == "a 1"
    assert (project / "dvc.lock").read_text(encoding="utf-8") == lock_before
    head = sh(["git", "rev-parse", "HEAD"], project)
    assert sh(["git", "rev-parse", f"{branch}^"], project) == head
    assert sh(["git", "diff", "--cached", "--name-only"], project) == ""
    assert not copy.exists() and "airflow-runs" not in sh(["git", "worktree", "list"], project)
    # the run's output is in the shared cache: the branch brings it back
    sh(["git", "checkout", "-q", branch, "--", "params.yaml", "dvc.lock"], project)
    sh([DVC, "checkout", "-q"], project)
    assert (project / "data" / "a" / "facts.txt").read_text().strip() == "a 7"


def test_two_run_ids_that_clean_to_one_name_get_two_branches(project: Path) -> None:
    """Case 9: `a run:1` and `a run+1` once both became `airflow-a-run-1`, the second run's
    commit replacing the first's; now each has its own branch, and a branch that exists is
    never replaced (a run id used twice is refused before anything runs)."""
    names = {rid: run_copy.branch_name(rid) for rid in ("a run:1", "a run+1", "plain-1")}
    assert len(set(names.values())) == 3
    assert names["plain-1"] == "airflow-plain-1"  # an id that is already a ref part stays
    for rid, size in (("a run:1", 2), ("a run+1", 3)):
        copy = run_copy.create(project, rid, PARAMS.replace("size: 1", f"size: {size}"), env())
        run_copy.record(project, rid, copy)
        run_copy.remove(project, copy)
    assert "size: 2" in branch_file(project, names["a run:1"], "params.yaml")
    assert "size: 3" in branch_file(project, names["a run+1"], "params.yaml")

    first = sh(["git", "rev-parse", names["a run:1"]], project)
    with pytest.raises(run_copy.BranchExists, match=names["a run:1"]):
        run_copy.create(project, "a run:1", PARAMS, env())
    copy = run_copy.copy_dir(project, "a run:1")
    copy.mkdir(parents=True)  # a copy made before the branch appeared: record refuses too
    (copy / "params.yaml").write_text(PARAMS, encoding="utf-8")
    with pytest.raises(run_copy.BranchExists, match="trigger with another run id"):
        run_copy.record(project, "a run:1", copy)
    assert sh(["git", "rev-parse", names["a run:1"]], project) == first


def test_a_selection_only_run_brings_what_it_built_into_the_project(project: Path) -> None:
    """A conf that only selects (dataset b, which the project's params.yaml does not list)
    builds what `dvc repro` would in the project: its output and dvc.lock entry come back,
    while ingest@a, checked out from the shared cache and not rerun, stays as it was."""
    run_text = PARAMS.replace("  - a\n", "  - a\n  - b\n")
    copy = run_copy.create(project, "select-b", run_text, env())
    run_copy.checkout(copy, ["ingest@a", "ingest@b"], env(), lambda _: None)
    assert (copy / "data" / "a" / "facts.txt").read_text().strip() == "a 1"  # from the cache
    out = sh([DVC, "repro", "ingest@a", "ingest@b"], copy)
    assert "Stage 'ingest@a' didn't change" in out
    run_copy.record(project, "select-b", copy)
    brought = run_copy.bring_back(project, copy, lambda _: None)
    run_copy.remove(project, copy)
    assert brought == ["ingest@b"]
    assert (project / "data" / "b" / "facts.txt").read_text().strip() == "b 1"
    assert "ingest@b" in yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    assert (project / "params.yaml").read_text(encoding="utf-8") == PARAMS
    assert sh([DVC, "status", "-q"], project) == ""  # what the project generates is up to date


def test_the_copy_runs_the_code_the_user_has(project: Path) -> None:
    """Uncommitted edits, new files and deletions of the working tree are in the copy (a run
    in the project folder would run them too); ignored files (outputs, the cache) are not."""
    (project / "tool.py").write_text("print('committed')\n", encoding="utf-8")
    (project / "gone.py").write_text("", encoding="utf-8")
    sh(["git", "add", "tool.py", "gone.py"], project)
    sh(["git", "commit", "-q", "-m", "code"], project)
    (project / "tool.py").write_text("print('edited')\n", encoding="utf-8")
    (project / "new.py").write_text("print('new')\n", encoding="utf-8")
    (project / "gone.py").unlink()
    copy = run_copy.create(project, "code", PARAMS, env())
    assert (copy / "tool.py").read_text() == "print('edited')\n"
    assert (copy / "new.py").read_text() == "print('new')\n"
    assert not (copy / "gone.py").exists()
    assert not (copy / "data").exists()
    # the project's DVC cache, as DVC there names it
    assert sh([DVC, "cache", "dir"], copy) == sh([DVC, "cache", "dir"], project)
    run_copy.remove(project, copy)
