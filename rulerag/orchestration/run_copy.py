"""A DAG run's own copy of the project, for a run whose conf changes params.yaml.

params.yaml is the user's file. A run that wrote its conf into it and put the old text back at
the end undid every edit made in between (issue 45: a `datasets` change and a comment, gone;
and the run's branch recorded the user's edit as if the run had used it), while its stages
read whatever the file held at the moment each started. So a run whose conf changes
params.yaml never writes the project folder's params.yaml: it runs in a copy of its own,

* a git worktree of the project's HEAD (`.dvc/tmp/airflow-runs/<branch>`, ignored by git and
  by DVC), overlaid with the working tree's uncommitted and untracked files, so its stages run
  the code the user has, as a run in the project folder would;
* with the run's params.yaml and the project's dvc.lock, and the project's DVC cache as its
  own (`cache.dir` in the copy's local config), so what the project has built is checked out
  from the cache instead of rebuilt, and what the run builds lands in the same cache;

and at the end (`record`) its params.yaml and dvc.lock become the branch `branch_name(run id)`
on top of the project's HEAD, refused when that branch exists. When what the run built is
what the project's own params.yaml would have built (a run that only selects `datasets`,
`stages`, `force`, or sets values no stage it ran reads), its outputs and dvc.lock entries
come into the project as `dvc repro` would leave them (`bring_back`); otherwise the project
stays as it was, and `git checkout <branch> -- params.yaml dvc.lock && dvc checkout` brings
the run back.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from rulerag.orchestration.workspaces import (
    dvc_executable,
    localise_remote,
    params_disagreeing,
    stream_command,
    write_lock_entries,
)

__all__ = [
    "RUNS_DIR",
    "BranchExists",
    "branch_name",
    "bring_back",
    "check_branch_free",
    "checkout",
    "copy_dir",
    "copy_env",
    "create",
    "record",
    "remove",
]

log = logging.getLogger(__name__)
Logger = Callable[[str], None]

#: where run copies live, relative to the project (DVC's scratch folder: ignored by git, and
#: DVC does not look for stages under .dvc/)
RUNS_DIR = Path(".dvc") / "tmp" / "airflow-runs"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class BranchExists(RuntimeError):
    """The run's branch is already there: a run id used twice, or two run ids that clean to
    one name. Replacing it would lose the other run's record."""


def branch_name(run_id: str) -> str:
    """`airflow-<run id>`: the run id as a git ref part (every character but letters, digits,
    `.`, `_`, `-` replaced by `-`). When that changed the id, a hash of the id itself follows,
    so two ids that clean to one name (`a run:1`, `a run+1`) get two branches."""
    cleaned = _UNSAFE.sub("-", run_id).strip("-.") or "run"
    name = f"airflow-{cleaned}"
    if cleaned != run_id:
        name += "-" + hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:8]
    return name


def copy_dir(project: Path, run_id: str) -> Path:
    """Where the run's copy is (it may not exist)."""
    return Path(project).resolve() / RUNS_DIR / branch_name(run_id)


def _git(args: list[str], cwd: Path, env: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=dict(env or os.environ), capture_output=True, text=True,
        stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} (in {cwd}): {done.stderr.strip()}")
    return done.stdout


def check_branch_free(project: Path, run_id: str) -> str:
    """The run's branch name, or `BranchExists` naming it when a branch has that name."""
    branch = branch_name(run_id)
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=project,
        capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    if found.returncode == 0:
        raise BranchExists(
            f"branch {branch} exists (run id {run_id!r} was recorded before, or another run id "
            f"cleans to the same name): trigger with another run id, or delete the branch "
            f"(git branch -D {branch}) if its record is not wanted"
        )
    return branch


