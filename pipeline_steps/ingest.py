"""Stage `ingest`: KG source files -> data/<dataset>/kg/{facts,entities,relations}.parquet.

Reads from the local mirror named by RULERAG_DATA_DIR when set (same layout as ../shared/kg),
else downloads the public files into data/<dataset>/download/ with checksums.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pipeline_steps.common import numeric_metrics, run_stage, stage_inputs
from rulerag.kg.ingest import MIRROR_ENV, ingest, write_outputs
from rulerag.kg.registry import get_spec


def main(argv: list[str] | None = None) -> int:
    stage = stage_inputs("ingest", argv, __doc__)
    name, layout, settings = stage.dataset, stage.layout, stage.params.ingest
    mirror = os.environ.get(MIRROR_ENV)
    # A KGFormatError / DatasetNotFoundError marks the run FAILED and reaches the user as
    # file:line, without a traceback (run_stage).
    with stage.track({"ingest": stage.params.section_values("ingest")}) as run:
        result = ingest(
            get_spec(name, settings),
            settings,
            data_dir=Path(mirror).expanduser() if mirror else None,
            download_dir=layout.download,
        )
        write_outputs(result, layout.kg)
        stats = result.stats
        run.log_params({"source": stats["source"], "origin": stats["origin"]})
        run.log_metrics(numeric_metrics(stats))
        run.log_artifact(layout.kg_stats)
        run.log_dict(result.kg.entities.head(50).to_dict("records"), "sample/entities.json")
    print(
        f"ingest@{name}: {stats['facts']:,} facts {stats['splits']}, "
        f"{stats['entities']:,} entities, {stats['relations']:,} relations from {stats['origin']}"
    )
    for note in stats["notes"]:
        print(f"ingest@{name}: note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
