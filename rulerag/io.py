"""Atomic, deterministic writers for stage outputs.

Every output goes to a temporary name in the same folder and is renamed into place, so a killed
stage never leaves a half-written file under the final name (docs/data-flow.md). A stage that
writes several files stages them together (`staged_outputs`, `staged_dir`) and moves them into
place only when all of them were written. Temporary names carry the writer's process id
(`.<label>-<pid>-<token>`), so the next writer into the same folder removes what a killed one
left behind (`sweep_stale`) and never touches what a live one is writing.

Parquet files carry the parameters that produced them in their key-value metadata and contain
no timestamps, so the same input and parameters give byte-identical files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rulerag.errors import OutputIntegrityError

logger = logging.getLogger(__name__)

#: Key under which rulerag stores provenance (stage, dataset, params) in Parquet metadata.
PARQUET_META_KEY = b"rulerag"

#: `.<label>-<pid>-<token>[.tmp]`: every temporary entry this module creates.
_TEMP_RE = re.compile(r"^\.(?P<label>.+)-(?P<pid>\d+)-(?P<token>[0-9a-f]{12})(?:\.tmp)?$")
#: the label of a folder moved aside by `publish_dir` (`.old-<target>-<pid>-<token>`)
_OLD = "old-"


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
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(path.parent)
    tmp = _temp_entry(path.parent, path.name, ".tmp")
    tmp.touch(exist_ok=False)
    try:
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
    with open(path, "rb") as handle:
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


def write_parquet(path: Path, frame: pd.DataFrame, provenance: Mapping[str, Any]) -> None:
    """Write `frame` atomically as Parquet, with `provenance` as JSON in the file metadata."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[PARQUET_META_KEY] = json.dumps(provenance, sort_keys=True, default=str).encode()
    table = table.replace_schema_metadata(meta)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_provenance(path: Path) -> dict[str, Any]:
    """Return the provenance a rulerag Parquet file was written with (empty if none)."""
    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(PARQUET_META_KEY)
    return json.loads(raw) if raw else {}


#: What a stage recorded about each file it wrote into a folder: bytes, sha256 (and the line
#: count of JSON-lines files), so that a reader notices a file cut short, even at a line boundary.
MANIFEST = "manifest.json"


def write_manifest(folder: Path, names: Iterable[str] | None = None) -> Path:
    """Record size, sha256 and (JSON lines) line count of `names` (default: every file of
    `folder` but the manifest and temporary entries) in `folder/manifest.json`."""
    folder = Path(folder)
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
    file that no stage wrote, e.g. a user's own) or it does not list the file."""
    path = Path(path)
    manifest = path.parent / MANIFEST
    if not manifest.is_file():
        return None
    try:
        files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
    except (ValueError, KeyError, TypeError) as err:
        raise OutputIntegrityError(f"{manifest}: unreadable ({err}); rerun its stage") from err
    return files.get(path.name)


def verify_output(path: Path) -> None:
    """Check a stage output against its manifest before a reader that cannot check as it
    reads (an indexer reading the file itself); no-op without a manifest entry."""
    path = Path(path)
    expected = manifest_entry(path)
    if expected is not None:
        _check_entry(path, expected, path.stat().st_size, sha256_file(path))


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
def staged_outputs(out_dir: Path, prefix: str = "stage") -> Iterator[Path]:
    """Yield an empty staging folder inside `out_dir`; write a stage's outputs there.

    When the block succeeds, every entry of the staging folder replaces its namesake in
    `out_dir` (one `os.replace` each, in name order); when it fails, nothing in `out_dir`
    changes. Either way the staging folder is removed. A `manifest.json` recording every staged
    file (`write_manifest`) goes with them, for readers to check (`iter_jsonl`). `prefix` names
    the folder (`.<prefix>-<pid>-...`), so a leftover of a killed process says which stage
    left it; what killed writers left in `out_dir` is swept first.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sweep_stale(out_dir)
    staging = _temp_entry(out_dir, prefix)
    staging.mkdir()
    try:
        yield staging
        write_manifest(staging)
        for item in sorted(staging.iterdir()):
            os.replace(item, out_dir / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(target: Path) -> Iterator[Path]:
    """Yield an empty folder beside `target`; when the block succeeds it becomes `target`
    (`publish_dir`), replacing the old folder as a whole. On failure the old folder stays;
    what killed writers left beside it is swept first."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(target.parent)
    staging = _temp_entry(target.parent, target.name)
    staging.mkdir()
    try:
        yield staging
        publish_dir(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def publish_dir(staging: Path, target: Path) -> None:
    """Move a finished folder onto `target`, replacing what was there.

    Rename is atomic for a single folder; the old one is first renamed aside, so at every
    moment `target` is either the old complete folder or the new one, and a crash in
    between leaves the old folder under a `.old-` name beside it, never half of one
    (`sweep_stale` puts it back).
    """
    staging, target = Path(staging), Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    old = _temp_entry(target.parent, _OLD + target.name)
    if target.exists():
        target.rename(old)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks so large files never sit in memory whole
    (provenance of what a stage read, download checks, converted-model sources)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
