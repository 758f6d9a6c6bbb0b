"""Atomic, deterministic writers for stage outputs, and the checked readers of them.

Every output goes to a temporary name in the same folder and is renamed into place, so a killed
stage never leaves a half-written file under the final name (docs/data-flow.md). A stage that
writes several files stages them together (`staged_outputs`, `staged_dir`) and moves them into
place only when all of them were written. Temporary names carry the writer's process id
(`.<label>-<pid>-<token>`), so the next writer into the same folder removes what a killed one
left behind (`sweep_stale`) and never touches what a live one is writing.

A folder of staged outputs carries `manifest.json` (each file's size and sha256). Publishing
marks it as in progress before the first file moves and puts the final manifest in place last,
so a folder whose publishing was killed half-way is recognised by every checked reader
(`read_parquet`, `iter_jsonl`, `verify_output`) instead of being read as a mix of two runs.

Parquet files carry the parameters that produced them in their key-value metadata and contain
no timestamps, so the same input and parameters give byte-identical files. A full disk or a
read-only folder is a `StorageError` naming the file (one line, exit 2), not a traceback.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rulerag.errors import InputError, OutputIntegrityError, StorageError

logger = logging.getLogger(__name__)

#: Key under which rulerag stores provenance (stage, dataset, params) in Parquet metadata.
PARQUET_META_KEY = b"rulerag"

#: `.<label>-<pid>-<token>[.tmp]`: every temporary entry this module creates.
_TEMP_RE = re.compile(r"^\.(?P<label>.+)-(?P<pid>\d+)-(?P<token>[0-9a-f]{12})(?:\.tmp)?$")
#: the label of a folder moved aside by `publish_dir` (`.old-<target>-<pid>-<token>`)
_OLD = "old-"


#: errno values that say the disk or its permissions refused an operation, not the code:
#: full (ENOSPC, EDQUOT, EFBIG), read-only (EROFS) or not writable / readable (EACCES, EPERM)
_STORAGE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}
)


def _public_path(path: Path) -> Path:
    """`path` without the staging folder it is written in (`out/.stage-<pid>-<token>/x` is
    `out/x` to the user): the name the file will have."""
    path = Path(path)
    match = _TEMP_RE.match(path.name)
    if match:  # a temporary file stands for its target, a staging folder for its folder
        path = path.parent / match["label"] if path.name.endswith(".tmp") else path.parent
    if _TEMP_RE.match(path.parent.name):
        path = path.parent.parent / path.name
    return path


def storage_error(err: OSError, path: Path, action: str = "write") -> StorageError | None:
    """A `StorageError` naming `path` (or the file `err` names) for an `OSError` that the disk
    or its permissions caused; None for any other `OSError` (a bug keeps its traceback)."""
    if err.errno not in _STORAGE_ERRNOS:
        return None
    named = _public_path(Path(err.filename)) if err.filename else _public_path(path)
    if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        hint = "free space on that device (or raise its quota) and rerun"
    elif action == "write":
        hint = "the data folder must be writable: fix its permissions or mount, then rerun"
    else:
        hint = "the file must be readable: fix its permissions, then rerun"
    reason = err.strerror or os.strerror(err.errno)
    return StorageError(f"{named}: cannot {action} it: {reason}; {hint}")


@contextlib.contextmanager
def storage_errors(path: Path, action: str = "write") -> Iterator[None]:
    """Turn a full disk or a refused permission inside the block into a `StorageError` naming
    `path` (a stage run directly used to end in an `OSError` traceback)."""
    try:
        yield
    except OSError as err:
        converted = storage_error(err, path, action)
        if converted is None:
            raise
        raise converted from err


def pid_alive(pid: int) -> bool:
    """Whether process `pid` still runs on this machine (a zombie, killed but not yet reaped,
    does not)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return psutil.pid_exists(pid)


def _temp_entry(folder: Path, label: str, suffix: str = "") -> Path:
    """A fresh temporary name in `folder` that `sweep_stale` can attribute to this process."""
    return folder / f".{label}-{os.getpid()}-{uuid.uuid4().hex[:12]}{suffix}"


