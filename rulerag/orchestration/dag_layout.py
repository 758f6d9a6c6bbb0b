"""What the Airflow DAG `rulerag` is made of, worked out once per change of dvc.yaml or
params.yaml and kept in a file the DAG file reads back.

Airflow's DAG processor parses the DAG file every half minute, in a fresh process, and every
task process parses it again. Working the DAG out from dvc.yaml each time (both YAML files
read, params.yaml's sections validated to list the known datasets, the KG registry imported
for the mirrors' folders) cost about a second of imports and parsing per parse. `dag_layout`
does that work only when one of its inputs changed: dvc.yaml, params.yaml, the KG mirror
setting, or the code that turns them into the layout; otherwise it reads the layout it wrote
(`.dvc/tmp/airflow-dag-layout.json`, DVC's ignored scratch folder), in milliseconds.

The layout is plain data: one `TaskSpec` per stage instance of every known dataset (a run's
conf may select any of them), with its task group, its upstream instances, and the Airflow
assets it writes and reads (`assets.py` says which outputs are assets), plus the names the
trigger form offers. Building the operators from it is the DAG file's job.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "LAYOUT_FILE",
    "DagLayout",
    "TaskSpec",
    "build_layout",
    "dag_layout",
    "selected_instances",
    "unselected_task_ids",
]

#: where the layout is kept, relative to the project (DVC's git-ignored scratch folder)
LAYOUT_FILE = Path(".dvc") / "tmp" / "airflow-dag-layout.json"
#: the code whose behaviour the layout depends on, beside the two YAML files (package paths)
_CODE = (
    "rulerag/orchestration/dag_layout.py",
    "rulerag/orchestration/dvc_graph.py",
    "rulerag/orchestration/task_names.py",
    "rulerag/orchestration/assets.py",
    "rulerag/kg/registry.py",
    "rulerag/kg/settings.py",
)
_MIRROR_ENV = "RULERAG_DATA_DIR"  # rulerag.kg.ingest.MIRROR_ENV, without importing the KG code


@dataclass(frozen=True)
class Asset:
    """An Airflow asset by name and URI (the DAG file makes `airflow.sdk.Asset`s of these)."""

    name: str
    uri: str


@dataclass(frozen=True)
class TaskSpec:
    """One stage instance as an Airflow task: `group` is its TaskGroup path, `task_id` its id
    inside it (`icews14` > `generate` > `rulerag_ft`); `upstream` the instances it needs."""

    instance: str
    stage: str
    dataset: str | None
    group: tuple[str, ...]
    task_id: str
    cmd: str
    upstream: tuple[str, ...] = ()
    outlet: Asset | None = None
    inlets: tuple[Asset, ...] = ()

    @property
    def full_task_id(self) -> str:
        """The Airflow task id: group ids and the task id joined by dots."""
        return ".".join((*self.group, self.task_id))


@dataclass(frozen=True)
class DagLayout:
    """Every stage instance of every known dataset as a task, in dvc.yaml's dependency order;
    the known datasets and dvc.yaml's stage names (the trigger form's choices)."""

    tasks: tuple[TaskSpec, ...]
    datasets: tuple[str, ...]
    stages: tuple[str, ...]
    #: the stages that read the KG mirrors (no other stage's output: `ingest`)
    root_stages: tuple[str, ...] = ()
    #: dataset -> the folder of its KG mirror, for the datasets whose mirror is known
    mirrors: Mapping[str, str] = field(default_factory=dict)
    #: what the layout was built from (`_inputs_key`); a layout file with another key is stale
    key: str = field(default="", compare=False)

    def by_instance(self) -> dict[str, TaskSpec]:
        return {task.instance: task for task in self.tasks}

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str) -> DagLayout:
        raw = json.loads(text)

        def asset(value: Mapping[str, str] | None) -> Asset | None:
            return None if value is None else Asset(**value)

        tasks = tuple(
            TaskSpec(
                **{
                    **task,
                    "group": tuple(task["group"]),
                    "upstream": tuple(task["upstream"]),
                    "outlet": asset(task["outlet"]),
                    "inlets": tuple(Asset(**a) for a in task["inlets"]),
                }
            )
            for task in raw["tasks"]
        )
        return cls(
            tasks,
            tuple(raw["datasets"]),
            tuple(raw["stages"]),
            tuple(raw["root_stages"]),
            dict(raw["mirrors"]),
            raw["key"],
        )


def _inputs_key(project: Path, env: Mapping[str, str]) -> str:
    """A digest of everything the layout depends on: dvc.yaml, params.yaml, the mirror setting
    and the code that reads them (read as bytes: nothing is parsed)."""
    digest = hashlib.sha256()
    for rel in ("dvc.yaml", "params.yaml"):
        digest.update(rel.encode() + b"\0" + (project / rel).read_bytes() + b"\0")
    package = Path(__file__).resolve().parents[2]
    for rel in _CODE:
        digest.update(rel.encode() + b"\0" + (package / rel).read_bytes() + b"\0")
    digest.update(f"{_MIRROR_ENV}={env.get(_MIRROR_ENV, '')}".encode())
    return digest.hexdigest()


def dag_layout(project: Path, env: Mapping[str, str] | None = None) -> DagLayout:
    """The project's DAG layout: read back from `LAYOUT_FILE` when its inputs are unchanged,
    else built (`build_layout`) and written there for the next parse. A layout file that cannot
    be read or written is no error: the layout is then built each time."""
    env = os.environ if env is None else env
    key = _inputs_key(project, env)
    path = project / LAYOUT_FILE
    try:
        kept = DagLayout.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        kept = None
    if kept is not None and kept.key == key:
        return kept
    layout = build_layout(project, env, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(layout.to_json())
        os.replace(tmp, path)
    except OSError:
        pass
    return layout


def build_layout(project: Path, env: Mapping[str, str], key: str = "") -> DagLayout:
    """Work the layout out from the project's dvc.yaml and params.yaml (`dvc_graph`, every
    known dataset), its assets from `assets.py`, its task names from `task_names.py`."""
    from rulerag.orchestration.assets import mirror_folder, root_stages, stage_assets
    from rulerag.orchestration.dvc_graph import build_graph, load_yaml, stage_edges
    from rulerag.orchestration.task_names import task_placement
    from rulerag.params import parse_params, read_params_file

    params = read_params_file(project / "params.yaml")
    datasets = parse_params(params, str(project / "params.yaml")).known_datasets()
    instances = build_graph(project / "dvc.yaml", params, datasets)
    upstream: dict[str, list[str]] = {inst.name: [] for inst in instances}
    for up, down in stage_edges(instances):
        upstream[down].append(up)
    outlets, inlets = stage_assets(project, instances, params, env)
    placement = task_placement(instances)
    tasks = tuple(
        TaskSpec(
            instance=inst.name,
            stage=inst.stage,
            dataset=inst.dataset,
            group=placement[inst.name][0],
            task_id=placement[inst.name][1],
            cmd=inst.cmd if isinstance(inst.cmd, str) else " && ".join(inst.cmd),
            upstream=tuple(upstream[inst.name]),
            outlet=(Asset(*outlets[inst.name]) if inst.name in outlets else None),
            inlets=tuple(Asset(*a) for a in inlets[inst.name]),
        )
        for inst in instances
    )
    stages = tuple(str(s) for s in (load_yaml(project / "dvc.yaml").get("stages") or {}))
    folders = {name: mirror_folder(name, params, env) for name in datasets}
    mirrors = {name: str(folder) for name, folder in folders.items() if folder is not None}
    roots = tuple(root_stages(instances))
    return DagLayout(tasks, tuple(sorted(datasets)), stages, roots, mirrors, key)


def selected_instances(dvc_yaml: Path, params: Mapping[str, Any]) -> set[str]:
    """The stage instances DVC generates from `params` (params.yaml as it is now, after a run's
    conf): `ingest@nell995` only while nell995 is in `datasets`, a `generate` row only while
    `generation.configs` names it."""
    from rulerag.orchestration.dvc_graph import build_graph

    selected = [str(d) for d in params.get("datasets") or []]
    return {inst.name for inst in build_graph(dvc_yaml, params, selected)}


def unselected_task_ids(layout: DagLayout, selected: Collection[str]) -> list[str]:
    """The full task ids of the layout's stage tasks a run does not execute: those whose
    instance is not among the run plan's `selected` (`run_plan.plan_run`: what DVC generates
    from the run's params.yaml, of the stages it asks for)."""
    chosen = set(selected)
    return [spec.full_task_id for spec in layout.tasks if spec.instance not in chosen]
