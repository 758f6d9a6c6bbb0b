"""Staged stage outputs: all files move into place together, or none does."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from rulerag.io import sha256_file, staged_dir, staged_outputs


def test_staged_outputs_replace_together_and_leave_no_staging(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("old a")
    (tmp_path / "keep.txt").write_text("untouched")
    with staged_outputs(tmp_path, "demo") as staging:
        assert staging.parent == tmp_path and staging.name.startswith(".demo-")
        (staging / "a.txt").write_text("new a")
        (staging / "b.txt").write_text("new b")
    assert (tmp_path / "a.txt").read_text() == "new a"
    assert (tmp_path / "b.txt").read_text() == "new b"
    assert (tmp_path / "keep.txt").read_text() == "untouched"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt", "keep.txt"]


def test_a_failing_stage_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("old a")
    with pytest.raises(RuntimeError), staged_outputs(tmp_path, "demo") as staging:
        (staging / "a.txt").write_text("half")
        raise RuntimeError("killed")
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]
    assert (tmp_path / "a.txt").read_text() == "old a"


def test_staged_dir_replaces_the_whole_folder_or_nothing(tmp_path: Path) -> None:
    target = tmp_path / "index"
    target.mkdir()
    (target / "old.bin").write_text("old")
    with pytest.raises(RuntimeError), staged_dir(target) as staging:
        (staging / "new.bin").write_text("half")
        raise RuntimeError("killed")
    assert [p.name for p in target.iterdir()] == ["old.bin"]
    with staged_dir(target) as staging:
        (staging / "new.bin").write_text("new")
    assert [p.name for p in target.iterdir()] == ["new.bin"]
    assert [p.name for p in tmp_path.iterdir()] == ["index"]


def test_sha256_file_matches_hashlib_across_chunks(tmp_path: Path) -> None:
    data = bytes(range(256)) * 1000
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert sha256_file(path, chunk=1000) == hashlib.sha256(data).hexdigest()
