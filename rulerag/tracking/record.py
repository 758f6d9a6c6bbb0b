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
    #: MLflow models among the artifacts, registered when the run is sent: artifact_path,
    #: name (registered model), description
    models: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        """The record in a spooled `run.json` (keys it does not know are ignored)."""
        names = cls.__dataclass_fields__
        return cls(**{key: value for key, value in data.items() if key in names})

    def last_metrics(self) -> dict[str, float]:
        """Each metric's value at its last step (the run's result, as MLflow's runs table
        shows it)."""
        last: dict[str, tuple[int, int, float]] = {}
        for metric in self.metrics:
            key = (int(metric["step"]), int(metric["timestamp"]), float(metric["value"]))
            if metric["key"] not in last or key[:2] >= last[metric["key"]][:2]:
                last[metric["key"]] = key
        return {name: value for name, (_step, _time, value) in sorted(last.items())}
