"""Stage `report`: the result grid of one dataset in the layout of the paper's Table 2.

Reads data/<dataset>/generation/<config>/metrics.json for every configuration in
`generation.configs` and writes data/<dataset>/report/results.md (Markdown, the paper's figures
beside ours), results.csv (the same numbers) and results.png (bars of R@10 / EM / T-F1).
Below the table, results.md checks the paper's claims row against row on the same queries
(exact McNemar on predictions.jsonl, `rulerag.evaluation.claims`); claims.csv has the numbers.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from pipeline_steps.common import PROJECT_DIR, data_dir, dataset_parser, load_params
from rulerag.evaluation.claims import claims_table, claims_to_markdown
from rulerag.evaluation.report import plot_results, results_table, to_markdown
from rulerag.generation.config import apply_profile
from rulerag.io import atomic_open, iter_jsonl
from rulerag.tracking import stage_run


def main(argv: list[str] | None = None) -> int:
    args = dataset_parser(__doc__ or "").parse_args(argv)
    name = args.dataset
    cfg = apply_profile(load_params().get("generation") or {})
    configs = list(cfg.get("configs") or [])
    base = data_dir(name)
    metrics: dict[str, dict[str, Any]] = {}
    per_query_em: dict[str, dict[str, float]] = {}
    missing = []
    for config in configs:
        path = base / "generation" / config / "metrics.json"
        if path.is_file():
            metrics[config] = json.loads(path.read_text(encoding="utf-8"))
            per_query_em[config] = {
                str(r["qid"]): float(r["em"])
                for r in iter_jsonl(path.with_name("predictions.jsonl"))
            }
        else:
            missing.append(config)
    claims = claims_table(per_query_em)
    table = results_table(metrics, name, order=configs)
    queries = sorted({int(m["queries"]) for m in metrics.values() if m.get("queries")})
    generators = sorted({str(m.get("generator")) for m in metrics.values()})
    notes = [
        f"profile `{cfg.get('profile', 'cpu')}`, generator model `{cfg.get('model')}`, "
        f"retriever `{cfg.get('retriever')}`, test queries per row: "
        f"{', '.join(map(str, queries)) or '–'}",
        f"generators: {', '.join(generators) or '–'}",
        "R@10, EM and T-F1 in percent; `paper` columns: RuleRAG (Chen et al.) Table 2 where "
        "known (7B generators, all test queries; blank: not checked offline).",
    ]
    if missing:
        notes.append(f"no results yet for: {', '.join(missing)}")
    out_dir = base / "report"
    with stage_run(
        "report", name, project_dir=PROJECT_DIR, params={"generation.configs": configs}
    ) as run:
        out_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".report-", dir=out_dir))
        try:
            with atomic_open(staging / "results.csv") as handle:
                table.to_csv(handle, index=False)
            with atomic_open(staging / "results.md") as handle:
                handle.write(to_markdown(table, f"{name}: RuleRAG result grid", notes))
                if not claims.empty:
                    handle.write("\n" + claims_to_markdown(claims))
            with atomic_open(staging / "claims.csv") as handle:
                claims.to_csv(handle, index=False)
            plot_results(table, staging / "results.png", f"{name}: R@10 / EM / T-F1 (%)")
            for item in sorted(staging.iterdir()):
                os.replace(item, out_dir / item.name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        for record in table.to_dict("records"):
            for column, key in (("R@10", "recall_at_10"), ("EM", "em"), ("T-F1", "token_f1")):
                value = record[column]
                if value is not None and value == value:  # not NaN
                    run.log_metrics({f"{record['config']}.{key}": float(value)})
        for record in claims.to_dict("records"):
            run.log_metrics({f"claim.{record['better']}_vs_{record['worse']}.p": record["p"]})
        for artifact in ("results.md", "results.csv", "results.png", "claims.csv"):
            run.log_artifact(out_dir / artifact)
    print((out_dir / "results.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