def create(
    project: Path,
    run_id: str,
    params_text: str,
    env: Mapping[str, str],
    echo: Logger = log.info,
) -> Path:
    """The run's copy with `params_text` as its params.yaml (see the module docstring); a copy
    left by an earlier try of the same run is replaced. Its outputs are not checked out yet
    (`checkout`): which ones the run needs depends on what it selects."""
    project = Path(project).resolve()
    check_branch_free(project, run_id)
    dest = copy_dir(project, run_id)
    if dest.exists():
        remove(project, dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _git(["worktree", "add", "--quiet", "--detach", str(dest), "HEAD"], project)
    _overlay_working_tree(project, dest)
    (dest / "params.yaml").write_text(params_text, encoding="utf-8")
    lock = project / "dvc.lock"
    if lock.is_file():
        shutil.copy2(lock, dest / "dvc.lock")
    local = project / ".dvc" / "config.local"  # credentials and local remote settings
    if local.is_file():
        shutil.copy2(local, dest / ".dvc" / "config.local")
    dvc = dvc_executable(env)
    cache = subprocess.run(
        [dvc, "cache", "dir"], cwd=project, env=dict(env), capture_output=True, text=True,
        stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    if cache.returncode != 0:
        raise RuntimeError(f"dvc cache dir (in {project}): {cache.stderr.strip()}")
    stream_command([dvc, "cache", "dir", "--local", cache.stdout.strip()], dest, env, echo)
    localise_remote(project, dest, env, echo)  # a remote given relative to .dvc/
    echo(f"the run's copy: {dest} (params.yaml with the run's conf; the project's is untouched)")
    return dest


def _overlay_working_tree(project: Path, dest: Path) -> None:
    """Make `dest` (a worktree of HEAD) hold the project's working tree as it is: modified and
    untracked files that git does not ignore are copied, deleted ones removed."""
    listed = _git(["ls-files", "-z", "--modified", "--others", "--exclude-standard"], project)
    for name in dict.fromkeys(filter(None, listed.split("\0"))):
        source, target = project / name, dest / name
        if source.is_symlink() or source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                target.unlink()
            shutil.copy2(source, target, follow_symlinks=False)
        elif not source.exists() and (target.is_symlink() or target.is_file()):
            target.unlink()  # deleted in the working tree (git lists it as modified)


def checkout(copy: Path, targets: Iterable[str], env: Mapping[str, str], echo: Logger) -> None:
    """The outputs `targets` (stage instances) need and have, from the shared cache: their
    upstream outputs and their own last ones, so an unchanged instance is not rerun. Those
    the cache lacks are left for the stages to build."""
    names = list(dict.fromkeys(targets))
    if not names or not (copy / "dvc.lock").is_file():
        return
    cmd = [dvc_executable(env), "checkout", "--allow-missing", "--with-deps", "--quiet", *names]
    stream_command(cmd, copy, env, echo)


def record(project: Path, run_id: str, copy: Path) -> tuple[str, str]:
    """Commit the copy's params.yaml and dvc.lock on top of the project's HEAD as the run's
    branch (git plumbing on a private index: the project's index, working tree and HEAD are
    untouched); `BranchExists` rather than replace a branch. Returns (branch, commit)."""
    project = Path(project).resolve()
    branch = branch_name(run_id)
    env = dict(os.environ)
    for role in ("AUTHOR", "COMMITTER"):
        env.setdefault(f"GIT_{role}_NAME", "rulerag airflow")
        env.setdefault(f"GIT_{role}_EMAIL", "airflow@rulerag.invalid")
    index = copy.parent / f".index-{branch}"
    private = {**env, "GIT_INDEX_FILE": str(index)}
    try:
        _git(["read-tree", "HEAD"], project, private)
        for name in ("params.yaml", "dvc.lock"):
            if (copy / name).is_file():
                blob = _git(["hash-object", "-w", "--", str(copy / name)], project, env).strip()
                info = f"100644,{blob},{name}"
                _git(["update-index", "--add", "--cacheinfo", info], project, private)
        tree = _git(["write-tree"], project, private).strip()
        message = f"Airflow run {run_id}: params.yaml with the run's conf, and dvc.lock"
        commit = _git(["commit-tree", tree, "-p", "HEAD", "-m", message], project, env).strip()
    finally:
        index.unlink(missing_ok=True)
    # the empty old value: git refuses to update a ref that exists (no race with another run)
    done = subprocess.run(
        ["git", "update-ref", f"refs/heads/{branch}", commit, ""], cwd=project, env=env,
        capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        check_branch_free(project, run_id)  # the usual reason, said plainly
        raise RuntimeError(f"git update-ref refs/heads/{branch}: {done.stderr.strip()}")
    return branch, commit


def _entries(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return dict(data.get("stages") or {})


def bring_back(project: Path, copy: Path, echo: Logger = log.info) -> list[str]:
    """Bring what the run built into the project when it is what the project's params.yaml
    would have built: the copy's dvc.lock entries that differ from the project's go into the
    project's dvc.lock and their outputs move from the copy into the project, as `dvc repro`
    of those instances there would leave them; all of them or, when one entry records a
    param value that is not the project's (`workspaces.params_disagreeing`, the rule `kfp
    run-local` follows), none, since the project's dvc.lock would then disagree with its
    params.yaml (outputs are moved, not checked out: the project's params.yaml may not
    generate an instance the run selected, and then DVC there does not know its outputs).
    Returns the instances brought in."""
    project = Path(project).resolve()
    ours, theirs = _entries(project / "dvc.lock"), _entries(copy / "dvc.lock")
    changed = {name: entry for name, entry in theirs.items() if ours.get(name) != entry}
    if not changed:
        return []
    differ = params_disagreeing(project, changed)
    if differ:
        echo(
            f"not brought into {project}: the run's params are not its params.yaml's ("
            + "; ".join(f"{name}: {', '.join(keys)}" for name, keys in sorted(differ.items()))
            + ")"
        )
        return []
    for entry in changed.values():
        for out in entry.get("outs") or ():
            source, target = copy / out["path"], project / out["path"]
            if not (source.exists() or source.is_symlink()):
                continue  # not built (a stage that failed after its entry was written)
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(source, target)
    write_lock_entries(project, changed)
    names = sorted(changed)
    echo(f"into the project: {', '.join(names)}")
    return names


def copy_env(project: Path, env: Mapping[str, str]) -> dict[str, str]:
    """A stage's environment in the run's copy: its MLflow runs go to the project's store and
    spool, and converted models come from the project's cache (as in a workspace)."""
    run_env = dict(env)
    run_env.setdefault("RULERAG_TRACKING_PROJECT", str(Path(project).resolve()))
    run_env.setdefault("RULERAG_MODEL_CACHE", str(Path(project).resolve() / ".models"))
    return run_env


def remove(project: Path, copy: Path) -> None:
    """Remove the run's copy and git's record of it."""
    project = Path(project).resolve()
    subprocess.run(
        ["git", "worktree", "remove", "--force", str(copy)], cwd=project, capture_output=True,
        stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    shutil.rmtree(copy, ignore_errors=True)
    subprocess.run(["git", "worktree", "prune"], cwd=project, capture_output=True,
                   stdin=subprocess.DEVNULL, check=False)  # fmt: skip
