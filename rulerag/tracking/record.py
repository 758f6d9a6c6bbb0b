"""The run record: everything one stage run logs except its artifact files.

It is what `StageRun` buffers, what the store receives in one burst, and, as `run.json`, what
the spool keeps when the store is down, so the three agree on one shape.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunRecord", "now_ms"]


def now_ms() -> int:
    """Milliseconds since the epoch: MLflow's time unit."""
    return int(time.time() * 1000)


@dataclass
class RunRecord:
    """Everything one stage run logs except the artifact files; `run.json` is this as JSON."""

    experiment: str
    run_name: str
    stage: str
    dataset: str
    start_time: int
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)  # key, value, step, timestamp
    status: str = "RUNNING"
    end_time: int | None = None
    #: MLflow models among the artifacts, logged as MLflow 3 logged models of the run and
    #: registered when the run is sent: artifact_path, name (registered model), description,
    #: champion_metric and higher_is_better (the registry alias rule, `rulerag.tracking.models`)
    models: list[dict[str, Any]] = field(default_factory=list)
    #: the datasets the run read (MLflow run inputs): name, digest, source, context, profile
    inputs: list[dict[str, Any]] = field(default_factory=list)
    #: the pipeline's params (all of params.yaml, flattened), for its parent run
    pipeline_params: dict[str, str] = field(default_factory=dict)
    #: the pipeline's headline metrics (the report's), for its parent run: key, value
    summary_metrics: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        """The record in a spooled `run.json` (keys it does not know are ignored)."""
        names = cls.__dataclass_fields__
        return cls(**{key: value for key, value in data.items() if key in names})

    def last_points(self) -> list[dict[str, Any]]:
        """Each metric's last logged point (highest step, then latest time), sorted by name."""
        last: dict[str, dict[str, Any]] = {}
        for metric in self.metrics:
            order = (int(metric["step"]), int(metric["timestamp"]))
            held = last.get(metric["key"])
            if held is None or order >= (int(held["step"]), int(held["timestamp"])):
                last[metric["key"]] = metric
        return [last[name] for name in sorted(last)]

    def last_metrics(self) -> dict[str, float]:
        """Each metric's value at its last step (the run's result, as MLflow's runs table
        shows it)."""
        return {m["key"]: float(m["value"]) for m in self.last_points()}
