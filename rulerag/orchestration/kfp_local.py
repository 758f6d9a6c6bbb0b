"""How `kfp.local.DockerRunner` runs the pipeline's tasks on this machine (`kfp_pipeline
run-local --runner docker`): each task in a container of the component's image that sees the
host paths it needs at the same paths, as the host user, on the host's network.

Apart from kfp_pipeline (which imports the KFP SDK, in a venv of its own) so that the project's
interpreter, and its tests, can read it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rulerag.orchestration.kfp_tasks import PROJECT_ENV

__all__ = ["DOCKER_TASK_ENV", "docker_run_args"]

#: what a task in a container needs from the host's environment (`docker_run_args`)
DOCKER_TASK_ENV = (
    PROJECT_ENV, "RULERAG_DATA_DIR", "RULERAG_WORKSPACE_ROOT", "RULERAG_DVC_REMOTE",
    "RULERAG_GIT_SOURCE", "MLFLOW_TRACKING_URI", "DVC_NO_ANALYTICS",
)  # fmt: skip


def docker_run_args(
    project: Path, extra_mounts: Sequence[Path] = (), env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """`kfp.local.DockerRunner`'s container options for a run against `project`: the project,
    the KG mirror (read-only), the workspace root and `extra_mounts` (a local-path DVC remote)
    bind-mounted at their own paths, so the tasks see the paths the host does; the variables of
    `DOCKER_TASK_ENV` that are set; the host user (what the tasks write stays the user's); the
    host's network (a tracking server on 127.0.0.1). The pipeline root KFP mounts itself."""
    from docker.types import Mount

    env = os.environ if env is None else env
    mirror = env.get("RULERAG_DATA_DIR") or None  # set but empty (make's default): none
    paths = [project, *extra_mounts]
    paths += [Path(env[k]) for k in ("RULERAG_DATA_DIR", "RULERAG_WORKSPACE_ROOT") if env.get(k)]
    if env.get("RULERAG_WORKSPACE_ROOT"):  # the tasks make their workspaces under it
        Path(env["RULERAG_WORKSPACE_ROOT"]).mkdir(parents=True, exist_ok=True)
    mounts, seen = [], set()
    for path in paths:
        path = Path(path).resolve()
        if str(path) in seen:
            continue
        if not path.exists():
            raise ValueError(f"{path}: no such folder to mount into the tasks' containers")
        seen.add(str(path))
        read_only = mirror is not None and path == Path(mirror).resolve()
        mounts.append(Mount(str(path), str(path), type="bind", read_only=read_only))
    environment = {key: env[key] for key in DOCKER_TASK_ENV if env.get(key)}
    environment[PROJECT_ENV] = str(project)
    return {
        "mounts": mounts,
        "environment": environment,
        "user": f"{os.getuid()}:{os.getgid()}",
        "network_mode": "host",
    }
