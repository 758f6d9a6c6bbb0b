"""One grid row through the real LLM server (`make serve-llm`) against the local torch generator
on the same queries: seconds per query, EM and T-F1 of each, and how their answers differ.

Run by hand, never as a test (it starts the server itself, on a free port):

    .venv/bin/python benchmarks/bench_llm_server.py [--data data] [--dataset icews14]
        [--row rulerag_icl] [--queries 50] [--threads N] [--out FILE]

Both answer `--row` (a `generation.grid` row with the base generator) of params.yaml on the
row's seeded sample of `--queries` test queries, through `grid.run_row` (the `generate`
stage's code), with the row's prompts and token budget:

* local: `generator: base`, SmolLM2-135M-Instruct dequantised from the offline Q4_1 GGUF into
  float32 (`models.convert_gguf`), batched greedy decoding with torch (`generation.batch_size`);
* server: the same row as `generator: api` against llama.cpp serving that Q4_1 GGUF itself
  (quantised weights, its own kernels), no fixed examples (`api.shots: 0`, so both see the same
  single user turn in the same chat template), temperature 0, one request at a time (the
  server decodes one at a time anyway), with no answer cache (every answer is timed), and the
  stop string "\n" (the local generator stops at the first line break after some text; an
  answer that starts with a line break is empty here, counted as `server_empty`).

So the two differ in the weights' arithmetic only (Q4_1 blocks vs their float32 dequantisation,
and llama.cpp's vs torch's kernels), not in prompt or decoding. The data folder is only read
(`--data` may point at another checkout's data/). The seconds are decoding seconds (the local
model's load is reported apart); other busy processes on the machine change them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rulerag.orchestration.local_llm_server import LlmServer  # noqa: E402 - after the path is set


def run(label: str, base: Path, dataset: str, grid: Any, settings: Any, factory: Any) -> dict:
    """`run_row` once, its figures and per-query records."""
    from rulerag.generation.grid import run_row

    started = time.perf_counter()
    result = run_row(base, dataset, grid, settings, factory)
    wall = time.perf_counter() - started
    m = result.metrics
    figures = {
        "label": label,
        "generator": m["generator"],
        "queries": m["queries"],
        "em": m["em"],
        "token_f1": m["token_f1"],
        "generate_seconds": m["generate_seconds"],
        "seconds_per_query": m["generate_seconds"] / max(1, m["queries"]),
        "load_seconds": m["load_seconds"],
        "wall_seconds": round(wall, 2),
    }
    print(f"{label}: {result.summary(settings.recall_k[-1])}", flush=True)
    return {"figures": figures, "records": result.records}


def compare(local: list[dict], served: list[dict]) -> dict:
    """How many generations and extracted answers differ, and a few examples."""
    pairs = list(zip(local, served, strict=True))
    assert all(a["qid"] == b["qid"] for a, b in pairs)
    differ = [(a, b) for a, b in pairs if a["generation"].strip() != b["generation"].strip()]
    empty = sum(not b["generation"].strip() for b in served)
    answers = [(a, b) for a, b in pairs if a["prediction"] != b["prediction"]]
    examples = [
        {
            "qid": a["qid"],
            "answers": a["answers"],
            "local": a["generation"].strip()[:80],
            "server": b["generation"].strip()[:80],
        }
        for a, b in answers[:4]
    ]
    return {
        "queries": len(pairs),
        "generations_differ": len(differ),
        "server_empty": empty,
        "predictions_differ": len(answers),
        "em_only_local": sum(a["em"] > b["em"] for a, b in pairs),
        "em_only_server": sum(b["em"] > a["em"] for a, b in pairs),
        "examples": examples,
    }


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--data", type=Path, default=ROOT / "data")
    cli.add_argument("--dataset", default="icews14")
    cli.add_argument("--row", default="rulerag_icl")
    cli.add_argument("--queries", type=int, default=50)
    cli.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    cli.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    cli.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = cli.parse_args()

    from rulerag.generation.generators import make_generator, passive_openmp
    from rulerag.generation.grid_names import grid_config
    from rulerag.params import load_params

    passive_openmp()
    import torch

    torch.set_num_threads(args.threads)
    base = args.data / args.dataset
    settings = load_params(args.params).generation
    settings = replace(settings, test_queries=args.queries)
    grid = grid_config(args.row, settings)
    decoding = grid.decoding or settings.decoding
    if grid.generator != "base" or grid.method or decoding != "generate":
        raise SystemExit(f"--row {args.row}: a row with the base generator and plain decoding")

    local = run("local torch (float32 of the Q4_1 weights)", base, args.dataset, grid, settings,
                None)  # fmt: skip

    os.environ.setdefault("RULERAG_API_KEY", "local-server")
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_llm_server-{os.getpid()}.log"
    server = LlmServer(log, threads=args.threads).start()
    try:
        api = replace(
            settings.api, base_url=server.base_url, model="smollm2", shots=0, concurrency=1
        )
        served_settings = replace(settings, api=api)

        def uncached(*row: Any) -> Any:
            generator = make_generator(*row, cached=False)
            generator.stop = ["\n"]  # as the local generator stops at a line break
            return generator

        served = run("llama.cpp server (Q4_1)", base, args.dataset,
                     replace(grid, generator="api"), served_settings, uncached)  # fmt: skip
        requests = server.requests_to()
    finally:
        server.stop()
        log.unlink(missing_ok=True)
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    out = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "dataset": args.dataset,
        "row": args.row,
        "threads": args.threads,
        "max_new_tokens": settings.max_new_tokens,
        "server_requests": requests,
        "local": local["figures"],
        "server": served["figures"],
        "difference": compare(local["records"], served["records"]),
    }
    print(json.dumps(out, indent=2))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
