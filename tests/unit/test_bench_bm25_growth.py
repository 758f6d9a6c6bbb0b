"""benchmarks/bench_bm25_growth.py's pure parts: the query sample and the table's exponents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_bm25_growth as bench


def test_the_sample_is_seeded_without_repeats_in_file_order(tmp_path: Path) -> None:
    test = tmp_path / "test.jsonl"
    test.write_text("".join(json.dumps({"query": f"q{i}"}) + "\n" for i in range(50)))
    sample = bench.sample_queries(test, 10, seed=3)
    assert sample == bench.sample_queries(test, 10, seed=3)
    assert len(set(sample)) == 10
    assert sample == sorted(sample, key=lambda q: int(q[1:]))
    assert sample != bench.sample_queries(test, 10, seed=4)
    assert len(bench.sample_queries(test, 500, seed=0)) == 50  # all of them when fewer


def _row(factor: int, docs: int, bm25s_ms: float, lucene_ms: float) -> dict[str, float]:
    return {"factor": factor, "docs": docs, "bm25s_ms": bm25s_ms, "lucene_ms": lucene_ms,
            "same_top10": 0.9, "top10_overlap": 0.95}  # fmt: skip


def test_the_table_fits_each_back_end_s_exponent_in_documents() -> None:
    rows = [_row(1, 1000, 1.0, 2.0), _row(4, 4000, 4.0, 2.0), _row(16, 16000, 16.0, 2.0)]
    lines = bench.table(rows).splitlines()
    assert lines[2] == "| ×1 | 1,000 | 1.00 | 2.00 | 90.0% | 95.0% |"
    assert lines[-1] == "| exponent (in documents) | | 1.00 | 0.00 | | |"
    one = bench.table(rows[:1]).splitlines()
    assert one[-1] == "| exponent (in documents) | | – | – | | |"


@pytest.mark.parametrize("power", [0.5, 2.0])
def test_a_power_law_s_exponent_is_read_back(power: float) -> None:
    rows = [_row(f, 1000 * f, float(f) ** power, 1.0) for f in (1, 4, 16)]
    assert bench.table(rows).splitlines()[-1].split("|")[3].strip() == f"{power:.2f}"
