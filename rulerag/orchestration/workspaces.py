"""Stage instances in workspaces of their own, exchanging outputs through a DVC remote.

DVC locks a workspace while it reproduces a stage, so in one workspace stages run one after
another however many workers there are. Here each stage instance gets a workspace of its own
(a clone of the project at the run's commit), so no two instances share a DVC lock:

1. the workspace is cloned, and gets the run's params.yaml and a dvc.lock that is the main
   workspace's at the start of the run overlaid with the entries of the stages this run has
   finished (`overlay_lock`);
2. the outputs its stage depends on (its upstream instances' outputs) and its own last
   outputs are pulled from the remote (`dvc pull --allow-missing`), so an instance that is
   up to date is not rerun;
3. `dvc repro --single-item <instance>` runs the stage exactly as the serial mode does;
4. its outputs are pushed (`dvc push`) and its dvc.lock entry is handed back (the DAG keeps
   it in XCom); the workspace is removed.

`collect` then writes every finished entry into the main workspace's dvc.lock and pulls their
outputs, so the main workspace ends as a serial `dvc repro` leaves it: the same files and a
clean `dvc status`. The remote is any DVC remote of the project's `.dvc/config` (S3, GCS,
Azure, SSH, a local or NFS path); credentials stay in `.dvc/config.local` or the remote's own
environment variables (AWS_ACCESS_KEY_ID, ...), never in params or a DAG conf.

Everything a workspace needs travels as text (params.yaml, dvc.lock, lock entries), so a
worker on another machine only needs the git repository and the remote.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

import yaml

from rulerag.orchestration.dag_settings import DagSettings
from rulerag.orchestration.processes import (
    output_lines,
    raise_on_sigterm,
    start_group,
    stop_group,
)
from rulerag.params import read_params_file
from rulerag.settings import SettingsError

__all__ = [
    "LOCK_SCHEMA",
    "collect",
    "dvc_executable",
    "head_commit",
    "localise_remote",
    "overlay_lock",
    "params_disagreeing",
    "push_outputs",
    "read_lock_entries",
    "run_in_workspace",
    "stream_command",
    "write_lock_entries",
]

log = logging.getLogger(__name__)

#: dvc.lock's schema version as DVC 3 writes it
LOCK_SCHEMA = "2.0"
# --------------------------------------------------------------------------------------------
# dvc.lock entries
# --------------------------------------------------------------------------------------------


def _lock_data(text: str | None, where: str) -> dict[str, Any]:
    data = yaml.safe_load(text) if text else None
    if data is None:
        return {"schema": LOCK_SCHEMA, "stages": {}}
    if not isinstance(data, dict) or not isinstance(data.get("stages", {}), dict):
        raise ValueError(f"{where}: not a dvc.lock (no `stages` mapping)")
    data.setdefault("schema", LOCK_SCHEMA)
    data["stages"] = dict(data.get("stages") or {})
    return data


def overlay_lock(base: str | None, entries: Mapping[str, Any], where: str = "dvc.lock") -> str:
    """dvc.lock text: `base` (a dvc.lock's text, or None) with `entries` (instance name ->
    its dvc.lock entry) put in, replacing the base's entries of the same instances."""
    data = _lock_data(base, where)
    data["stages"].update({name: entries[name] for name in sorted(entries)})
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


_MISSING = object()


def _param_value(data: Mapping[str, Any], key: str) -> Any:
    """A params file's value of `key` as dvc.lock records it: a top-level key, or a dotted
    path (`ingest.duplicates`, `grid.0.k`)."""
    if key in data:
        return data[key]
    node: Any = data
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def params_disagreeing(project: Path, entries: Mapping[str, Any]) -> dict[str, list[str]]:
    """The instances of `entries` (dvc.lock entries) whose recorded params differ from the
    project's params files now, each with the keys that differ: what `dvc status` would call
    "params modified" once those entries were in the project's dvc.lock."""
    files: dict[str, dict[str, Any] | None] = {}
    differ: dict[str, list[str]] = {}
    for name, entry in entries.items():
        for file, values in ((entry or {}).get("params") or {}).items():
            if file not in files:
                path = project / file
                try:
                    files[file] = read_params_file(path) if path.is_file() else None
                except SettingsError:
                    files[file] = None
            current = files[file]
            for key, value in (values or {}).items():
                if current is None or _param_value(current, key) != value:
                    differ.setdefault(name, []).append(key)
    return differ


