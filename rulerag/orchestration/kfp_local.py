"""The parts of `kfp_pipeline` that need no KFP SDK, apart from it (it imports the SDK, in a venv
of its own) so that the project's interpreter, and its tests, can read them:

- what a compiled pipeline may carry in its tasks' environment (`check_task_env`: no
  credentials, they belong in a Kubernetes secret, `--secret`);
- how `kfp.local.DockerRunner` runs the pipeline's tasks on this machine (`kfp_pipeline
  run-local --runner docker`, `docker_run_args`): each task in a container of the component's
  image that sees the host paths it needs at the same paths, as the host user, on the host's
  network;
- what a local run collects into the project and what it says afterwards
  (`local_run_arguments`, `describe_local_run`): a run with `params` overrides keeps its
  results out of the project, whose dvc.lock would otherwise disagree with its params.yaml.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rulerag.orchestration.kfp_tasks import PROJECT_ENV

__all__ = [
    "DOCKER_TASK_ENV",
    "SECRET_ENV_KEYS",
    "check_task_env",
    "describe_local_run",
    "docker_run_args",
    "local_run_arguments",
    "secret_env_keys",
]

#: credentials whatever their names say: the DVC remote's S3 keys (the pair
#: `DEFAULT_SECRET_KEYS` maps from a Kubernetes secret), MLflow's login, the API keys
SECRET_ENV_KEYS = frozenset({
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "OPENAI_API_KEY", "RULERAG_API_KEY",
})  # fmt: skip
#: words of a variable's name (split at `_`) that name a secret: `DB_PASSWORD`, `HF_TOKEN`
#: (not `TOKENIZERS_PARALLELISM` or `MAX_TOKENS`: whole words only)
_SECRET_WORDS = frozenset({
    "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD", "TOKEN", "CREDENTIAL",
    "CREDENTIALS", "APIKEY", "PASSPHRASE",
})  # fmt: skip
#: pairs of adjacent words that do: `..._API_KEY`, `..._PRIVATE_KEY`, `..._ACCESS_KEY...`
_SECRET_PAIRS = frozenset({("API", "KEY"), ("PRIVATE", "KEY"), ("ACCESS", "KEY"),
                           ("ACCOUNT", "KEY"), ("AUTH", "KEY")})  # fmt: skip
#: `scheme://userinfo@` in a value (rulerag.redact's reading: the userinfo ends at the last
#: `@` before the host)
_URL_USERINFO = re.compile(r"\b(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<userinfo>[^/\s?#]+)@")

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


# --------------------------------------------------------------------------------------------
# The tasks' environment in the compiled YAML
# --------------------------------------------------------------------------------------------


def _names_secret(key: str) -> bool:
    words = key.upper().split("_")
    return (
        key.upper() in SECRET_ENV_KEYS
        or any(word in _SECRET_WORDS for word in words)
        or any(pair in _SECRET_PAIRS for pair in zip(words, words[1:], strict=False))
    )


def _holds_url_credentials(value: str) -> bool:
    """A URL with a password (`user:password@`, any scheme), or with any userinfo over http(s),
    where a lone userinfo is a token (`https://<token>@github.com/...`). `ssh://git@host`
    names a user, not a secret."""
    for match in _URL_USERINFO.finditer(value):
        if ":" in match["userinfo"] or match["scheme"].lower() in ("http", "https"):
            return True
    return False


def secret_env_keys(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of `env` that carry a secret, each with why: a name that names one
    (`SECRET_ENV_KEYS`, or a word such as PASSWORD, TOKEN, SECRET, API_KEY in it) or a value
    holding URL credentials. Values are never repeated."""
    found: dict[str, str] = {}
    for key, value in env.items():
        if _names_secret(key):
            found[key] = "names a secret"
        elif _holds_url_credentials(str(value)):
            found[key] = "its value holds URL credentials (user:password@)"
    return found


def check_task_env(env: Mapping[str, str], what: str = "KFP --env") -> None:
    """Refuse an environment for the compiled pipeline's tasks that carries a secret: KFP
    writes every variable into each task's spec of the IR YAML in plain text (a URL's password
    117 times in a pipeline of the whole graph), and the YAML is uploaded, shared and kept.
    Credentials go into a Kubernetes secret the tasks read (`--secret`)."""
    found = secret_env_keys(env)
    if not found:
        return
    named = "; ".join(f"{key}: {why}" for key, why in sorted(found.items()))
    raise ValueError(
        f"{what} carries credentials ({named}): the compiled YAML would hold them in plain text "
        "in every task. Put them in a Kubernetes secret (kubectl create secret generic NAME "
        "--from-literal=KEY=...) and pass --secret NAME --secret-keys KEY ...; a tracking "
        "server's login goes in MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD that way, "
        "its URL in --env without user:password@"
    )


# --------------------------------------------------------------------------------------------
# A local run: into the project or not, and what it says
# --------------------------------------------------------------------------------------------


def local_run_arguments(arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The pipeline's arguments for a run on this machine: `collect_into_project` unless the
    run overrides `params` (or the caller said otherwise). A run with overrides collected into
    the project would leave dvc.lock entries made with params that params.yaml does not have
    (`dvc status`: params modified), without a word; it keeps its dvc.lock in `collect`'s
    artifact instead (`describe_local_run` says where)."""
    out = dict(arguments or {})
    out.setdefault("collect_into_project", not out.get("params"))
    return out


def describe_local_run(summary: Mapping[str, Any]) -> str:
    """What a local run left where (`collect`'s summary): the instances collected into the
    project, or, when none were, where the run's dvc.lock and params.yaml are and how to bring
    the run into the project."""
    run, ran = summary.get("run", "?"), list(summary.get("ran") or [])
    collected = list(summary.get("collected") or [])
    if collected or not ran:
        return f"KFP local run {run}: {len(collected)} of {len(ran)} stage instances collected"
    lock, params = summary.get("lock"), summary.get("params")
    why = summary.get("kept_out") or (
        "not collected into the project (a run with params overrides: its dvc.lock entries "
        "would disagree with the project's params.yaml)"
    )
    lines = [f"KFP local run {run}: {len(ran)} stage instances ran; {why}."]
    if lock:
        lines.append(f"  the run's dvc.lock: {lock}")
    if params:
        lines.append(f"  the run's params.yaml: {params}")
    if lock and params:
        lines.append(
            "  to bring the run into the project (its params.yaml too; outputs from the DVC "
            "remote): cp "
            f"{shlex.quote(str(params))} params.yaml && cp {shlex.quote(str(lock))} dvc.lock && "
            f"dvc pull {shlex.join(ran)}"
        )
    return "\n".join(lines)
