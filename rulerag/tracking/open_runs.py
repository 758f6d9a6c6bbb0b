"""Runs whose process was killed outright still appear, as KILLED, when the next stage starts.

A stage's run is buffered in memory and sent when the stage ends (`rulerag.tracking.run`); a
SIGTERM is recorded, but a SIGKILL (the OOM killer, `kill -9`, a machine lost) ends the process
with nothing sent, and the stage left no run at all (issue 45: three `index`, one
`train_retriever` and one `ingest` run missing). So each open run leaves a marker in the spool
folder, `.open-<host>-<pid>-<id>.json`: the record as it was opened (names, tags, start time)
and the process's identity (host, pid, start time). Its run removes it when it is sent, spooled
or discarded. Every stage that starts first looks for markers of this host whose process is
gone (or whose pid now names another process) and sends each as a KILLED run, or spools it
when the store is down. Only markers of this host are judged: in a compose stack several
containers share the project, and a pid means nothing in another container.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil

from rulerag.deadline import deadline_seconds, within
from rulerag.redact import redact_secrets
from rulerag.tracking.config import spool_dir
from rulerag.tracking.names import TAG_ERROR, fs_safe
from rulerag.tracking.record import RunRecord, now_ms

logger = logging.getLogger(__name__)

__all__ = ["KILLED_MESSAGE", "close_marker", "open_marker", "sweep_killed"]

#: the error tag of a run found killed
KILLED_MESSAGE = (
    "the stage's process ended without recording its run (killed by SIGKILL or lost); "
    "found by the next stage that started"
)
_PREFIX = ".open-"


def _host() -> str:
    return fs_safe(socket.gethostname())[:64]


def _started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def open_marker(project_dir: Path, record: RunRecord) -> Path | None:
    """Leave the marker of an opened run (None when it cannot be written: the run itself is
    unaffected, it only loses this safety net)."""
    pid = os.getpid()
    marker = spool_dir(project_dir) / f"{_PREFIX}{_host()}-{pid}-{uuid.uuid4().hex[:12]}.json"
    payload = {
        "host": _host(),
        "pid": pid,
        "process_started": _started(pid),
        "record": asdict(record),
    }
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        tmp = marker.with_name(f".tmp{marker.name}")
        tmp.write_text(json.dumps(payload, default=str), encoding="utf-8")
        os.replace(tmp, marker)
    except OSError as err:
        logger.debug("no open-run marker %s: %s", marker, err)
        return None
    return marker


def close_marker(marker: Path | None) -> None:
    """The run was sent, spooled or discarded: its marker goes."""
    if marker is not None:
        with contextlib.suppress(OSError):
            marker.unlink()


def _gone(payload: dict) -> bool:
    """Whether the marker's process no longer runs on this host (its pid unused, or used by a
    process that started at another time)."""
    if payload.get("host") != _host():
        return False
    started = _started(int(payload["pid"]))
    return started is None or started != payload.get("process_started")


def _send_or_spool(
    record: RunRecord, project_dir: Path, tracking_uri: str, send: Any, spool: Any
) -> None:
    """The killed run to the store within the tracking deadline, else into the spool."""
    created: list[str] = []
    try:
        within(
            deadline_seconds("RULERAG_TRACKING_TIMEOUT", 300.0),
            lambda: send(record, None, tracking_uri, project_dir, created),
            f"sending killed run {record.run_name}",
        )
    except Exception as err:
        spool(record, None, project_dir, tracking_uri, err, list(created))


def sweep_killed(project_dir: Path, tracking_uri: str) -> int:
    """Send (else spool) a KILLED run for every marker of a process of this host that is gone;
    returns how many. Never raises: a stage must not fail for another's leftovers."""
    from rulerag.tracking.spool import spool_run
    from rulerag.tracking.store import send_run

    root = spool_dir(project_dir)
    if not root.is_dir():
        return 0
    found = 0
    for marker in sorted(root.glob(f"{_PREFIX}{_host()}-*.json")):
        claim = marker.with_name(f".claimed-{os.getpid()}{marker.name}")
        try:
            payload = json.loads(marker.read_text(encoding="utf-8"))
            if not _gone(payload):
                continue
            os.rename(marker, claim)  # one sweeper per marker
        except (OSError, ValueError, KeyError, TypeError) as err:
            logger.debug("open-run marker %s left: %s", marker, err)
            continue
        record = RunRecord.from_json(payload["record"])
        record.status, record.end_time = "KILLED", now_ms()
        record.tags[TAG_ERROR] = KILLED_MESSAGE
        _send_or_spool(record, project_dir, tracking_uri, send_run, spool_run)
        logger.warning(
            "%s of pid %s ended without recording its run: recorded it KILLED",
            redact_secrets(record.run_name),
            payload.get("pid"),
        )
        close_marker(claim)
        found += 1
    return found
