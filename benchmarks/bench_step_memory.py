"""What one library step costs in memory, under this checkout's code or another's: a grid
row's inputs, or building or loading a dense index. Each prints seconds, peak RSS and a
digest of what the step made, so two checkouts' results can be compared byte for byte.

Run by hand, never as a test; one step per process (the peak is the process's maximum
resident set):

    .venv/bin/python benchmarks/bench_step_memory.py row --project DIR --dataset NAME
        [--config rulerag_icl] [--retriever bm25] [--code CHECKOUT]
    .venv/bin/python benchmarks/bench_step_memory.py index-build --project DIR --dataset NAME
        [--encoder minilm] [--code CHECKOUT]
    .venv/bin/python benchmarks/bench_step_memory.py index-load --project DIR --dataset NAME
        [--encoder minilm] [--code CHECKOUT]

- `row`: the row's samples (its seeded test queries with their documents from the retrieval
  run, `rulerag.generation.grid._row_samples`, the `generate` stage's own code); the digest
  is of the samples, so the same digest means the same prompts and answers (the generator is
  deterministic given them). `--retriever` overrides `generation.retriever` (the copies
  `benchmarks/bench_scale.py` makes have BM25 runs before they have MiniLM's).
- `index-build`: the `index` stage's dense build (`rulerag.retrieval.indexing.build_dense`)
  into a scratch folder, from the encoding cache when the stage has filled it (then no
  encoding is timed: what is measured is holding the vectors); the digest is of the files.
- `index-load`: `DenseIndex.load` of the stage's index, as every dense retrieval opens it;
  the digest is of the vectors FAISS holds.

`--project` is a project (its params.yaml and data/<dataset>/), e.g. a bench_scale copy;
`--code` runs another checkout's `rulerag` (e.g. a `git worktree` of an earlier commit), with
this checkout's models (`RULERAG_MODEL_CACHE`, else its `.models`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: this checkout's models (another checkout's `--code` has none of its own)
MODEL_CACHE = Path(os.environ.get("RULERAG_MODEL_CACHE") or ROOT / ".models")


def sha256_of(*parts: bytes | memoryview) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


def row(args: argparse.Namespace, scratch: Path) -> tuple[str, Callable[[], str]]:
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
    samples = grid_module._row_samples(base, queries, retrieval, "run.parquet", grid, settings)
    what = f"{args.config} ({retrieval}, {len(queries)} queries)"
    return what, lambda: sha256_of(pickle.dumps(samples))


def index_build(args: argparse.Namespace, scratch: Path) -> tuple[str, Callable[[], str]]:
    from rulerag.layout import DataLayout
    from rulerag.params import load_params
    from rulerag.retrieval.indexing import build_dense

    params = load_params(args.project / "params.yaml")
    layout = DataLayout.of(args.project / "data", args.dataset)
    built = build_dense(args.encoder, layout, params.index, scratch, MODEL_CACHE)
    files = sorted(scratch.iterdir())
    return f"{args.encoder}: {built.run_figures}", lambda: sha256_of(
        *(part for f in files for part in (f.name.encode(), f.read_bytes()))
    )


def index_load(args: argparse.Namespace, scratch: Path) -> tuple[str, Callable[[], str]]:
    from rulerag.layout import DataLayout
    from rulerag.retrieval.dense import DenseIndex

    index = DenseIndex.load(DataLayout.of(args.project / "data", args.dataset).index(args.encoder))
    return f"{args.encoder}: {index.embeddings.shape}", lambda: sha256_of(
        memoryview(index.embeddings)  # no copy of the vectors
    )


STEPS = {"row": row, "index-build": index_build, "index-load": index_load}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=sorted(STEPS))
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--config", default="rulerag_icl", help="row: a row of generation.grid")
    parser.add_argument("--retriever", default=None, help="row: overrides generation.retriever")
    parser.add_argument("--encoder", default="minilm", help="index-*: an encoder of index")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose code runs")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.code.resolve()))
    import rulerag

    with tempfile.TemporaryDirectory() as scratch:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        started = time.perf_counter()
        what, digest = STEPS[args.step](args, Path(scratch))
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # before the digest
        sha256 = digest()
    result = {
        "step": args.step,
        "project": str(args.project),
        "dataset": args.dataset,
        "what": what,
        "code": str(Path(rulerag.__file__).parents[1]),
        "seconds": round(seconds, 2),
        "peak_gib": round(peak / 2**30, 2),
        "peak_before_gib": round(before / 2**30, 2),
        "sha256": sha256,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
