"""A scratch copy of a checkout, for benchmarks that run the project somewhere it cannot harm:
`source`'s tracked and untracked-but-not-ignored files, committed as a fresh repository (so git,
DVC and the Airflow DAG see a clean work tree), without data, venvs or caches."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["copy_checkout", "short_commit"]


def copy_checkout(source: Path, dest: Path) -> Path:
    """`source`'s tracked and untracked-but-not-ignored files as a fresh git repository."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=source, check=True, capture_output=True,
    ).stdout.decode()  # fmt: skip
    for rel in (p for p in listed.split("\0") if p and (source / p).is_file()):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / rel, dest / rel)
    git = ["git", "-c", "user.email=bench@rulerag", "-c", "user.name=bench"]
    subprocess.run([*git, "init", "-q"], cwd=dest, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "copy"], cwd=dest, check=True)
    return dest


def short_commit(source: Path) -> str:
    """`source`'s HEAD, abbreviated, with `+` when its work tree has uncommitted changes."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=source, capture_output=True, text=True
        ).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + ("+" if git("status", "--porcelain") else "")
