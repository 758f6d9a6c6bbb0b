"""Atomic, deterministic writers for stage outputs.

Every output goes to a temporary name in the same folder and is renamed into place, so a killed
stage never leaves a half-written file under the final name (docs/data-flow.md). A stage that
writes several files stages them together (`staged_outputs`, `staged_dir`) and moves them into
place only when all of them were written. Parquet files carry the parameters that produced
them in their key-value metadata and contain no timestamps, so the same input and parameters
give byte-identical files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

#: Key under which rulerag stores provenance (stage, dataset, params) in Parquet metadata.
PARQUET_META_KEY = b"rulerag"


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
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
    """Records of a JSON-lines file, blank lines skipped; a bad line names `file:line`."""
    path = Path(path)
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not JSON: {err}") from err


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


@contextlib.contextmanager
def staged_outputs(out_dir: Path, prefix: str = "stage") -> Iterator[Path]:
    """Yield an empty staging folder inside `out_dir`; write a stage's outputs there.

    When the block succeeds, every entry of the staging folder replaces its namesake in
    `out_dir` (one `os.replace` each, in name order); when it fails, nothing in `out_dir`
    changes. Either way the staging folder is removed. `prefix` names the folder
    (`.<prefix>-...`), so a leftover of a killed process says which stage left it.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{prefix}-", dir=out_dir))
    try:
        yield staging
        for item in sorted(staging.iterdir()):
            os.replace(item, out_dir / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(target: Path) -> Iterator[Path]:
    """Yield an empty folder beside `target`; when the block succeeds it becomes `target`
    (`publish_dir`), replacing the old folder as a whole. On failure the old folder stays."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield staging
        publish_dir(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def publish_dir(staging: Path, target: Path) -> None:
    """Move a finished folder onto `target`, replacing what was there.

    Rename is atomic for a single folder; the old one is first renamed aside, so at every
    moment `target` is either the old complete folder or the new one, and a crash in
    between leaves the old folder under a `.old-` name beside it, never half of one.
    """
    staging, target = Path(staging), Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    old = target.parent / f".old-{target.name}-{uuid.uuid4().hex[:8]}"
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
