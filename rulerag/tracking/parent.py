"""One parent run per pipeline run and dataset: the stage runs nest under it, and it carries the
pipeline's summary, so a pipeline run is one row to compare.

A pipeline run (`make run`, one `dvc repro`, one Airflow DAG run) is named by the tag
`rulerag.pipeline_run` (`rulerag.tracking.identity`). Its runs of one dataset live in that
dataset's experiment, and MLflow nests runs only inside one experiment, so each dataset's
experiment gets one parent run per pipeline run: named after when and how it started
(`parent_name`: `11-27 06:14:00 make`), tagged
`rulerag.run_kind = pipeline` (and not `rulerag.stage`), with params.yaml's params, the git
commit, the user and, under Airflow, a link to the DAG run. The report stage's headline
metrics and files (report/results.md, results.png) go to it (`StageRun.log_summary`).

No stage owns the parent, so every stage run creates it if missing when it is sent (each run is
sent at its stage's end, `rulerag.tracking.run`), and settles it afterwards:

* **Creation is idempotent by pipeline-run id.** Stages may run in parallel (Airflow, Celery
  workers on several machines), and a store has no "create if absent", so two may create a
  parent at once. The parent is the earliest one (start time, then run id); whoever settles
  after sees every parent created before it and re-points the stage runs of later ones to the
  earliest, and deletes the later ones. The last stage to finish therefore leaves one parent
  with every stage run under it.
* **Its status follows its stage runs**: FAILED when the latest run of some stage instance
  failed, KILLED when one was killed, FINISHED else; its end time the latest stage run's.

A stage run by hand (`standalone-<uuid>`, no pipeline) gets no parent. Pipeline-run ids with
characters outside `PIPELINE_ID_RE` (they go into a search filter) get none either.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rulerag.tracking.links import TAG_AIRFLOW_DAG_RUN_URL
from rulerag.tracking.names import (
    MAX_TAG_VALUE_LENGTH,
    METRICS_PER_BATCH,
    PARAMS_TAGS_PER_BATCH,
    TAG_DATASET,
    TAG_GIT_COMMIT,
    TAG_NOTE,
    TAG_PARENT_RUN,
    TAG_PIPELINE_RUN,
    TAG_RUN_KIND,
    TAG_SOURCE_NAME,
    TAG_SOURCE_TYPE,
    TAG_STAGE_INSTANCE,
    TAG_USER,
    truncate,
)
from rulerag.tracking.record import RunRecord, now_ms

logger = logging.getLogger(__name__)

__all__ = [
    "PIPELINE_ID_RE",
    "PIPELINE_KIND",
    "SUMMARY_ARTIFACT_PATH",
    "ensure_parent",
    "parent_name",
    "settle_parent",
    "wants_parent",
]

#: `rulerag.run_kind` of a parent run
PIPELINE_KIND = "pipeline"
#: pipeline-run ids that get a parent (Airflow's run ids, `make-...`, `dvc-<pid>-<start>`)
PIPELINE_ID_RE = re.compile(r"^[A-Za-z0-9_.:+~@-]{1,250}$")
#: where the report's files go in the parent run's artifacts
SUMMARY_ARTIFACT_PATH = "report"
#: the most runs of one pipeline run and dataset read back when settling
MAX_RUNS = 5000


def wants_parent(record: RunRecord) -> bool:
    """Whether this run belongs to a pipeline run that gets a parent (module doc)."""
    pipeline = record.tags.get(TAG_PIPELINE_RUN, "")
    return not pipeline.startswith("standalone-") and bool(PIPELINE_ID_RE.match(pipeline))


_MAKE_ID = re.compile(
    r"^(?P<kind>make)-\d{4}(?P<m>\d\d)(?P<d>\d\d)T(?P<H>\d\d)(?P<M>\d\d)(?P<S>\d\d)-"
)
_AIRFLOW_ID = re.compile(
    r"^(?P<kind>[a-z_]+?)__\d{4}-(?P<m>\d\d)-(?P<d>\d\d)T(?P<H>\d\d):(?P<M>\d\d):(?P<S>\d\d)"
)
_DVC_ID = re.compile(r"^dvc-\d+-(?P<epoch>\d+)$")


def parent_name(pipeline: str) -> str:
    """The parent's run name: when the pipeline run started (UTC), then its kind, as the runs
    table shows about 16 characters of it: `make-20261127T061400-ab12cd34` -> `11-27 06:14:00
    make`, Airflow's `manual__2026-11-27T06:14:00+00:00` -> `11-27 06:14:00 manual`,
    `dvc-<pid>-<start>` -> `<start> dvc`; any other id as it is. The id itself is the tag
    `rulerag.pipeline_run`."""
    match = _MAKE_ID.match(pipeline) or _AIRFLOW_ID.match(pipeline)
    if match:
        return "{m}-{d} {H}:{M}:{S} {kind}".format(**match.groupdict())
    match = _DVC_ID.match(pipeline)
    if match:
        started = datetime.fromtimestamp(int(match["epoch"]), UTC)
        return f"{started:%m-%d %H:%M:%S} dvc"
    return truncate(pipeline, 250)


def _filter(pipeline: str, *, parents: bool) -> str:
    text = f"tags.`{TAG_PIPELINE_RUN}` = '{pipeline}'"
    return f"{text} and tags.`{TAG_RUN_KIND}` = '{PIPELINE_KIND}'" if parents else text


def _parents(client: Any, experiment_id: str, pipeline: str) -> list[Any]:
    """The active parents of `pipeline` in the experiment, the chosen one (earliest) first."""
    runs = client.search_runs(
        [experiment_id], filter_string=_filter(pipeline, parents=True), max_results=MAX_RUNS
    )
    return sorted(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))


def _parent_tags(record: RunRecord) -> dict[str, str]:
    pipeline = record.tags[TAG_PIPELINE_RUN]
    tags = {
        TAG_PIPELINE_RUN: pipeline,
        TAG_DATASET: record.dataset,
        TAG_RUN_KIND: PIPELINE_KIND,
        TAG_SOURCE_NAME: "dvc repro",
        TAG_SOURCE_TYPE: record.tags.get(TAG_SOURCE_TYPE, "LOCAL"),
    }
    for key in (TAG_GIT_COMMIT, TAG_USER, TAG_AIRFLOW_DAG_RUN_URL):
        if key in record.tags:
            tags[key] = record.tags[key]
    note = [f"Pipeline run `{pipeline}` on {record.dataset}: its stage runs are nested below."]
    if TAG_AIRFLOW_DAG_RUN_URL in record.tags:
        note.append(f"Airflow DAG run: [{pipeline}]({record.tags[TAG_AIRFLOW_DAG_RUN_URL]})")
    tags[TAG_NOTE] = "\n\n".join(note)
    return {key: truncate(value, MAX_TAG_VALUE_LENGTH) for key, value in tags.items()}


def _log_params(client: Any, run_id: str, params: Mapping[str, str]) -> None:
    from mlflow.entities import Param

    items = [Param(key, value) for key, value in params.items()]
    for start in range(0, len(items), PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, params=items[start : start + PARAMS_TAGS_PER_BATCH])


def ensure_parent(client: Any, experiment_id: str, record: RunRecord) -> str | None:
    """The run id of the pipeline run's parent in the experiment, created when there is none
    (with the record's pipeline params); None when the run gets no parent (`wants_parent`)."""
    if not wants_parent(record):
        return None
    pipeline = record.tags[TAG_PIPELINE_RUN]
    found = _parents(client, experiment_id, pipeline)
    if found:
        parent = found[0]
        if record.pipeline_params and not parent.data.params:  # created by a run without them
            _log_params(client, parent.info.run_id, record.pipeline_params)
        return str(parent.info.run_id)
    created = client.create_run(
        experiment_id,
        start_time=record.start_time,
        tags=_parent_tags(record),
        run_name=parent_name(pipeline),
    )
    run_id = created.info.run_id
    if record.pipeline_params:
        _log_params(client, run_id, record.pipeline_params)
    logger.info("MLflow parent run %s of pipeline run %s", run_id, pipeline)
    return str(run_id)


def _status(children: list[Any]) -> tuple[str, int | None]:
    """The parent's status and end time from its stage runs (module doc)."""
    latest: dict[str, Any] = {}
    for run in sorted(children, key=lambda r: (r.info.start_time or 0, r.info.run_id)):
        latest[run.data.tags.get(TAG_STAGE_INSTANCE, run.info.run_id)] = run
    statuses = {run.info.status for run in latest.values()}
    status = next((s for s in ("FAILED", "KILLED") if s in statuses), "FINISHED")
    ends = [run.info.end_time for run in children if run.info.end_time]
    return status, max(ends) if ends else None


def settle_parent(
    client: Any,
    experiment_id: str,
    record: RunRecord,
    summary: Path | None,
    upload: Callable[[Any, Path, str], None],
) -> str | None:
    """After a stage run was sent: one parent left (the earliest, later ones' stage runs moved
    to it), the record's summary metrics and files (`summary` folder) on it, its status and
    end time from its stage runs. Returns the parent's run id (None: no parent)."""
    from mlflow.entities import Metric

    if not wants_parent(record):
        return None
    pipeline = record.tags[TAG_PIPELINE_RUN]
    parents = _parents(client, experiment_id, pipeline)
    if not parents:  # deleted meanwhile by hand: the next stage creates a new one
        return None
    chosen, later = parents[0], parents[1:]
    chosen_id = chosen.info.run_id
    runs = client.search_runs(
        [experiment_id], filter_string=_filter(pipeline, parents=False), max_results=MAX_RUNS
    )
    children = [r for r in runs if r.data.tags.get(TAG_RUN_KIND) != PIPELINE_KIND]
    for child in children:
        if child.data.tags.get(TAG_PARENT_RUN) != chosen_id:
            client.set_tag(child.info.run_id, TAG_PARENT_RUN, chosen_id)
    for extra in later:
        client.delete_run(extra.info.run_id)
    if record.summary_metrics:
        stamp = now_ms()
        points = [Metric(m["key"], float(m["value"]), stamp, 0) for m in record.summary_metrics]
        for start in range(0, len(points), METRICS_PER_BATCH):
            client.log_batch(chosen_id, metrics=points[start : start + METRICS_PER_BATCH])
    if summary is not None and summary.is_dir() and any(summary.iterdir()):
        upload(chosen, summary, SUMMARY_ARTIFACT_PATH)
    status, end_time = _status(children)
    client.set_terminated(chosen_id, status=status, end_time=end_time or now_ms())
    return str(chosen_id)
