"""Two rule sets on the same test queries, paired: does one rank the answers better?

Run by hand, never as a test:

    python benchmarks/bench_paired_forecast.py --dataset icews14 --rules-a A/rules.parquet
        --rules-b B/rules.parquet [--data FOLDER]

Applies both rules.parquet files as `apply_rules` does (params.yaml's settings, every test
fact both ways, `rulerag.rules.forecasting`) and compares the answers' reciprocal ranks query by
query: how many queries each set ranks better, the Wilcoxon signed-rank test on the reciprocal
ranks, and the queries only one set puts first (Hits@1). An MRR difference alone cannot say
whether many queries gain a little or a few gain much.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from scipy.stats import wilcoxon  # noqa: E402

from rulerag.io import read_parquet  # noqa: E402
from rulerag.layout import DataLayout  # noqa: E402
from rulerag.params import load_params  # noqa: E402
from rulerag.rules.bank import frame_rules  # noqa: E402
from rulerag.rules.forecasting import forecast  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="icews14")
    parser.add_argument("--data", type=Path, default=ROOT / "data", help="read only")
    parser.add_argument("--rules-a", type=Path, required=True)
    parser.add_argument("--rules-b", type=Path, required=True)
    args = parser.parse_args()
    layout = DataLayout.of(args.data, args.dataset)
    for path in (layout.facts, args.rules_a, args.rules_b):
        if not path.is_file():
            parser.error(f"{path} not found")
    facts = read_parquet(layout.facts)
    n_relations = len(read_parquet(layout.relations))
    n_entities = len(read_parquet(layout.entities))
    temporal = bool(facts["time"].notna().any())
    settings = load_params(ROOT / "params.yaml").apply_rules.for_data(temporal)
    ranks, mrr = {}, {}
    for name, path in (("a", args.rules_a), ("b", args.rules_b)):
        result = forecast(facts, frame_rules(read_parquet(path)), n_relations, n_entities, settings)
        ranks[name] = result.ranks["rank"].to_numpy(np.float64)
        mrr[name] = round(result.metrics["mrr"], 4)
    a, b = 1 / ranks["a"], 1 / ranks["b"]
    report = {
        "dataset": args.dataset,
        "queries": len(a),
        "mrr_a": mrr["a"],
        "mrr_b": mrr["b"],
        "a_better": int((a > b).sum()),
        "b_better": int((b > a).sum()),
        "wilcoxon_p": round(float(wilcoxon(a, b).pvalue), 4),
        "first_only_a": int(((ranks["a"] == 1) & (ranks["b"] != 1)).sum()),
        "first_only_b": int(((ranks["b"] == 1) & (ranks["a"] != 1)).sum()),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
