"""Data-aware runs: a changed KG mirror runs its dataset's chain of the DAG `rulerag`.

Two small DAGs, both paused at creation like every new DAG (unpause both to use them):

- ``rulerag_kg_watch`` (schedule: RULERAG_KG_WATCH_SCHEDULE, a cron expression or preset,
  default ``@hourly``; ``none``: only when triggered) has a task
  per dataset whose mirror folder exists (RULERAG_DATA_DIR/<mirror folder>, or params.yaml's
  ``ingest.custom.<name>.path``). Each fingerprints its folder (every file's path, size and
  modification time; nothing is read) and compares it with the fingerprint in its asset's
  latest event: unchanged, the task skips and no event is emitted; changed, the task succeeds
  and emits an event of the asset ``<dataset>/kg_mirror`` carrying the new fingerprint. The
  first fingerprint of a mirror is emitted as a baseline, which runs nothing.
- ``rulerag_kg_changed`` is scheduled on those assets (any of them) and triggers ``rulerag``
  with ``{"datasets": [the changed ones], "force": [the stages that read the mirrors]}``:
  the mirror is no DVC dependency, so ``ingest`` is forced, and DVC reruns downstream only
  what its new outputs change.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Asset, AssetAny, task
from airflow.sdk.exceptions import AirflowSkipException

# rulerag is the project's (installed, or on PYTHONPATH where a copy is run)
from rulerag.orchestration.assets import ASSET_GROUP, folder_fingerprint, mirror_asset_name
from rulerag.orchestration.dag_layout import dag_layout
from rulerag.orchestration.run_plan import project_dir

#: the project: RULERAG_PROJECT_DIR (tests point it at a copy), else the parent of dags/
PROJECT_DIR = project_dir(default=Path(__file__).resolve().parent.parent)
SCHEDULE_ENV = "RULERAG_KG_WATCH_SCHEDULE"
#: the extra keys of a mirror's asset events
FINGERPRINT, BASELINE = "fingerprint", "baseline"


def _mirrors() -> dict[str, tuple[Path, Asset]]:
    """Dataset -> (mirror folder, its asset), for every known dataset whose mirror folder
    exists (the DAG processor parses this file again every few minutes: a mirror that
    appears gets its task then). The folders come from the DAG's layout (dag_layout.py),
    worked out again only when dvc.yaml, params.yaml or RULERAG_DATA_DIR change."""
    found = {}
    for name, where in LAYOUT.mirrors.items():
        folder = Path(where)
        if folder.is_dir():
            asset = Asset(name=mirror_asset_name(name), uri=folder.as_uri(), group=ASSET_GROUP)
            found[name] = (folder, asset)
    return found


def check_mirror(folder: Path, asset: Asset, inlet_events: Any, outlet_events: Any) -> str:
    """Skip when `folder`'s fingerprint equals the one in `asset`'s latest event; else put
    the new one on the event this task emits (a baseline when there was none)."""
    try:
        fingerprint, files = folder_fingerprint(folder)
    except FileNotFoundError as exc:
        raise AirflowSkipException(str(exc)) from exc
    latest = list(inlet_events[asset].ascending(False).limit(1))
    previous = (latest[0].extra or {}).get(FINGERPRINT) if latest else None
    if previous == fingerprint:
        raise AirflowSkipException(f"{folder}: unchanged ({files} files)")
    outlet_events[asset].extra = {
        FINGERPRINT: fingerprint,
        "files": files,
        BASELINE: previous is None,
        "folder": str(folder),
    }
    return fingerprint


def changed_datasets(triggering_asset_events: Any, by_asset_name: dict[str, str]) -> list[str]:
    """The datasets whose mirror events (no baseline) triggered this run; skip when none."""
    names = sorted(
        {
            by_asset_name[event.asset.name]
            for events in triggering_asset_events.values()
            for event in events
            if event.asset.name in by_asset_name and not (event.extra or {}).get(BASELINE)
        }
    )
    if not names:
        raise AirflowSkipException("only baseline fingerprints: nothing changed")
    return names


def watch_schedule(value: str | None) -> str | None:
    """RULERAG_KG_WATCH_SCHEDULE as a DAG schedule: unset or empty, hourly; `none`, no
    schedule (runs only when triggered); anything else as Airflow reads a schedule string."""
    value = (value or "").strip()
    if not value:
        return "@hourly"
    return None if value.lower() == "none" else value


LAYOUT = dag_layout(PROJECT_DIR)
MIRRORS = _mirrors()

with DAG(
    dag_id="rulerag_kg_watch",
    description="Fingerprint each KG mirror; an asset event when one changed",
    doc_md=__doc__,
    schedule=watch_schedule(os.environ.get(SCHEDULE_ENV)),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["rulerag", "assets"],
):
    for dataset, (folder, asset) in MIRRORS.items():

        @task(task_id=f"check_{dataset}", inlets=[asset], outlets=[asset], retries=0)
        def check(
            folder: Path = folder, asset: Asset = asset, inlet_events: Any = None,
            outlet_events: Any = None,
        ) -> str:  # fmt: skip
            return check_mirror(folder, asset, inlet_events, outlet_events)

        check()

if MIRRORS:
    with DAG(
        dag_id="rulerag_kg_changed",
        description="Run the chain of each dataset whose KG mirror changed",
        doc_md=__doc__,
        schedule=AssetAny(*(asset for _folder, asset in MIRRORS.values())),
        catchup=False,
        max_active_runs=1,
        tags=["rulerag", "assets"],
    ):
        by_name = {asset.name: name for name, (_folder, asset) in MIRRORS.items()}

        @task(task_id="changed_datasets", retries=0)
        def changed(triggering_asset_events: Any = None) -> list[str]:
            return changed_datasets(triggering_asset_events, by_name)

        TriggerDagRunOperator(
            task_id="run_chain",
            trigger_dag_id="rulerag",
            conf={"datasets": changed(), "force": list(LAYOUT.root_stages)},
        )
