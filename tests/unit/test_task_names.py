"""Airflow's names for stage instances (rulerag/orchestration/task_names.py)."""

from __future__ import annotations

import pytest

from rulerag.orchestration.dvc_graph import StageGraphError, StageInstance
from rulerag.orchestration.task_names import task_id_for, task_placement


def test_task_ids_are_airflow_safe() -> None:
    assert task_id_for("ingest@icews14") == "ingest__icews14"
    assert task_id_for("m@x-cfg0-true") == "m__x-cfg0-true"
    assert task_id_for("m@a/b c") == "m__a_b_c"


def test_two_instances_that_would_share_a_task_id_are_refused() -> None:
    a = StageInstance(name="s@x-a_b", stage="s", item="x-a_b", dataset="x")
    b = StageInstance(name="s@x-a.b", stage="s", item="x-a.b", dataset="x")
    assert task_placement([a])["s@x-a_b"] == (("x",), "s")
    c = StageInstance(name="s@x-a?b", stage="s", item="x-a?b", dataset="x")
    with pytest.raises(StageGraphError, match="collide"):
        task_placement([a, b, c])
