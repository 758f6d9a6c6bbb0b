"""Staged stage outputs: all files move into place together, or none does."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rulerag.errors import InputError, OutputIntegrityError, StorageError
from rulerag.io import (
    iter_jsonl,
    read_jsonl,
    read_parquet,
    read_provenance,
    sha256_file,
    staged_dir,
    staged_outputs,
    sweep_stale,
    verify_output,
    write_json,
    write_jsonl,
    write_parquet,
)
from tests.helpers import refuse_writes_under


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


# -- issue 28, part 4: publishing as one step for readers, Parquet checked, disk errors ----------

OLD_SET = {"bank.parquet": [1, 2, 3, 4], "rules.parquet": [1, 2, 3, 4, 5, 6], "stats.json": 1}
#: the next run: other rows, and a file the old run did not write (so its manifest cannot list it)
NEW_SET = {
    "bank.parquet": [7, 8],
    "rules.parquet": [7, 8, 9],
    "stats.json": 2,
    "curve.parquet": [0],
}


def _publish(folder: Path, files: dict[str, object]) -> None:
    with staged_outputs(folder, "mine_rules") as staging:
        for name, value in files.items():
            if name.endswith(".parquet"):
                write_parquet(staging / name, pd.DataFrame({"x": value}), {"stage": "mine_rules"})
            else:
                write_json(staging / name, {"run": value})


def _observe(folder: Path) -> dict[str, object]:
    """What a checked reader gets from each file: its content, 'missing', or the error."""
    seen: dict[str, object] = {}
    for name in sorted(NEW_SET):
        path = folder / name
        try:
            verify_output(path)
            if name.endswith(".parquet"):
                seen[name] = pd.read_parquet(path)["x"].tolist()
            else:
                seen[name] = json.loads(path.read_text())["run"]
        except FileNotFoundError:
            seen[name] = "missing"
        except OutputIntegrityError as err:
            seen[name] = err
    return seen


class _Killed(Exception):
    """Stands for a kill -9 at one `os.replace` of a publish (what runs after it never does)."""


def test_a_publish_killed_at_any_point_is_the_old_set_the_new_set_or_refused(
    tmp_path: Path,
) -> None:
    """Files used to move one by one in name order (bank.parquet before manifest.json): killed
    in between, a reader got the new bank with the old manifest, and a file the old manifest
    does not list was read unchecked: a silent mix. Now every state a kill can leave is the
    complete old set, the complete new set, or refused naming the folder and the stage."""
    old_folder, new_folder = tmp_path / "old", tmp_path / "new"
    _publish(old_folder, OLD_SET)
    _publish(new_folder, OLD_SET)
    _publish(new_folder, NEW_SET)
    old, new = _observe(old_folder), _observe(new_folder)
    assert old["curve.parquet"] == "missing" and new["bank.parquet"] == [7, 8]
    real_replace, outcomes = os.replace, set()
    for kill_at in range(40):
        folder = tmp_path / f"kill{kill_at}"
        _publish(folder, OLD_SET)
        calls = 0

        def replace(src, dst, *, _at=kill_at):  # type: ignore[no-untyped-def]
            nonlocal calls
            calls += 1
            if calls > _at:
                raise _Killed
            real_replace(src, dst)

        os.replace = replace
        try:
            _publish(folder, NEW_SET)
        except _Killed:
            pass
        finally:
            os.replace = real_replace
        seen = _observe(folder)
        if seen == old:
            outcomes.add("old")
        elif seen == new:
            outcomes.add("new")
            break  # killed after the last rename: the publish was complete
        else:
            errors = [v for v in seen.values() if isinstance(v, OutputIntegrityError)]
            assert len(errors) == len(seen), f"killed at rename {kill_at}: a mix {seen}"
            for err in errors:
                assert str(err).startswith(f"{folder}: outputs of an interrupted run")
                assert str(err).endswith("rerun mine_rules")
            outcomes.add("refused")
    assert outcomes == {"old", "refused", "new"}
    _publish(folder, NEW_SET)  # the rerun the message asks for
    assert _observe(folder) == new


def test_read_parquet_refuses_fewer_rows_than_the_manifest_records(tmp_path: Path) -> None:
    """A valid Parquet file with half the rows of the recorded one used to be read silently."""
    _publish(tmp_path, OLD_SET)
    assert read_parquet(tmp_path / "bank.parquet")["x"].tolist() == [1, 2, 3, 4]
    write_parquet(tmp_path / "bank.parquet", pd.DataFrame({"x": [1, 2]}), {"stage": "x"})
    with pytest.raises(OutputIntegrityError, match=r"bank\.parquet: .*cut short or changed"):
        read_parquet(tmp_path / "bank.parquet", columns=["x"])
    with pytest.raises(OutputIntegrityError, match=r"bank\.parquet"):
        read_provenance(tmp_path / "bank.parquet")


def test_read_parquet_where_keeps_the_rows_of_the_values_in_file_order(tmp_path: Path) -> None:
    """Checked against pandas' own selection of the whole frame, on a file of row groups of
    7 rows (a value's rows in several groups, groups holding none of the values)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    frame = pd.DataFrame(
        {"qid": [f"q{i % 9}" for i in range(60)], "rank": range(60), "score": [0.5] * 60}
    )
    path = tmp_path / "run.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=7)
    assert pq.ParquetFile(path).metadata.num_row_groups == 9
    for values in (["q3"], ["q8", "q0", "q8"], ["q1", "absent"], ["absent"]):
        expected = frame[frame["qid"].isin(values)].reset_index(drop=True)
        pd.testing.assert_frame_equal(read_parquet(path, where=("qid", values)), expected)
        pd.testing.assert_frame_equal(
            read_parquet(path, ["rank", "qid"], where=("qid", iter(values))),
            expected[["rank", "qid"]],
        )
    for columns in (None, ["score"]):  # no value at all: no row, the columns and their types
        none = read_parquet(path, columns, where=("qid", []))
        assert none.empty
        assert none.dtypes.to_dict() == frame[columns or frame.columns].dtypes.to_dict()