def write_lock_entries(project_dir: Path, entries: Mapping[str, Any]) -> None:
    """Put `entries` (instance name -> dvc.lock entry) into the project's dvc.lock, replacing
    those of the same instances, in one atomic replace (a killed writer leaves the old file)."""
    lock = Path(project_dir) / "dvc.lock"
    text = lock.read_text(encoding="utf-8") if lock.is_file() else None
    staged = lock.with_name(".dvc.lock.staged")
    staged.write_text(overlay_lock(text, entries, str(lock)), encoding="utf-8")
    os.replace(staged, lock)


def read_lock_entries(path: Path, names: Iterable[str]) -> dict[str, Any]:
    """The dvc.lock entries of `names` in the lock file at `path` (those it has)."""
    data = _lock_data(path.read_text(encoding="utf-8") if path.is_file() else None, str(path))
    return {name: data["stages"][name] for name in names if name in data["stages"]}


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------

Logger = Callable[[str], None]


def stream_command(cmd: list[str], cwd: Path, env: Mapping[str, str], echo: Logger) -> None:
    """Run `cmd` (an argument list, never a shell), streaming its output line by line to
    `echo` as it comes; raise with the command on failure. The DAG's serial stage tasks run
    `dvc repro` through it too.

    The command runs in a process group of its own: if this process is stopped (SIGTERM, see
    `raise_on_sigterm`), or anything raises meanwhile (an execution timeout, Ctrl-C), or the
    command fails leaving children behind, the whole group is stopped (`stop_group`), never
    `dvc` alone with its stage left to publish outputs dvc.lock does not describe."""
    echo(f"$ {' '.join(cmd)}   (in {cwd})")
    finished = False
    with raise_on_sigterm():
        proc = start_group(
            cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, bufsize=0,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            with closing(output_lines(proc.stdout)) as lines:  # its wakeup undone at once
                for line in lines:
                    echo(line)
            code = proc.wait()
            finished = code == 0
        finally:
            if not finished:  # killed, interrupted or failed: nothing of it may keep running
                stop_group(proc)
            if proc.stdout is not None:
                proc.stdout.close()
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with status {code} (in {cwd})")


def _git_output(args: list[str], cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} (in {cwd}): {done.stderr.strip()}")
    return done.stdout.strip()


def head_commit(project_dir: Path) -> str:
    """The commit a run's workspaces check out: the project's HEAD."""
    return _git_output(["rev-parse", "HEAD"], project_dir)


def _remote_args(settings: DagSettings) -> list[str]:
    return ["--remote", settings.remote] if settings.remote else []


# --------------------------------------------------------------------------------------------
# One stage instance
# --------------------------------------------------------------------------------------------


def _create(project_dir: Path, commit: str, settings: DagSettings, name: str, echo: Logger) -> Path:
    """A clone of the project at `commit` (git hard-links a local source's objects)."""
    root = settings.root or Path(tempfile.gettempdir()) / "rulerag-workspaces"
    root.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    workspace = root / f"{safe}-{uuid.uuid4().hex[:8]}"
    source = settings.source or str(project_dir)
    clone = ["git", "clone", "--quiet", "--no-checkout", source, str(workspace)]
    stream_command(clone, root, os.environ, echo)
    stream_command(["git", "checkout", "--quiet", "--detach", commit], workspace, os.environ, echo)
    local = project_dir / ".dvc" / "config.local"  # credentials and local remote settings
    if local.is_file():
        shutil.copy2(local, workspace / ".dvc" / "config.local")
    return workspace


def localise_remote(
    project_dir: Path, workspace: Path, env: Mapping[str, str], echo: Logger
) -> None:
    """A local-path remote written relative to the project's `.dvc/` would resolve against
    the workspace's (or a run's copy's, `run_copy`): pin each such remote to its absolute
    path in the workspace's local config (DVC's config files are INI with sections like
    `['remote "storage"']`)."""
    import configparser

    for filename in ("config", "config.local"):
        file = project_dir / ".dvc" / filename
        if not file.is_file():
            continue
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(file, encoding="utf-8")
        for section in parser.sections():
            title = section.strip("'")
            if not title.startswith('remote "') or "url" not in parser[section]:
                continue
            url = parser[section]["url"]
            if "://" in url or os.path.isabs(url):
                continue
            name = title[len('remote "') : -1]
            absolute = str((project_dir / ".dvc" / url).resolve())
            modify = [dvc_executable(env), "remote", "modify", "--local", name, "url", absolute]
            stream_command(modify, workspace, env, echo)


def dvc_executable(env: Mapping[str, str]) -> str:
    """The dvc executable on the environment's PATH."""
    found = shutil.which("dvc", path=env.get("PATH"))
    if not found:
        raise RuntimeError("dvc is not on PATH")
    return found


def run_in_workspace(
    project_dir: Path,
    instance: str,
    upstream: Iterable[str],
    *,
    commit: str,
    params_text: str,
    lock_text: str | None,
    entries: Mapping[str, Any],
    settings: DagSettings,
    env: Mapping[str, str],
    echo: Logger = log.info,
    force: bool = False,
) -> dict[str, Any]:
    """Reproduce `instance` in a workspace of its own and return its dvc.lock entry.

    `upstream`: the instances whose outputs it depends on; `lock_text`: the main workspace's
    dvc.lock at the start of the run, `entries`: the lock entries this run's finished
    upstream instances handed back. The workspace's MLflow runs go to the main project's
    store (`RULERAG_TRACKING_PROJECT`) and converted models are shared (`RULERAG_MODEL_CACHE`).
    `force`: `dvc repro --force`, rerun even when nothing DVC tracks changed.
    """
    project_dir = Path(project_dir).resolve()
    run_env = dict(env)
    run_env.setdefault("RULERAG_TRACKING_PROJECT", str(project_dir))
    run_env.setdefault("RULERAG_MODEL_CACHE", str(project_dir / ".models"))
    workspace = _create(project_dir, commit, settings, instance, echo)
    try:
        (workspace / "params.yaml").write_text(params_text, encoding="utf-8")
        (workspace / "dvc.lock").write_text(overlay_lock(lock_text, entries), encoding="utf-8")
        localise_remote(project_dir, workspace, run_env, echo)
        dvc, remote = dvc_executable(run_env), _remote_args(settings)
        # its deps, and its own last outputs so that an unchanged instance is not rerun
        targets = [*dict.fromkeys(upstream), instance]
        pull = [dvc, "pull", "--allow-missing", *remote, *targets]
        stream_command(pull, workspace, run_env, echo)
        repro = [dvc, "repro", "--single-item", *(["--force"] if force else []), instance]
        stream_command(repro, workspace, run_env, echo)
        stream_command([dvc, "push", *remote, instance], workspace, run_env, echo)
        entry = read_lock_entries(workspace / "dvc.lock", [instance])
        if instance not in entry:
            raise RuntimeError(f"{instance}: dvc repro left no dvc.lock entry in {workspace}")
        return entry[instance]
    finally:
        if settings.keep:
            echo(f"workspace kept: {workspace}")
        else:
            shutil.rmtree(workspace, ignore_errors=True)


def push_outputs(project_dir: Path, settings: DagSettings, env: Mapping[str, str],
                 echo: Logger = log.info) -> None:  # fmt: skip
    """Push the main workspace's cached outputs, so a workspace can pull what this run does
    not rebuild (a first run's empty dvc.lock pushes nothing)."""
    if not (Path(project_dir) / "dvc.lock").is_file():
        return
    push = [dvc_executable(env), "push", *_remote_args(settings)]
    stream_command(push, Path(project_dir), env, echo)


def collect(
    project_dir: Path,
    entries: Mapping[str, Any],
    settings: DagSettings,
    env: Mapping[str, str],
    echo: Logger = log.info,
) -> list[str]:
    """Write the finished instances' entries into the main workspace's dvc.lock and pull
    their outputs there; returns the instances brought in."""
    project_dir = Path(project_dir).resolve()
    if not entries:
        return []
    write_lock_entries(project_dir, entries)
    names = sorted(entries)
    stream_command([dvc_executable(env), "pull", *_remote_args(settings), *names], project_dir,
                   env, echo)  # fmt: skip
    return names
