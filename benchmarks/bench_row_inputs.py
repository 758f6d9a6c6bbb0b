"""What a grid row's inputs cost: time and peak memory of the row's samples (its seeded test
queries with their documents from the retrieval run, `rulerag.generation.grid._row_samples`,
the `generate` stage's own code), and a digest of them to compare two commits' samples.

Run by hand, never as a test:

    .venv/bin/python benchmarks/bench_row_inputs.py --project DIR --dataset NAME
        [--config rulerag_icl] [--retriever bm25] [--code CHECKOUT]

`--project` is a project (its params.yaml and data/<dataset>/), e.g. a copy that
`benchmarks/bench_scale.py` made of a grown graph; `--retriever` overrides
`generation.retriever` (bench_scale's copies have BM25 runs before they have MiniLM's);
`--code` runs another checkout's `rulerag` (e.g. a `git worktree` of an earlier commit): the
same digest means the same samples, so the same prompts and answers (the generator is
deterministic given them).
Peak is this process's maximum resident set, so run one measurement per process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--config", default="rulerag_icl", help="a row of generation.grid")
    parser.add_argument("--retriever", default=None, help="overrides generation.retriever")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose code runs")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.code.resolve()))

    from rulerag.generation import grid as grid_module
    from rulerag.generation.grid_names import grid_config
    from rulerag.layout import DataLayout
    from rulerag.params import parse_params, read_params_file

    values = read_params_file(args.project / "params.yaml")
    if args.retriever:
        values["generation"]["retriever"] = args.retriever
    settings = parse_params(values, str(args.project / "params.yaml")).generation
    grid = grid_config(args.config, settings)
    base = DataLayout.of(args.project / "data", args.dataset).root
    retrieval = grid_module.retrieval_name(grid.retrieval, settings.retriever)
    queries = grid_module._sampled_queries(base, "test", settings)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    started = time.perf_counter()
    samples = grid_module._row_samples(base, queries, retrieval, "run.parquet", grid, settings)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = {
        "project": str(args.project),
        "dataset": args.dataset,
        "config": args.config,
        "retrieval": retrieval,
        "code": grid_module.__file__,
        "queries": len(queries),
        "seconds": round(seconds, 2),
        "peak_gib": round(peak / 2**30, 2),
        "peak_before_gib": round(before / 2**30, 2),
        "samples_sha256": hashlib.sha256(pickle.dumps(samples)).hexdigest(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
