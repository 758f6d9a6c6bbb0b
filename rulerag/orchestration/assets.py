"""DVC outputs and KG mirrors as Airflow Assets: what each stage instance's outputs are called
and where they live, and when a KG mirror changed. No Airflow import: the DAG files
(dags/rulerag_dag.py, dags/rulerag_kg_watch.py) make the Asset objects from these.

An instance's outputs are one asset, the folder that holds them when no other instance writes
under it (`ingest@nell995` -> `data/nell995/kg`, `mine_rules@nell995` -> `data/nell995/rules`),
else its first output (`index@nell995-bm25` -> `data/nell995/retrieval/index/bm25`,
`train_generator@nell995-rgft` -> `data/nell995/generation/adapters/rgft`), so the Assets page
lists the KG, the rule bank, the benchmark, each index, model and adapter by a readable path.
A KG mirror (what `ingest` reads: RULERAG_DATA_DIR/<mirror folder>, or params.yaml's
`ingest.custom.<name>.path`) is an asset too, and its fingerprint tells whether it changed.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rulerag.kg.ingest import MIRROR_ENV
from rulerag.kg.registry import get_spec
from rulerag.orchestration.dvc_graph import StageInstance, _PathIndex, stage_edges
from rulerag.params import parse_params

__all__ = [
    "ASSET_GROUP",
    "folder_fingerprint",
    "mirror_asset_name",
    "mirror_folder",
    "output_assets",
    "root_stages",
]

#: the Assets page's group of every asset the DAGs declare
ASSET_GROUP = "rulerag"


def mirror_asset_name(dataset: str) -> str:
    """The asset name of a dataset's KG mirror (its URI is the folder's `file://` URI)."""
    return f"kg_mirror/{dataset}"


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
