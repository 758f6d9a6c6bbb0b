"""Which commit a benchmark measured (the scratch copy it runs is
`rulerag.orchestration.project_copy.copy_project`'s)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["short_commit"]


def short_commit(source: Path) -> str:
    """`source`'s HEAD, abbreviated, with `+` when its work tree has uncommitted changes."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=source, capture_output=True, text=True
        ).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + ("+" if git("status", "--porcelain") else "")
