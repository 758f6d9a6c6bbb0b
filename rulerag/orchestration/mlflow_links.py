"""Addresses in the MLflow UI for what an Airflow task ran: the extra link "MLflow run" of each
stage task (dags/rulerag_dag.py) opens the runs its stage logged.

A stage's runs are found by two tags the tracking package sets (rulerag/tracking/names.py):
`rulerag.pipeline_run` (the DAG run id) and `rulerag.stage_instance` (`ingest@nell995`). The
UI's routes are MLflow 3's (hash routing): `#/experiments/<id>/runs/<run id>` for one run,
`#/experiments/<id>/runs?searchFilter=<filter>` for the runs a search filter finds, as the UI
itself writes such links. Pure functions: no MLflow import, nothing is contacted here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import quote, urlsplit

__all__ = [
    "DEFAULT_MLFLOW_UI",
    "MLFLOW_UI_ENV",
    "experiment_runs_url",
    "mlflow_ui_base",
    "run_url",
    "tags_filter",
]

#: where the MLflow UI is served for the people who open the links (`make mlflow-ui`'s default)
MLFLOW_UI_ENV = "RULERAG_MLFLOW_UI_URL"
DEFAULT_MLFLOW_UI = "http://127.0.0.1:5000"


def mlflow_ui_base(env: Mapping[str, str] | None = None) -> str:
    """The MLflow UI's base URL from RULERAG_MLFLOW_UI_URL (unset or empty: the default),
    without a trailing slash; anything but an http(s) URL with a host is refused by name."""
    env = os.environ if env is None else env
    raw = (env.get(MLFLOW_UI_ENV) or DEFAULT_MLFLOW_UI).strip()
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(
            f"{MLFLOW_UI_ENV} must be an http(s) URL such as {DEFAULT_MLFLOW_UI}, not {raw!r}"
        )
    return raw.rstrip("/")


def _literal(value: str) -> str:
    """A string literal of MLflow's search syntax: single quotes, or double quotes for a
    value holding a single quote; the syntax has no escape for a value holding both."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise ValueError(f"a search value cannot hold both quote characters: {value!r}")


def tags_filter(tags: Mapping[str, str]) -> str:
    """An MLflow search filter for runs carrying every one of `tags` (key -> exact value),
    keys in backticks since ours hold dots: tags.`rulerag.stage_instance` = 'ingest@nell995'."""
    if not tags:
        raise ValueError("a runs filter needs at least one tag")
    for key in tags:
        if not key or "`" in key:
            raise ValueError(f"not a tag key MLflow's search accepts: {key!r}")
    return " and ".join(f"tags.`{key}` = {_literal(str(value))}" for key, value in tags.items())


def experiment_runs_url(base: str, experiment_id: str, search_filter: str) -> str:
    """The runs view of an experiment with `search_filter` in its search box."""
    return (
        f"{base}/#/experiments/{quote(str(experiment_id), safe='')}/runs"
        f"?searchFilter={quote(search_filter, safe='')}"
    )


def run_url(base: str, experiment_id: str, run_id: str) -> str:
    """The page of one run."""
    return (
        f"{base}/#/experiments/{quote(str(experiment_id), safe='')}"
        f"/runs/{quote(str(run_id), safe='')}"
    )