def sweep_stale(folder: Path) -> list[str]:
    """Remove the temporary files and folders that killed writers left in `folder`.

    Only entries named by this module whose process is gone are touched. A folder that
    `publish_dir` had moved aside when its writer died goes back under its name if nothing
    took that name, so the last complete output comes back; otherwise it is removed. Returns
    the names removed or restored (also logged), for the stage's message.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    done: list[str] = []
    for entry in sorted(folder.iterdir()):
        match = _TEMP_RE.match(entry.name)
        if not match or int(match["pid"]) == os.getpid() or pid_alive(int(match["pid"])):
            continue
        label = match["label"]
        original = folder / label[len(_OLD) :]
        if label.startswith(_OLD) and not original.exists():
            entry.rename(original)
            logger.warning("restored %s, moved aside by a killed run", original)
        elif entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
            logger.warning("removed %s, left by a killed run", entry)
        else:
            entry.unlink(missing_ok=True)
            logger.warning("removed %s, left by a killed run", entry)
        done.append(entry.name)
    return done


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds
    (what killed writers left beside it is swept first)."""
    path = Path(path)
    with storage_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(path.parent)
        tmp = _temp_entry(path.parent, path.name, ".tmp")
        tmp.touch(exist_ok=False)
    try:
        with storage_errors(path):
            yield tmp
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_open(path: Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary file for writing that replaces `path` when closed without error."""
    if "b" in mode:
        encoding = None
    with atomic_path(path) as tmp, open(tmp, mode, encoding=encoding) as handle:
        yield handle


def write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """JSON lines (one object per line, UTF-8 kept as is), written atomically: the benchmark's
    corpus and query files, Pyserini's JsonCollection input."""
    with atomic_open(path) as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a JSON-lines file, blank lines skipped; a bad line names `file:line`.

    A stage output (listed in the `manifest.json` its stage wrote beside it) is checked as it
    is read: a file cut at a line boundary parses fine, so its size and sha256 are compared
    with the writer's record once the last line is read (`OutputIntegrityError`).
    """
    path = Path(path)
    expected = manifest_entry(path)
    digest = hashlib.sha256()
    size = 0
    with _readable(path), open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            digest.update(raw)
            size += len(raw)
            line = raw.decode("utf-8", errors="strict") if raw.strip() else ""
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not JSON: {err}") from err
    if expected is not None:
        _check_entry(path, expected, size, digest.hexdigest())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """All records of a JSON-lines file (see `iter_jsonl`)."""
    return list(iter_jsonl(path))


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically with sorted keys and a trailing newline (stable diffs)."""
    with atomic_open(path) as handle:
        json.dump(obj, handle, indent=2, sort_keys=True, ensure_ascii=False)
        handle.write("\n")


def with_provenance(schema: pa.Schema, provenance: Mapping[str, Any]) -> dict[bytes, bytes]:
    """`schema`'s metadata with `provenance` as JSON under `PARQUET_META_KEY`."""
    meta = dict(schema.metadata or {})
    meta[PARQUET_META_KEY] = json.dumps(provenance, sort_keys=True, default=str).encode()
    return meta


def write_parquet(path: Path, frame: pd.DataFrame, provenance: Mapping[str, Any]) -> None:
    """Write `frame` atomically as Parquet, with `provenance` as JSON in the file metadata."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata(with_provenance(table.schema, provenance))
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_parquet(
    path: Path,
    columns: Sequence[str] | None = None,
    *,
    where: tuple[str, Iterable[Any]] | None = None,
) -> pd.DataFrame:
    """A Parquet file (or some of its `columns`), checked against the manifest of its folder;
    with `where` (a column, its values), only the rows whose column holds one of the values,
    in file order: Arrow filters the file row group by row group (and skips the groups whose
    statistics exclude the values), so the peak is the rows kept, not the file (a retrieval
    run of tens of millions of rows read for the hundred queries of a grid row).

    Every reader of a stage's Parquet output goes through here: a valid Parquet file with
    fewer rows than its writer recorded, or one from another run in a folder whose publishing
    was killed, is an `OutputIntegrityError`, not a smaller table read silently; a file that
    is no Parquet (cut short without a manifest) is an `InputError` naming it. A missing file
    stays a `FileNotFoundError` naming it (a stage says which stage writes it).
    """
    path = Path(path)
    verify_output(path)
    selected = None if columns is None else list(columns)
    with _parquet_errors(path):
        if where is None:
            return pd.read_parquet(path, columns=selected)
        column, values = where[0], list(where[1])
        if not values:  # Arrow cannot type an empty value set: no row, the file's columns
            return pq.read_schema(path).empty_table().to_pandas()[selected or slice(None)]
        return pd.read_parquet(path, columns=selected, filters=[(column, "in", values)])


def read_provenance(path: Path) -> dict[str, Any]:
    """Return the provenance a rulerag Parquet file was written with (empty if none); the file
    is checked as `read_parquet` checks it."""
    path = Path(path)
    verify_output(path)
    with _parquet_errors(path):
        meta = pq.read_schema(path).metadata or {}
    raw = meta.get(PARQUET_META_KEY)
    return json.loads(raw) if raw else {}


@contextlib.contextmanager
def _parquet_errors(path: Path) -> Iterator[None]:
    """Arrow's errors for a file that is no (longer a) Parquet file, as one line naming it;
    a missing file stays a `FileNotFoundError`, with its `filename` set (pandas and Arrow
    leave it None), so the stage wrapper can say which stage writes it."""
    with _readable(path):
        try:
            yield
        except FileNotFoundError as err:
            if err.filename is not None:
                raise
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path)) from err
        except pa.ArrowInvalid as err:
            raise InputError(
                f"{path}: cannot be read as Parquet ({str(err).splitlines()[0]}): the file is "
                "cut short or no Parquet file; rerun the stage that writes it"
            ) from err


@contextlib.contextmanager
def _readable(path: Path) -> Iterator[None]:
    """`storage_errors` for a read (a file the stage may not open)."""
    with storage_errors(path, "read"):
        yield


#: What a stage recorded about each file it wrote into a folder: bytes, sha256 (and the line
#: count of JSON-lines files), so that a reader notices a file cut short, even at a line boundary.
MANIFEST = "manifest.json"
#: The key of a manifest that `staged_outputs` puts in place before it moves the first file
#: and replaces last: present, the folder's files may be half old, half new (its value names
#: the stage that was publishing them).
PUBLISHING = "publishing"


def write_manifest(folder: Path, names: Iterable[str] | None = None) -> Path:
    """Record size, sha256 and (JSON lines) line count of `names` (default: every file of
    `folder` but the manifest and temporary entries) in `folder/manifest.json`."""
    folder = Path(folder)
    with storage_errors(folder, "read"):
        if names is None:
            names = [
                p.name
                for p in folder.iterdir()
                if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")
            ]
        files: dict[str, dict[str, Any]] = {}
        for name in sorted(names):
            entry: dict[str, Any] = {"bytes": (folder / name).stat().st_size}
            entry["sha256"] = sha256_file(folder / name)
            if name.endswith(".jsonl"):
                with open(folder / name, "rb") as handle:
                    entry["lines"] = sum(1 for _ in handle)
            files[name] = entry
    write_json(folder / MANIFEST, {"files": files})
    return folder / MANIFEST


def manifest_entry(path: Path) -> dict[str, Any] | None:
    """What the manifest beside `path` records about it; None when there is no manifest (a
    file that no stage wrote, e.g. a user's own) or it does not list the file.

    A manifest still marked as publishing (`PUBLISHING`) means a run was killed while moving
    its files into the folder: whatever the file, the folder is refused, naming the stage to
    rerun (`OutputIntegrityError`).
    """
    path = Path(path)
    manifest = path.parent / MANIFEST
    with _readable(manifest):
        if not manifest.is_file():
            return None
        text = manifest.read_text(encoding="utf-8")
    try:
        record = json.loads(text)
        files = record["files"]
        stage = record.get(PUBLISHING)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise OutputIntegrityError(f"{manifest}: unreadable ({err}); rerun its stage") from err
    if stage is not None:
        raise OutputIntegrityError(
            f"{path.parent}: outputs of an interrupted run ({stage} was stopped while moving "
            f"them into place, so some files may be new and some old); rerun {stage}"
        )
    return files.get(path.name)


#: Files this process has checked against their manifest, with what made them pass (the
#: file's and the manifest's identity, size and times): a file is hashed once per process,
#: unless it or its manifest changes.
_VERIFIED: dict[Path, tuple[int, ...]] = {}


def verify_output(path: Path) -> None:
    """Check a stage output against its manifest before a reader that cannot check as it
    reads (a Parquet reader, an indexer reading the file itself); no-op without a manifest
    entry. Hashes a file once per process while neither it nor its manifest changes."""
    path = Path(path)
    expected = manifest_entry(path)
    if expected is None:
        return
    with _readable(path):
        key = (*_identity(path), *_identity(path.parent / MANIFEST))
        resolved = path.resolve()
        if _VERIFIED.get(resolved) == key:
            return
        _check_entry(path, expected, path.stat().st_size, sha256_file(path))
    _VERIFIED[resolved] = key


def _identity(path: Path) -> tuple[int, ...]:
    st = path.stat()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _check_entry(path: Path, expected: Mapping[str, Any], size: int, sha256: str) -> None:
    if size == expected.get("bytes") and sha256 == expected.get("sha256"):
        return
    recorded = f"{expected.get('bytes')} bytes" + (
        f", {expected['lines']} lines" if "lines" in expected else ""
    )
    raise OutputIntegrityError(
        f"{path}: {size} bytes that do not match what its stage recorded in "
        f"{path.parent / MANIFEST} ({recorded}, sha256 {str(expected.get('sha256'))[:12]}...): "
        "the file was cut short or changed since; rerun the stage that writes it "
        "(dvc repro -f -s <stage>@<item>)"
    )


@contextlib.contextmanager
def staged_outputs(out_dir: Path, stage: str = "stage") -> Iterator[Path]:
    """Yield an empty staging folder inside `out_dir`; write a stage's outputs there.

    When the block succeeds, every entry of the staging folder replaces its namesake in
    `out_dir`; when it fails, nothing in `out_dir` changes. Either way the staging folder is
    removed. `stage` (the stage's name) names the staging folder (`.<stage>-<pid>-...`), so a
    leftover of a killed process says which stage left it; what killed writers left in
    `out_dir` is swept first.

    DVC declares a stage's files, not its folder, as outputs, so the files are moved one by
    one, and the folder's `manifest.json` (every staged file's size and sha256,
    `write_manifest`) makes the set atomic as readers see it: a manifest marked `PUBLISHING`
    (naming `stage`) replaces the old one before the first file moves, and the final one goes
    in last. A run killed in between leaves a folder that every checked reader refuses
    (`manifest_entry`: "outputs of an interrupted run; rerun <stage>"), never a silent mix of
    old and new files.
    """
    out_dir = Path(out_dir)
    with storage_errors(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
        sweep_stale(out_dir)
        staging = _temp_entry(out_dir, stage)
        staging.mkdir()
    try:
        with storage_errors(out_dir):
            yield staging
            manifest = write_manifest(staging)
            record = json.loads(manifest.read_text(encoding="utf-8"))
            write_json(out_dir / MANIFEST, {**record, PUBLISHING: stage})
            for item in sorted(staging.iterdir()):
                if item.name != MANIFEST:
                    os.replace(item, out_dir / item.name)
            os.replace(manifest, out_dir / MANIFEST)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(target: Path) -> Iterator[Path]:
    """Yield an empty folder beside `target`; when the block succeeds it becomes `target`
    (`publish_dir`), replacing the old folder as a whole. On failure the old folder stays;
    what killed writers left beside it is swept first."""
    target = Path(target)
    with storage_errors(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(target.parent)
        staging = _temp_entry(target.parent, target.name)
        staging.mkdir()
    try:
        with storage_errors(target):
            yield staging
            publish_dir(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def publish_dir(staging: Path, target: Path) -> None:
    """Move a finished folder onto `target`, replacing what was there.

    Where the kernel and file system can (Linux `renameat2(RENAME_EXCHANGE)`), the two folders
    swap names in one step and the old one, now under the staging name, is removed: `target`
    is never missing. Elsewhere the old folder is first renamed aside, so a crash between the
    two renames leaves it under a `.old-` name beside `target`, never half of one
    (`sweep_stale` puts it back).
    """
    staging, target = Path(staging), Path(target)
    with storage_errors(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir() and not target.is_symlink() and _exchange(staging, target):
            shutil.rmtree(staging, ignore_errors=True)
            return
        old = _temp_entry(target.parent, _OLD + target.name)
        if target.exists():
            target.rename(old)
        staging.rename(target)
        shutil.rmtree(old, ignore_errors=True)


#: `renameat2`'s flag that swaps two names atomically, and "relative to the working folder"
_RENAME_EXCHANGE, _AT_FDCWD = 2, -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names `a` and `b` in one step; False where this system cannot (no
    `renameat2`, or a file system without `RENAME_EXCHANGE`: the caller falls back)."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    done = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), os.fspath(b))


@functools.cache
def _libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # no C library to load (not Linux): publish_dir renames twice
        return None


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks so large files never sit in memory whole
    (provenance of what a stage read, download checks, converted-model sources)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
