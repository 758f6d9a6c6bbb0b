"""The spool: runs the store could not take wait in `<project>/.mlflow-spool/` until a replay.

A tracking outage never costs a stage its results: the run (its `run.json` and its artifact
files) goes to a folder of its own, one warning is logged, and the stage finishes normally;
`python -m rulerag.tracking replay` sends the waiting runs later. Folders appear under their
final name only once complete, and a replay claims a folder by renaming it, so stages, and
replays running side by side never see half a run or send one twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rulerag.io import pid_alive
from rulerag.redact import redact_secrets, redact_url
from rulerag.tracking.config import resolve_tracking_uri, spool_dir
from rulerag.tracking.names import TAG_REPLAYED_FROM, fs_safe
from rulerag.tracking.record import RunRecord
from rulerag.tracking.store import (
    discard_partial,
    discard_partial_copies,
    first_line,
    send_run,
)

logger = logging.getLogger(__name__)

__all__ = [
    "RUN_JSON",
    "SPOOL_FORMAT",
    "count_spooled",
    "new_staging_dir",
    "replay_spool",
    "spool_run",
]

RUN_JSON = "run.json"
SPOOL_FORMAT = 1


def new_staging_dir(project_dir: Path) -> Path:
    """A fresh folder in the spool where a running stage collects its artifacts (hidden, and
    named after this process, so a replay leaves it alone and cleans it up once we are gone)."""
    root = spool_dir(project_dir)
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f".staging-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    staging.mkdir()
    return staging


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n", "utf-8")
    os.replace(tmp, path)


def spool_run(
    record: RunRecord,
    staging: Path | None,
    project_dir: Path,
    tracking_uri: str,
    error: BaseException,
    partial_run_ids: Sequence[str],
) -> Path | None:
    """Keep a run the store refused: `record` as `run.json` beside the artifacts in `staging`
    (created when the run had none), the folder renamed into the spool. Returns that folder,
    or None when even the spool failed (logged as an error: the run's log is lost, the
    stage's outputs are not). Logs the one warning a stage gets about an outage."""
    root = spool_dir(project_dir)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    name = f"{stamp}-{fs_safe(record.stage)}-{fs_safe(record.dataset)}-{uuid.uuid4().hex[:8]}"
    target = root / name
    try:
        staging = staging or new_staging_dir(project_dir)
        payload = {
            "format": SPOOL_FORMAT,
            **asdict(record),
            "spooled_at": datetime.now(UTC).isoformat(),
            "tracking_uri": redact_url(tracking_uri),
            "error": redact_secrets(f"{type(error).__name__}: {error}"),
            "partial_run_ids": list(partial_run_ids),
        }
        _write_json_atomic(staging / RUN_JSON, payload)
        # The folder appears under its final name only once complete, so a replay running
        # at the same time never sees half a run.
        os.replace(staging, target)
    except Exception as spool_error:
        logger.error(
            "MLflow run %s could not be logged (%s) nor spooled to %s (%s); its params and "
            "metrics are lost (the stage's outputs are not affected)",
            record.run_name,
            first_line(error),
            target,
            first_line(spool_error),
        )
        return None
    logger.warning(
        "MLflow tracking store %s failed (%s: %s); run %s kept in %s. The stage's outputs "
        "are not affected. Send it later with `python -m rulerag.tracking replay`.",
        redact_url(tracking_uri),
        type(error).__name__,
        first_line(error),
        record.run_name,
        target,
    )
    return target


def count_spooled(project_dir: Path) -> int:
    """How many complete runs wait in the project's spool."""
    root = spool_dir(project_dir)
    if not root.is_dir():
        return 0
    return sum(1 for p in root.iterdir() if not p.name.startswith(".") and (p / RUN_JSON).is_file())


def _reclaim_orphans(root: Path) -> None:
    """Undo what a killed process left: claims of dead replays go back into the queue, staging
    folders of dead stages (never complete runs) are removed."""
    for path in root.iterdir():
        match = re.match(r"\.(replaying|staging)-(\d+)-(.+)$", path.name)
        if not match or pid_alive(int(match.group(2))):
            continue
        kind, rest = match.group(1), match.group(3)
        with contextlib.suppress(OSError):
            if kind == "replaying":
                os.replace(path, root / rest)
            else:
                shutil.rmtree(path)


def replay_spool(project_dir: Path, tracking_uri: str | None = None) -> int:
    """Log the runs waiting in `<project_dir>/.mlflow-spool` to MLflow; return how many went.

    The store is `tracking_uri`, else `MLFLOW_TRACKING_URI`, else the project's SQLite file.
    Each spool folder is deleted once its run is fully logged; one that fails stays for the next
    replay (a warning says why). Runs keep their original start/end times and metric
    timestamps, and get a `rulerag.replayed_from` tag. The half-logged copies a failed flush
    could not delete go first, wherever this store holds them (whatever URI the stage used
    for it: `store.discard_partial_copies`). Safe to run concurrently: a folder is claimed by
    renaming it before it is sent.
    """
    root = spool_dir(project_dir)
    if not root.is_dir():
        return 0
    uri = resolve_tracking_uri(project_dir, tracking_uri)
    _reclaim_orphans(root)
    replayed = 0
    for folder in sorted(root.iterdir()):
        if folder.name.startswith(".") or not (folder / RUN_JSON).is_file():
            continue
        claim = root / f".replaying-{os.getpid()}-{folder.name}"
        try:
            os.rename(folder, claim)
        except OSError:  # another replay took it first
            continue
        created: list[str] = []
        try:
            data = json.loads((claim / RUN_JSON).read_text(encoding="utf-8"))
            if data.get("format") != SPOOL_FORMAT:
                raise ValueError(f"unknown spool format {data.get('format')!r}")
            record = RunRecord.from_json(data)
            record.tags[TAG_REPLAYED_FROM] = folder.name
            discard_partial_copies(data.get("partial_run_ids") or [], record, uri)
            send_run(record, claim, uri, Path(project_dir), created)
        except Exception as exc:
            discard_partial(created, uri)
            with contextlib.suppress(OSError):
                os.rename(claim, folder)
            logger.warning(
                "could not replay spooled run %s to %s (%s: %s); it stays in the spool",
                folder.name,
                redact_url(uri),
                type(exc).__name__,
                first_line(exc),
            )
            continue
        shutil.rmtree(claim, ignore_errors=True)
        replayed += 1
    return replayed
