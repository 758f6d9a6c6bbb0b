"""Speed and memory of the TLogic-style temporal miner on a real KG (run by hand, not a test).

    .venv/bin/python benchmarks/bench_temporal_miner.py                 # ICEWS14, lengths 1-3
    .venv/bin/python benchmarks/bench_temporal_miner.py --transition unif --exact --lengths 1

The target on a 2-core machine is <= 40 s wall and <= 4 GiB peak memory for ICEWS14 with
lengths 1-3 and 200 walks per relation and length (TLogic's reference code: about 750 s).
The mining runs in a fresh child process so that its peak RSS (`ru_maxrss` of the child, which
includes reading the KG) is not inflated by anything this script did before.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _mirror() -> Path:
    configured = os.environ.get("RULERAG_DATA_DIR")
    return Path(configured) if configured else ROOT.parent / "shared" / "kg"


def child(args: argparse.Namespace) -> None:
    """Load the KG, mine, and print one JSON line of measurements."""
    sys.path.insert(0, str(ROOT))
    from rulerag.kg.registry import DATASETS
    from rulerag.rules.settings import TemporalMinerSettings
    from rulerag.rules.temporal_miner import mine_temporal

    spec = DATASETS[args.dataset]
    t0 = time.perf_counter()
    kg = spec.sources[0].reader(Path(args.mirror) / spec.mirror_dir)
    train = kg.split("train")
    t1 = time.perf_counter()
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rules = mine_temporal(
        train,
        len(kg.entities),
        len(kg.relations),
        TemporalMinerSettings(
            lengths=args.lengths,
            walks_per_relation=args.walks,
            transition=args.transition,
            num_samples=args.num_samples,
            exact=args.exact,
        ),
        seed=args.seed,
        progress=args.progress,
    )
    t2 = time.perf_counter()
    names = list(kg.relations.sort_values("id")["name"])
    top = sorted((r for r in rules if r.length == 1), key=lambda r: (-r.score, -(r.support or 0)))[
        :5
    ]
    print(
        json.dumps(
            {
                "train_facts": len(train),
                "relations_with_facts": int(train["relation"].nunique()),
                "load_s": round(t1 - t0, 2),
                "mine_s": round(t2 - t1, 2),
                "peak_rss_after_load_mib": round(rss_loaded / 1024, 1),
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "rules": len(rules),
                "rules_by_length": dict(sorted(Counter(r.length for r in rules).items())),
                "heads_with_length1_rules": len({r.head.relation for r in rules if r.length == 1}),
                "top_length1": [
                    f"{r.confidence:.3f} ({r.support:.0f}/{r.body_support:.0f}) {r.text(names)}"
                    for r in top
                ],
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="icews14", choices=("icews14", "yago", "wiki"))
    parser.add_argument("--mirror", default=str(_mirror()))
    parser.add_argument("--lengths", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--walks", type=int, default=200)
    parser.add_argument("--transition", default="exp", choices=("exp", "unif"))
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--num-samples", type=int, default=500)
    parser.add_argument("--exact", action="store_true")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    cmd = [sys.executable, __file__, "--child", *sys.argv[1:]]
    start = time.perf_counter()
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    result = json.loads(done.stdout.strip().splitlines()[-1])
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"dataset {args.dataset}: {result['train_facts']} train facts, "
        f"{result['relations_with_facts']} relations with facts"
    )
    print(
        f"settings: lengths {args.lengths}, {args.walks} walks per relation and length, "
        f"{args.transition}, seed {args.seed}, "
        f"{'exact' if args.exact else f'{args.num_samples} samples'}"
    )
    print(f"wall (child process, incl. start-up and loading): {wall:.1f} s")
    print(f"  loading the KG: {result['load_s']} s, mining: {result['mine_s']} s")
    print(f"peak RSS: {peak:.0f} MiB (after loading: {result['peak_rss_after_load_mib']} MiB)")
    print(f"rules: {result['rules']}, by length: {result['rules_by_length']}")
    print(f"head relations with one-atom rules: {result['heads_with_length1_rules']}")
    for line in result["top_length1"]:
        print("  " + line)
    ok = wall <= 40 and peak <= 4096
    print("target (<= 40 s wall, <= 4 GiB peak):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
