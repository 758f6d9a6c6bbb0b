"""Ingestion: find a dataset (local mirror or download), read it, repair what is documented as
repairable, describe it, and write the canonical files.

Everything is read and checked before anything is written, and the files are moved into place
together at the end, so bad input leaves the previous outputs (or none) untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import pandas as pd

from rulerag import __version__
from rulerag.io import staged_outputs, write_json, write_parquet
from rulerag.kg.download import DownloadError, RemoteFile, fetch
from rulerag.kg.errors import DatasetNotFoundError, KGFormatError
from rulerag.kg.registry import DatasetSpec, Source
from rulerag.kg.schema import SPLITS, KnowledgeGraph, format_time
from rulerag.kg.settings import DuplicatePolicy, IngestSettings

DUPLICATE_POLICIES: tuple[str, ...] = get_args(DuplicatePolicy)
MIRROR_ENV = "RULERAG_DATA_DIR"
Fetcher = Callable[[Sequence[RemoteFile], Path], object]


def locate(
    spec: DatasetSpec,
    data_dir: Path | None,
    download_dir: Path,
    source: str | None = None,
    fetcher: Fetcher = fetch,
) -> tuple[Source, Path, str]:
    """Find a usable source: the local mirror first, then a download; else say where we looked.

    Returns the source, the dataset folder to read from and a description of the origin.
    """
    candidates = [s for s in spec.sources if source is None or s.name == source]
    if not candidates:
        names = ", ".join(s.name for s in spec.sources)
        raise ValueError(f"dataset {spec.name!r} has no source {source!r} (sources: {names})")
    looked: list[str] = []
    if spec.local_path is not None:
        if spec.local_path.is_dir():
            return candidates[0], spec.local_path, f"local folder {spec.local_path}"
        if spec.local_path.exists():
            what = "a file" if spec.local_path.is_file() else "not a folder"
            raise KGFormatError(
                spec.local_path,
                f"is {what}: ingest.custom.{spec.name}.path must name the folder that holds "
                "the KG's train/valid/test files",
            )
        raise DatasetNotFoundError(
            f"dataset {spec.name!r}: folder {spec.local_path} (params.yaml ingest.custom) "
            "does not exist"
        )
    if data_dir is not None:
        root = data_dir / spec.mirror_dir
        for src in candidates:
            missing = [p for p in src.required if not (root / p).exists()]
            if not missing:
                return src, root, f"local mirror {root}"
            looked.append(f"local mirror {root} ({MIRROR_ENV}): {src.name} lacks {missing[0]}")
    else:
        looked.append(f"local mirror: {MIRROR_ENV} is not set")
    cache = download_dir / spec.mirror_dir
    for src in candidates:
        if not src.remote:
            looked.append(f"download: source {src.name} has no public download")
            continue
        try:
            fetcher(src.remote, cache)
        except (DownloadError, OSError) as err:
            looked.append(f"download of {src.name} into {cache}: {err}")
            continue
        return src, cache, f"download ({src.remote[0].url} ...)"
    raise DatasetNotFoundError(
        f"dataset {spec.name!r} was not found. Looked in:\n  - " + "\n  - ".join(looked)
    )


def repair(kg: KnowledgeGraph, duplicates: str = IngestSettings.duplicates) -> dict[str, int]:
    """Apply the duplicate-fact policy in place and drop the reader's `line` column.

    Returns the number of facts dropped per split. Exact duplicates (same head, relation, tail
    and time within one split) carry no information and skew rule statistics, hence the default.
    """
    if duplicates not in DUPLICATE_POLICIES:
        raise ValueError(f"ingest.duplicates must be one of {DUPLICATE_POLICIES}: {duplicates!r}")
    facts = kg.facts
    key = ["split", "head", "relation", "tail", "time"]
    dup = facts.duplicated(subset=key, keep="first")
    dropped = {s: 0 for s in kg.lines_read}
    if dup.any() and duplicates == "error":
        first_line = facts.groupby(key, dropna=False, sort=False)["line"].transform("first")
        at = dup.idxmax()  # the first duplicate in file order
        raise KGFormatError(
            kg.split_files[facts.at[at, "split"]],
            f"duplicate fact (same as line {first_line[at]}); "
            "set ingest.duplicates to drop or keep",
            int(facts.at[at, "line"]),
        )
    if duplicates == "drop":
        counts = facts.loc[dup, "split"].value_counts()
        dropped.update({str(s): int(n) for s, n in counts.items()})
        facts = facts[~dup]
    kg.facts = facts.drop(columns="line").reset_index(drop=True)
    return dropped


def derive_train(kg: KnowledgeGraph, share: float | None) -> dict[str, Any] | None:
    """A temporal KG published without its train split (WIKI here): the earliest whole time
    steps of valid that hold at least `share` of its facts become train, the later ones stay
    valid, test is untouched; so mining and the corpus see the past, the fine-tuning sets the
    years after it, and the test queries the years after those, in the paper's order. Returns
    what was done (for stats.json), or None when there is a train split, `share` is None or
    the KG is static. Changes `kg.facts` in place."""
    facts = kg.facts
    if share is None or not kg.temporal or (facts["split"] == "train").any():
        return None
    valid = facts["split"] == "valid"
    if not valid.any():
        raise KGFormatError(
            next(iter(kg.split_files.values()), Path(".")),
            "no train and no valid split: nothing to derive a train split from",
        )
    counts = facts.loc[valid, "time"].value_counts().sort_index()
    steps = counts.index.to_numpy()
    if len(steps) < 2:
        raise KGFormatError(
            kg.split_files.get("valid", Path(".")),
            "valid has a single time step: it cannot be split into train and valid",
        )
    reached = (counts.cumsum() / counts.sum()).to_numpy() >= share
    last = min(int(reached.argmax()), len(steps) - 2)  # keep at least one step for valid
    cut = steps[last]
    moved = valid & (facts["time"] <= cut)
    facts.loc[moved, "split"] = "train"
    derived = {
        "share": share,
        "train": _span(facts.loc[moved, "time"], kg.time_unit, "valid"),
        "valid": _span(facts.loc[valid & ~moved, "time"], kg.time_unit, "valid"),
        "facts_moved": int(moved.sum()),
    }
    kg.notes.append(
        f"no train split in the source: train = {derived['train']}, valid = {derived['valid']} "
        f"(ingest.train_from_valid: {share}); test as published"
    )
    return derived


def _span(times: pd.Series, unit: Any, split: str) -> str:
    first, last = (format_time(int(t), unit) for t in (times.min(), times.max()))
    return f"{split} {first} to {last} ({len(times):,} facts)"


def describe(
    kg: KnowledgeGraph, spec: DatasetSpec, source: Source, dropped: Mapping[str, int]
) -> dict[str, Any]:
    """The stats.json content: sizes per split, vocabulary, time range, repairs, notes.

    Input checksums go into the Parquet provenance instead, keeping `dvc metrics show` legible.
    """
    facts = kg.facts
    counts = facts["split"].value_counts()
    splits = {s: int(counts.get(s, 0)) for s in SPLITS if s in kg.lines_read or s in counts}
    used = pd.unique(pd.concat([facts["head"], facts["tail"]]))
    names = kg.entities["name"]
    shared_names = int(names[names.duplicated(keep=False)].nunique())
    triple = ["head", "relation", "tail", "time"]
    in_several = int(facts.drop_duplicates(triple + ["split"]).duplicated(triple).sum())
    stats: dict[str, Any] = {
        "dataset": spec.name,
        "source": source.name,
        "kind": "temporal" if kg.temporal else "static",
        "facts": int(len(facts)),
        "splits": splits,
        "lines_read": dict(kg.lines_read),
        "duplicates_dropped": dict(dropped),
        "entities": int(len(kg.entities)),
        "relations": int(len(kg.relations)),
        "entities_in_facts": int(len(used)),
        "relations_in_facts": int(facts["relation"].nunique()),
        "entity_names_shared": shared_names,
        "facts_in_several_splits": in_several,
        "time_unit": kg.time_unit,
        "time_granularity": kg.time_granularity,
        "time_range": None,
        "timestamps": 0,
        "notes": list(kg.notes),
    }
    if kg.temporal and len(facts):
        times = facts["time"].dropna()
        stats["time_range"] = {
            "first": format_time(int(times.min()), kg.time_unit),
            "last": format_time(int(times.max()), kg.time_unit),
        }
        stats["timestamps"] = int(times.nunique())
    return stats


@dataclass(frozen=True)
class Ingested:
    """One dataset read, repaired and described: what `write_outputs` writes."""

    kg: KnowledgeGraph
    stats: dict[str, Any]
    #: what the source, settings and input files were (each Parquet file's metadata)
    provenance: dict[str, Any]


def write_outputs(ingested: Ingested, out_dir: Path) -> None:
    """Write facts/entities/relations Parquet and stats.json, all moved into place at the end
    (`staged_outputs` creates `out_dir`; a full disk or read-only folder names the file)."""
    kg = ingested.kg
    with staged_outputs(out_dir, "ingest") as staging:
        write_parquet(staging / "facts.parquet", kg.facts, ingested.provenance)
        write_parquet(staging / "entities.parquet", kg.entities, ingested.provenance)
        write_parquet(staging / "relations.parquet", kg.relations, ingested.provenance)
        write_json(staging / "stats.json", ingested.stats)


def ingest(
    spec: DatasetSpec,
    settings: IngestSettings,
    *,
    data_dir: Path | None,
    download_dir: Path,
    fetcher: Fetcher = fetch,
) -> Ingested:
    """Locate, read, repair and describe one dataset (`data_dir`: the local mirror, None to
    download into `download_dir`); nothing is written (`write_outputs`)."""
    duplicates, train_from_valid = settings.duplicates, settings.train_from_valid
    src, root, origin = locate(
        spec, data_dir, download_dir, settings.source.get(spec.name), fetcher
    )
    kg = src.reader(root)
    dropped = repair(kg, duplicates)
    derived = derive_train(kg, train_from_valid)
    stats = describe(kg, spec, src, dropped)
    stats["origin"] = origin
    stats["derived_splits"] = derived
    provenance = {
        "stage": "ingest",
        "dataset": stats["dataset"],
        "source": stats["source"],
        "params": {
            "duplicates": duplicates,
            "source": src.name,
            "train_from_valid": train_from_valid,
        },
        "inputs": dict(kg.inputs),  # sha256 of every source file read
        "time_unit": kg.time_unit,
        "time_granularity": kg.time_granularity,
        "rulerag_version": __version__,
    }
    return Ingested(kg, stats, provenance)
