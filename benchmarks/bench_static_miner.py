"""Time the static miner (AMIE 3 semantics) on FB15k-237 and NELL-995: wall time and peak memory.

Run by hand, never as a test:

    .venv/bin/python benchmarks/bench_static_miner.py [--datasets fb15k237,nell995]
        [--max-atoms 3] [--configs default,hc-only]

Each (dataset, config) runs in a fresh subprocess so that its peak RSS (`ru_maxrss`) is its own;
the KG is read from the mirror (RULERAG_DATA_DIR or ../shared/kg) first, and the table reports
the RSS after loading next to the peak, and the miner's own allocation peak (tracemalloc, which
NumPy and SciPy report to, measured in a second run), since reading the KG alone peaks higher
than mining does. Configs:
`default` = mine_static's defaults (min support 100, head coverage 0.01, PCA confidence 0.1);
`hc-only` = AMIE 3's exact default (`min_support=0`: head coverage alone prunes, head relations
need 100 facts). Targets (2-core machine): FB15k-237 <= 60 s wall, <= 4 GiB peak.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"default": {}, "hc-only": {"min_support": 0}}


def _rss_mib() -> float:
    """Peak RSS of this process so far in MiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_one(dataset: str, config: str, max_atoms: int) -> dict:
    """Load one KG, mine it once, and report timings, memory and rule counts (in a child)."""
    sys.path.insert(0, str(ROOT))
    from rulerag.kg.registry import DATASETS
    from rulerag.rules.settings import StaticMinerSettings
    from rulerag.rules.static_miner import mine_static

    mirror = Path(os.environ.get("RULERAG_DATA_DIR", ROOT.parent / "shared" / "kg"))
    spec = DATASETS[dataset]
    t0 = time.perf_counter()
    kg = spec.sources[0].reader(mirror / spec.mirror_dir)
    train = kg.split("train")[["head", "relation", "tail"]]
    load_s = time.perf_counter() - t0
    rss_loaded = _rss_mib()
    settings = StaticMinerSettings(max_atoms=max_atoms, **CONFIGS[config])
    t1 = time.perf_counter()
    rules = mine_static(train, len(kg.entities), len(kg.relations), settings, progress=False)
    mine_s = time.perf_counter() - t1
    peak_rss = _rss_mib()
    # the miner's own allocations (NumPy/SciPy report to tracemalloc), from a second, traced run
    tracemalloc.start()
    mine_static(train, len(kg.entities), len(kg.relations), settings, progress=False)
    traced_peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    shapes = Counter(
        "1 atom" if r.length == 1 else ("path" if r.head.object == 2 else "parallel") for r in rules
    )
    return {
        "dataset": dataset,
        "config": config,
        "max_atoms": max_atoms,
        "facts": len(train),
        "load_s": round(load_s, 2),
        "mine_s": round(mine_s, 2),
        "rss_loaded_mib": round(rss_loaded),
        "peak_rss_mib": round(peak_rss),
        "miner_alloc_peak_mib": round(traced_peak),
        "rules": len(rules),
        "by_length": {str(k): v for k, v in sorted(Counter(r.length for r in rules).items())},
        "by_shape": dict(sorted(shapes.items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="fb15k237,nell995")
    parser.add_argument("--configs", default="default,hc-only")
    parser.add_argument("--max-atoms", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("DATASET", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(*args.child, args.max_atoms)))
        return

    results = []
    for dataset in args.datasets.split(","):
        for config in args.configs.split(","):
            cmd = [sys.executable, __file__, "--child", dataset, config]
            cmd += ["--max-atoms", str(args.max_atoms)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results.append(json.loads(out.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), file=sys.stderr)

    print(
        f"\nstatic miner, max_atoms={args.max_atoms}, {platform.processor() or platform.machine()}"
        f", {os.cpu_count()} cores, Python {platform.python_version()}\n"
    )
    head = (
        f"{'dataset':10} {'config':8} {'facts':>8} {'mine s':>7} {'load s':>7} "
        f"{'RSS loaded':>10} {'peak RSS':>9} {'miner alloc':>11} {'rules':>6}  by length / shape"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        lengths = ", ".join(f"{k}: {v}" for k, v in r["by_length"].items())
        shapes = ", ".join(f"{k}: {v}" for k, v in r["by_shape"].items())
        print(
            f"{r['dataset']:10} {r['config']:8} {r['facts']:>8} {r['mine_s']:>7.1f} "
            f"{r['load_s']:>7.1f} {r['rss_loaded_mib']:>6} MiB {r['peak_rss_mib']:>5} MiB "
            f"{r['miner_alloc_peak_mib']:>7} MiB "
            f"{r['rules']:>6}  {lengths} ({shapes})"
        )


if __name__ == "__main__":
    main()
