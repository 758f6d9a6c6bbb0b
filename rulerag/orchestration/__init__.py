"""Orchestration helpers: the stage graph read from dvc.yaml and the validated run conf.

Airflow builds its DAG from these (dags/rulerag_dag.py) so that dvc.yaml stays the one place
where stages are declared; the code here is pure (no Airflow import) so it is unit-testable.
"""

from rulerag.orchestration.dvc_graph import (
    CycleError,
    InterpolationError,
    StageGraphError,
    StageInstance,
    build_graph,
    cmd_param_keys,
    stage_edges,
    topological_order,
)
from rulerag.orchestration.run_conf import RunConf, apply_run_conf, validate_run_conf
from rulerag.orchestration.task_names import task_id_for

__all__ = [
    "CycleError",
    "InterpolationError",
    "RunConf",
    "StageGraphError",
    "StageInstance",
    "apply_run_conf",
    "build_graph",
    "cmd_param_keys",
    "stage_edges",
    "task_id_for",
    "topological_order",
    "validate_run_conf",
]