def test_read_parquet_where_still_refuses_a_file_its_manifest_does_not_describe(
    tmp_path: Path,
) -> None:
    _publish(tmp_path, OLD_SET)
    assert read_parquet(tmp_path / "bank.parquet", where=("x", [2, 4]))["x"].tolist() == [2, 4]
    write_parquet(tmp_path / "bank.parquet", pd.DataFrame({"x": [1, 2]}), {"stage": "x"})
    with pytest.raises(OutputIntegrityError, match=r"bank\.parquet"):
        read_parquet(tmp_path / "bank.parquet", where=("x", [2]))


def test_read_parquet_hashes_a_file_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rulerag.io as io

    _publish(tmp_path, OLD_SET)
    hashed: list[Path] = []
    real = io.sha256_file
    monkeypatch.setattr(io, "sha256_file", lambda path: hashed.append(Path(path)) or real(path))
    for _ in range(3):
        read_parquet(tmp_path / "rules.parquet")
        read_provenance(tmp_path / "rules.parquet")
    assert hashed == [tmp_path / "rules.parquet"]
    frame = pd.read_parquet(tmp_path / "rules.parquet")
    write_parquet(tmp_path / "rules.parquet", frame.head(2), {"stage": "x"})  # changed since
    with pytest.raises(OutputIntegrityError):
        read_parquet(tmp_path / "rules.parquet")


def test_a_truncated_parquet_file_is_one_line_naming_it(tmp_path: Path) -> None:
    """Without a manifest to compare with, Arrow's `ArrowInvalid` used to be the traceback."""
    path = tmp_path / "facts.parquet"
    write_parquet(path, pd.DataFrame({"x": list(range(1000))}), {"stage": "ingest"})
    path.write_bytes(path.read_bytes()[:200])
    for read in (read_parquet, read_provenance):
        with pytest.raises(InputError, match=rf"^{path}: cannot be read as Parquet .*rerun"):
            read(path)
    _publish(tmp_path, OLD_SET)  # with a manifest: what its writer recorded
    cut = tmp_path / "bank.parquet"
    cut.write_bytes(cut.read_bytes()[:100])
    with pytest.raises(OutputIntegrityError, match=r"bank\.parquet: 100 bytes"):
        read_parquet(cut)


def test_a_full_disk_names_the_file_it_was_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC from Arrow (errno 28, no file name) used to be an OSError traceback."""
    import pyarrow.parquet as pq

    def full(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, "Error writing bytes to file. No space left on device")

    monkeypatch.setattr(pq, "write_table", full)
    with pytest.raises(StorageError) as info:
        _publish(tmp_path / "out", OLD_SET)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'out' / 'bank.parquet'}: cannot write it: ")
    assert "No space left" in message and "free space" in message
    assert "\n" not in message
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []  # no staging left


def test_a_read_only_folder_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    data.mkdir()
    refuse_writes_under(data, monkeypatch)
    for write in (
        lambda: _publish(data / "out", OLD_SET),
        lambda: write_json(data / "stats.json", {}),
        lambda: staged_dir(data / "index").__enter__(),
    ):
        with pytest.raises(StorageError, match=rf"^{data}\S*: cannot write it: .*writable"):
            write()
    assert list(data.iterdir()) == []


def test_publish_dir_swaps_in_one_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`publish_dir` renamed the old folder aside, then the new one in: killed in between, a
    reader found no index at all. The two folders now swap names in one step (Linux)."""
    target = tmp_path / "index"
    target.mkdir()
    (target / "part.bin").write_text("old")

    def killed(self: Path, dest: object) -> None:
        raise _Killed

    monkeypatch.setattr(Path, "rename", killed)  # a second rename would never happen
    with staged_dir(target) as staging:
        (staging / "part.bin").write_text("new")
    assert (target / "part.bin").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]
