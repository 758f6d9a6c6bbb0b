"""Staged stage outputs: all files move into place together, or none does."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rulerag.errors import OutputIntegrityError
from rulerag.io import (
    iter_jsonl,
    read_jsonl,
    sha256_file,
    staged_dir,
    staged_outputs,
    sweep_stale,
    verify_output,
    write_jsonl,
)


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
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.txt",
        "b.txt",
        "keep.txt",
        "manifest.json",
    ]


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


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def test_sweep_removes_what_killed_writers_left_and_nothing_else(tmp_path: Path) -> None:
    """Leftovers of a dead process go; a live writer's staging and ordinary files stay."""
    dead, live = _dead_pid(), os.getppid()
    (tmp_path / f".mine-{dead}-0123456789ab").mkdir()
    (tmp_path / f".mine-{dead}-0123456789ab" / "rules.parquet").write_text("partial")
    (tmp_path / f".stats.json-{dead}-abcdef012345.tmp").write_text("{")
    (tmp_path / f".mine-{live}-0123456789ab").mkdir()
    (tmp_path / "stats.json").write_text("{}")
    (tmp_path / ".gitignore").write_text("x")
    removed = sweep_stale(tmp_path)
    assert len(removed) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".gitignore",
        f".mine-{live}-0123456789ab",
        "stats.json",
    ]


def test_staged_outputs_sweep_a_killed_run_first(tmp_path: Path) -> None:
    stale = tmp_path / f".bench-{_dead_pid()}-0123456789ab"
    stale.mkdir()
    (stale / "corpus.jsonl").write_text('{"id": 1}\n')
    with staged_outputs(tmp_path, "bench") as staging:
        (staging / "corpus.jsonl").write_text('{"id": 2}\n')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "manifest.json"]


def test_a_folder_moved_aside_by_a_killed_publish_comes_back(tmp_path: Path) -> None:
    """Killed between `publish_dir`'s two renames: the old index is back, not lost."""
    index = tmp_path / "index"
    aside = tmp_path / f".old-index-{_dead_pid()}-0123456789ab"
    aside.mkdir()
    (aside / "part.bin").write_text("complete old index")
    assert sweep_stale(tmp_path) == [aside.name]
    assert (index / "part.bin").read_text() == "complete old index"
    with staged_dir(index) as staging:
        (staging / "part.bin").write_text("new")
    assert (index / "part.bin").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_a_stage_output_cut_at_a_line_boundary_is_noticed(tmp_path: Path) -> None:
    """1,000 of 1,200 lines parse fine; the manifest the stage wrote says they are too few."""
    rows = [{"id": str(i), "contents": f"document {i}"} for i in range(1200)]
    with staged_outputs(tmp_path, "bench") as staging:
        write_jsonl(staging / "corpus.jsonl", rows)
    corpus = tmp_path / "corpus.jsonl"
    assert list(iter_jsonl(corpus)) == rows
    verify_output(corpus)
    lines = corpus.read_bytes().splitlines(keepends=True)
    corpus.write_bytes(b"".join(lines[:1000]))
    with pytest.raises(OutputIntegrityError, match=r"corpus\.jsonl: .*1200 lines.*rerun"):
        list(iter_jsonl(corpus))
    with pytest.raises(OutputIntegrityError, match="cut short or changed"):
        verify_output(corpus)
    corpus.write_bytes(b"".join(lines).replace(b"document 7", b"document 8"))
    with pytest.raises(OutputIntegrityError):
        read_jsonl(corpus)


def test_files_no_stage_wrote_are_read_as_they_are(tmp_path: Path) -> None:
    (tmp_path / "mine.jsonl").write_text('{"a": 1}\n\n{"a": 2}\n')
    assert read_jsonl(tmp_path / "mine.jsonl") == [{"a": 1}, {"a": 2}]
    verify_output(tmp_path / "mine.jsonl")
