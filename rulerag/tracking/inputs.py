"""The data files a stage read, as MLflow run inputs (the runs table's Dataset column).

A run input is an MLflow dataset: a name, a digest, a source and a profile. Here the name is the
split (`test`, `f_r`, ...), the digest the file's MD5 (what DVC records in dvc.lock for it, so a
run and the pipeline's lock name the same bytes), the source the file's path, the profile its
row count. Recorded as plain values when the stage logs them (the run is sent later, or
spooled), turned into MLflow's entities when the run is sent (`to_dataset_inputs`). Nothing here
imports mlflow at module level.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["dataset_input", "file_md5", "to_dataset_inputs"]

#: MLflow's tag on a run input saying what the run used it for
CONTEXT_TAG = "mlflow.data.context"
#: MLflow's source type of a file on this machine (`mlflow.data.filesystem_dataset_source`)
SOURCE_TYPE = "local"


def file_md5(path: Path) -> str:
    """The file's MD5, hex: DVC's `md5` of a file output."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _rows(path: Path) -> int | None:
    """A JSON-lines file's row count (non-empty lines); None for other formats."""
    if path.suffix.lower() not in {".jsonl", ".ndjson"}:
        return None
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())


def _shown_path(path: Path) -> str:
    """The path relative to the working directory (the project, for a stage), else absolute."""
    resolved = path.resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


def dataset_input(path: Path, context: str, name: str | None = None) -> dict[str, Any]:
    """A run input's values for the file at `path` (FileNotFoundError naming it if missing)."""
    if not path.is_file():
        raise FileNotFoundError(f"run input not found: {path}")
    if not context or not context.replace("_", "").isalnum():
        raise ValueError(f"run input context must be a word (train, test...): {context!r}")
    rows = _rows(path)
    return {
        "name": name or path.stem,
        "digest": file_md5(path),
        "source": _shown_path(path),
        "context": context,
        "profile": {"num_rows": rows} if rows is not None else {},
    }


def to_dataset_inputs(inputs: Sequence[Mapping[str, Any]]) -> list[Any]:
    """MLflow's `DatasetInput` entities for recorded inputs (for `MlflowClient.log_inputs`)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    return [
        DatasetInput(
            dataset=Dataset(
                name=str(item["name"]),
                digest=str(item["digest"]),
                source_type=SOURCE_TYPE,
                source=json.dumps({"uri": str(item["source"])}),
                profile=json.dumps(item.get("profile") or {}),
            ),
            tags=[InputTag(key=CONTEXT_TAG, value=str(item["context"]))],
        )
        for item in inputs
    ]
