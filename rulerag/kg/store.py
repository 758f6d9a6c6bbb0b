"""Read a canonical KG back from the files `ingest` wrote (data/<dataset>/kg/)."""

from __future__ import annotations

from pathlib import Path

from rulerag.io import read_parquet, read_provenance
from rulerag.kg.schema import KnowledgeGraph


def read_kg(kg_dir: Path) -> KnowledgeGraph:
    """Load facts/entities/relations Parquet, each checked against kg/manifest.json
    (`io.read_parquet`); the time unit comes from the files' provenance."""
    kg_dir = Path(kg_dir)
    missing = [
        name
        for name in ("facts.parquet", "entities.parquet", "relations.parquet")
        if not (kg_dir / name).is_file()
    ]
    if missing:
        raise FileNotFoundError(f"{kg_dir}: missing {', '.join(missing)} (run the ingest stage)")
    provenance = read_provenance(kg_dir / "facts.parquet")
    facts = read_parquet(kg_dir / "facts.parquet")
    return KnowledgeGraph(
        facts=facts,
        entities=read_parquet(kg_dir / "entities.parquet"),
        relations=read_parquet(kg_dir / "relations.parquet"),
        time_unit=provenance.get("time_unit"),
        time_granularity=provenance.get("time_granularity"),
        lines_read={str(s): int(n) for s, n in facts["split"].value_counts().items()},
        inputs=dict(provenance.get("inputs") or {}),
    )
