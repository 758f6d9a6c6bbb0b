"""Airflow's names for dvc.yaml's stage instances: a task id, and the TaskGroups a task sits in.

`dvc_graph` says what the stage instances are (DVC's names: ``ingest@icews14``); this module
says what Airflow calls them. Airflow allows only letters, digits, ``_``, ``.`` and ``-`` in a
task or group id, so every other character becomes ``_``, and the ids that would then collide
are refused rather than merged.
"""

from __future__ import annotations

import re
from typing import Any

from rulerag.orchestration.dvc_graph import StageGraphError

__all__ = ["task_id_for", "task_placement", "task_word"]

_TASK_ID_BAD = re.compile(r"[^A-Za-z0-9_.-]")


def task_word(text: str) -> str:
    """`text` as a part of an Airflow task or group id: letters, digits, `_`, `.` and `-`
    stay, anything else becomes `_`."""
    return _TASK_ID_BAD.sub("_", text)


def task_id_for(name: str) -> str:
    """Airflow task id for a stage instance: ``ingest@icews14`` -> ``ingest__icews14``.

    Airflow allows only letters, digits, ``_``, ``.`` and ``-`` (max 250); anything else
    becomes ``_``. Callers must check the ids stay unique (`task_placement` does).
    """
    task_id = task_word(name.replace("@", "__"))
    if len(task_id) > 250:
        raise StageGraphError(f"stage name too long for an Airflow task id: '{name}'")
    return task_id


def task_placement(instances: Any) -> dict[str, tuple[tuple[str, ...], str]]:
    """Instance name -> (TaskGroup path, task id inside it), so Airflow's graph reads as
    datasets > stages > items instead of a flat list of every stage instance.

    A group per dataset; inside it, a group per stage that has several instances for that
    dataset (`generate`: one per grid row) whose tasks are named by the rest of the item
    (`icews14` > `generate` > `rulerag_ft`); a stage with one instance is the task `stage`
    (`icews14` > `ingest`). Instances without a dataset stay at the top (`task_id_for`).
    Raises StageGraphError when two instances would get one task id.
    """
    counts: dict[tuple[str, str | None], int] = {}
    for inst in instances:
        counts[(inst.stage, inst.dataset)] = counts.get((inst.stage, inst.dataset), 0) + 1
    placed: dict[str, tuple[tuple[str, ...], str]] = {}
    for inst in instances:
        if inst.dataset is None:
            placed[inst.name] = ((), task_id_for(inst.name))
            continue
        group = task_word(inst.dataset)
        if counts[(inst.stage, inst.dataset)] == 1:
            placed[inst.name] = ((group,), task_word(inst.stage))
            continue
        item = str(inst.item or inst.name)
        rest = item.removeprefix(f"{inst.dataset}-") if item != inst.dataset else item
        placed[inst.name] = ((group, task_word(inst.stage)), task_word(rest))
    full = [".".join((*path, leaf)) for path, leaf in placed.values()]
    if len(set(full)) != len(full):
        raise StageGraphError(f"stage instances collide as Airflow task ids: {sorted(full)}")
    return placed
