"""What the safety nets of issues 12 and 28 cost: writing a staged output with its manifest,
reading a JSON-lines corpus with and without the manifest check, `verify_output` before an
indexer, reading a Parquet file through `read_parquet` (checked against the manifest: hashed the
first time, not again in the same process) and with pandas alone, and sweeping a folder for
killed writers' leftovers.

The corpus is ICEWS14's when `data/icews14/benchmark/corpus.jsonl` exists (after `dvc repro
build_benchmark@icews14`), else a synthetic one of the same size (63,685 documents of the same
length). Prints one table; nothing is timed in tests.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd

import rulerag.io as io
from rulerag import markdown
from rulerag.io import (
    MANIFEST,
    iter_jsonl,
    read_parquet,
    staged_outputs,
    sweep_stale,
    verify_output,
    write_jsonl,
    write_parquet,
)
from rulerag.layout import DataLayout

PROJECT = Path(__file__).resolve().parents[1]


def corpus_rows(n: int) -> list[dict[str, str]]:
    real = DataLayout.of(PROJECT / "data", "icews14").corpus
    if real.is_file():
        return list(iter_jsonl(real))
    text = "Time 2014-06-23 Abdullah Abdullah Make a visit Afghanistan."
    return [{"id": f"D{i}", "contents": text} for i in range(n)]


def best_of(repeats: int, func) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        func()
        times.append(time.perf_counter() - started)
    return min(times)


def fresh(check, path: Path):
    """`check(path)` as the first check of `path` in a process (it is hashed again)."""
    io._VERIFIED.clear()
    return check(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=63_685)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = corpus_rows(args.docs)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)

        table = pd.DataFrame(
            {"id": [r["id"] for r in rows], "contents": [r["contents"] for r in rows]}
        )

        def write_staged() -> None:
            with staged_outputs(folder, "build_benchmark") as staging:
                write_jsonl(staging / "corpus.jsonl", rows)
                write_parquet(staging / "corpus.parquet", table, {"stage": "bench"})

        write_s = best_of(args.repeats, write_staged)
        corpus = folder / "corpus.jsonl"
        size = corpus.stat().st_size
        checked_s = best_of(args.repeats, lambda: sum(1 for _ in iter_jsonl(corpus)))
        verify_s = best_of(args.repeats, lambda: fresh(verify_output, corpus))
        parquet = folder / "corpus.parquet"
        first_read_s = best_of(args.repeats, lambda: fresh(read_parquet, parquet))
        parquet_checked_s = best_of(args.repeats, lambda: read_parquet(parquet))
        parquet_plain_s = best_of(args.repeats, lambda: pd.read_parquet(parquet))
        manifest = json.loads((folder / MANIFEST).read_text())
        plain = folder / "plain"
        plain.mkdir()
        shutil.copy(corpus, plain / "corpus.jsonl")
        plain_s = best_of(args.repeats, lambda: sum(1 for _ in iter_jsonl(plain / "corpus.jsonl")))
        for i in range(200):
            (folder / f"file-{i}.txt").write_text("x")
        sweep_s = best_of(args.repeats, lambda: sweep_stale(folder))
    print(f"corpus: {len(rows):,} documents, {size / 2**20:.1f} MiB, manifest {manifest}")
    steps = [
        ("write corpus.jsonl staged, with manifest", f"{write_s:.3f}"),
        ("read it, manifest checked", f"{checked_s:.3f}"),
        ("read it, no manifest", f"{plain_s:.3f}"),
        ("verify_output (sha256 of the file)", f"{verify_s:.3f}"),
        ("read_parquet corpus.parquet, first read (hashed)", f"{first_read_s:.3f}"),
        ("read_parquet again in the same process", f"{parquet_checked_s:.3f}"),
        ("pd.read_parquet, no check", f"{parquet_plain_s:.3f}"),
        ("sweep_stale over 200 files", f"{sweep_s:.4f}"),
    ]
    print(markdown.table(["step", "seconds"], steps))


if __name__ == "__main__":
    main()
