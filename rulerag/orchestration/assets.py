"""DVC outputs and KG mirrors as Airflow Assets: which stage outputs are assets, what they are
called and where they live, and when a KG mirror changed. No Airflow import: the DAG files
(dags/rulerag_dag.py, dags/rulerag_kg_watch.py) make the Asset objects from these.

Only the outputs someone would schedule on or look for are assets (`ASSET_STAGES`), one each
per dataset, named after the dataset so that the Assets page's search (a name prefix) finds
them by it: `icews14/kg` (what `ingest` writes), `icews14/rule_bank`, `icews14/ruleqa` (the
benchmark), `icews14/report`; and each dataset's KG mirror, `icews14/kg_mirror` (what `ingest`
reads: RULERAG_DATA_DIR/<mirror folder>, or params.yaml's `ingest.custom.<name>.path`), whose
fingerprint tells whether it changed. An asset's URI is its folder's `file://` URI: the
folder that holds the stage's outputs when no other instance writes under it, else its first
output. Every stage instance's outputs as an asset (165 on five KGs) drew an unreadable fan
on the Assets page and made each of Airflow's DAG-page queries repeat the serialized DAG once
per outlet row.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rulerag.orchestration.dvc_graph import StageGraphError, StageInstance, _PathIndex, stage_edges
from rulerag.params import parse_params

__all__ = [
    "ASSET_GROUP",
    "ASSET_STAGES",
    "folder_fingerprint",
    "mirror_asset_name",
    "mirror_folder",
    "output_assets",
    "root_stages",
    "stage_assets",
]

#: the Assets page's group of every asset the DAGs declare
ASSET_GROUP = "rulerag"
#: dvc.yaml stage -> what its outputs are called as an asset, after the dataset
#: (`icews14/rule_bank`); a stage named here has one instance per dataset
ASSET_STAGES = {
    "ingest": "kg",
    "mine_rules": "rule_bank",
    "build_benchmark": "ruleqa",
    "report": "report",
}


def mirror_asset_name(dataset: str) -> str:
    """The asset name of a dataset's KG mirror (its URI is the folder's `file://` URI)."""
    return f"{dataset}/kg_mirror"


def stage_assets(
    project: Path,
    instances: Sequence[StageInstance],
    params: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
) -> tuple[dict[str, tuple[str, str]], dict[str, list[tuple[str, str]]]]:
    """Each instance's outlet as (asset name, URI), for the instances of `ASSET_STAGES` that
    belong to a dataset; each instance's inlets: its upstream instances' outlets, and for the
    stages that read the KG mirrors, its dataset's mirror where one is known. Airflow's
    Assets page draws the lineage from these."""
    paths = output_assets(instances)
    outlets = {
        inst.name: (
            f"{inst.dataset}/{ASSET_STAGES[inst.stage]}",
            (project / paths[inst.name]).as_uri(),
        )
        for inst in instances
        if inst.stage in ASSET_STAGES and inst.dataset is not None and inst.name in paths
    }
    named: dict[str, str] = {}
    for name, (asset, _uri) in outlets.items():
        if asset in named:
            raise StageGraphError(
                f"{named[asset]} and {name} would both be the asset {asset!r}: a stage of "
                "assets.ASSET_STAGES must have one instance per dataset"
            )
        named[asset] = name
    roots = set(root_stages(instances))
    inlets: dict[str, list[tuple[str, str]]] = {inst.name: [] for inst in instances}
    for up, down in stage_edges(instances):
        if up in outlets:
            inlets[down].append(outlets[up])
    for inst in instances:
        if inst.stage in roots and inst.dataset is not None:
            folder = mirror_folder(inst.dataset, params, env)
            if folder is not None:
                inlets[inst.name].append((mirror_asset_name(inst.dataset), folder.as_uri()))
    return outlets, inlets


def output_assets(instances: Sequence[StageInstance]) -> dict[str, str]:
    """Instance name -> the project-relative path standing for its outputs (the module's
    docstring says which); instances without outputs are left out."""
    owners = _PathIndex((out, inst.name) for inst in instances for out in inst.outs)
    found: dict[str, str] = {}
    for inst in instances:
        outs = [posixpath.normpath(out.rstrip("/")) for out in inst.outs]
        if not outs:
            continue
        folder = posixpath.commonpath(outs) if len(outs) > 1 else outs[0]
        alone = folder not in ("", ".") and all(
            owner == inst.name for _path, owner in owners.overlapping(folder)
        )
        found[inst.name] = folder if alone else outs[0]
    return found


def root_stages(instances: Sequence[StageInstance]) -> list[str]:
    """The dvc.yaml stages whose instances need no other stage's output (`ingest`): the ones
    that read the KG mirrors, in dvc.yaml's order."""
    downstream = {down for _up, down in stage_edges(instances)}
    stages = {inst.stage for inst in instances if inst.name not in downstream}
    stages -= {inst.stage for inst in instances if inst.name in downstream}
    return [s for s in dict.fromkeys(inst.stage for inst in instances) if s in stages]


def mirror_folder(
    dataset: str, params: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> Path | None:
    """The folder `ingest` reads `dataset` from: params.yaml's `ingest.custom.<name>.path`,
    else RULERAG_DATA_DIR/<the registry's mirror folder>; None without either."""
    from rulerag.kg.ingest import MIRROR_ENV  # the KG code, only when a mirror is looked up
    from rulerag.kg.registry import get_spec

    env = os.environ if env is None else env
    spec = get_spec(dataset, parse_params(params).ingest)
    if spec.local_path is not None:
        return spec.local_path.resolve()
    data_dir = env.get(MIRROR_ENV)
    if not data_dir:
        return None
    return (Path(data_dir).expanduser() / spec.mirror_dir).resolve()


def folder_fingerprint(folder: Path) -> tuple[str, int]:
    """(sha256 of every file's relative path, size and modification time, file count): it
    changes when a file is added, removed, rewritten or touched, without reading the files
    (a mirror holds hundreds of MB). Symbolic links are followed, as `ingest` reads them."""
    if not folder.is_dir():
        raise FileNotFoundError(f"KG mirror {folder} is not a folder")
    digest = hashlib.sha256()
    count = 0
    for root, dirs, files in os.walk(folder, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            stat = path.stat()
            rel = path.relative_to(folder).as_posix()
            digest.update(f"{rel}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
            count += 1
    return digest.hexdigest(), count
