"""`python -m rulerag.tracking replay|ui`: the two things done to a project's tracking by hand.

`replay` sends the runs spooled during a tracking outage; `ui` serves the project's store and
its artifacts (`make mlflow-ui`) from wherever the project is now.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rulerag.redact import redact_url
from rulerag.tracking.config import (
    UI_WORKERS,
    resolve_tracking_uri,
    server_command,
    server_env,
    spool_dir,
    ui_app_installed,
    ui_url,
)
from rulerag.tracking.spool import count_spooled, replay_spool

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m rulerag.tracking", description="MLflow helpers for rulerag."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    replay = sub.add_parser("replay", help="send runs spooled during a tracking outage")
    ui = sub.add_parser(
        "ui", help="browse the project's store and artifacts (mlflow server on mlflow.db)"
    )
    for command in (replay, ui):
        command.add_argument(
            "--project-dir", type=Path, default=Path.cwd(), help="project root (default: cwd)"
        )
    replay.add_argument(
        "--tracking-uri",
        default=None,
        help="the store (default: MLFLOW_TRACKING_URI, else <project>/mlflow.db)",
    )
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    ui.add_argument("--port", type=int, default=5000, help="port to listen on (5000)")
    ui.add_argument(
        "--workers", type=int, default=UI_WORKERS,
        help=f"server workers ({UI_WORKERS}: one person's browser; MLflow's own default is 4)",
    )  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit status is 1 when runs are left in the spool."""
    args = _parser().parse_args(argv)
    project_dir = args.project_dir.resolve()
    if args.command == "ui":
        command = server_command(project_dir, host=args.host, port=args.port, workers=args.workers)
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"MLflow UI: {ui_url(f'http://{host}:{args.port}')}")
        if not ui_app_installed():
            print(
                "note: the rulerag-ui app is not installed (`make setup` installs it), so a "
                "fresh browser opens experiments on the GenAI overview unless the URL above "
                "is used"
            )
        sys.stdout.flush()
        # the server takes over this process (and Ctrl-C)
        os.execve(command[0], command, server_env(os.environ))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    uri = resolve_tracking_uri(project_dir, args.tracking_uri)
    sent = replay_spool(project_dir, uri)
    left = count_spooled(project_dir)
    print(f"replayed {sent} run(s) to {redact_url(uri)}; {left} left in {spool_dir(project_dir)}")
    return 1 if left else 0
