"""Stage `ingest`: KG source files -> data/<dataset>/kg/{facts,entities,relations}.parquet.

Reads from the local mirror named by RULERAG_DATA_DIR when set (same layout as ../shared/kg),
else downloads the public files into data/<dataset>/download/ with checksums.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pipeline_steps.common import (
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    numeric_metrics,
    run_stage,
)
from rulerag.kg.ingest import MIRROR_ENV, ingest
from rulerag.kg.registry import get_spec, ingest_settings
from rulerag.tracking import stage_run


def main(argv: list[str] | None = None) -> int:
    args = dataset_parser(__doc__ or "").parse_args(argv)
    params = load_params()
    section = params.get("ingest") or {}
    settings = ingest_settings(section)
    name = args.dataset
    spec = get_spec(name, params)
    mirror = os.environ.get(MIRROR_ENV)
    out_dir = data_dir(name) / "kg"
    # A KGFormatError / DatasetNotFoundError marks the run FAILED and reaches the user as
    # file:line, without a traceback (run_stage).
    with stage_run("ingest", name, project_dir=PROJECT_DIR, params={"ingest": section}) as run:
        kg, stats = ingest(
            spec,
            out_dir,
            data_dir=Path(mirror).expanduser() if mirror else None,
            download_dir=data_dir(name) / "download",
            duplicates=settings.duplicates,
            source=settings.source.get(name),
            train_from_valid=settings.train_from_valid,
        )
        run.log_params({"source": stats["source"], "origin": stats["origin"]})
        run.log_metrics(numeric_metrics(stats))
        run.log_artifact(out_dir / "stats.json")
        run.log_dict(kg.entities.head(50).to_dict("records"), "sample/entities.json")
    print(
        f"ingest@{name}: {stats['facts']:,} facts {stats['splits']}, "
        f"{stats['entities']:,} entities, {stats['relations']:,} relations from {stats['origin']}"
    )
    for note in stats["notes"]:
        print(f"ingest@{name}: note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
