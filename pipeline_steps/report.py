"""Stage `report`: the result grid of one dataset in the layout of the paper's Table 2.

Reads data/<dataset>/generation/<config>/metrics.json for every configuration in
`generation.configs` and every R²AG row of `r2ag.rows` (and generation/robust/<config>/ for
`generation.robustness_rows`), and writes data/<dataset>/report/:
results.md (Markdown, the paper's figures beside ours), results.csv (the same numbers) and
results.png (bars of R@10 / EM / T-F1). Below the table, results.md checks the paper's claims
(and R²AG's) row against row on the same queries (exact McNemar on predictions.jsonl,
`rulerag.evaluation.claims`); claims.csv has the numbers.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pipeline_steps.common import PROJECT_DIR, data_dir, dataset_parser, load_params, run_stage
from rulerag.evaluation.claims import (
    PAPER_CLAIMS,
    R2AG_CLAIMS,
    ROBUST_CLAIMS,
    RULE_CLAIMS,
    claims_table,
    claims_to_markdown,
)
from rulerag.evaluation.report import PAPER_TABLE7, plot_results, results_table, to_markdown
from rulerag.generation.config import generation_settings
from rulerag.generation.r2ag.settings import r2ag_settings
from rulerag.io import atomic_open, iter_jsonl, staged_outputs
from rulerag.tracking import stage_run

#: where the robustness rows write (data/<dataset>/generation/robust/<row>/)
ROBUST = "robust"
ROBUST_TITLE = "Robustness: the same rows on queries that need no rule"
ROBUST_NOTES = (
    "Each test query asked through one of its rules' body relation (same subject, time, "
    "answers and rules; a corpus document states the answer): the anonymous version's "
    "App. E. `paper` columns: its Table 7 (DPR + LLAMA2_7B). Paired tests: robust/<row> "
    "in the claims below.",
)


def main(argv: list[str] | None = None) -> int:
    args = dataset_parser(__doc__ or "").parse_args(argv)
    name = args.dataset
    params = load_params()
    settings = generation_settings(params.get("generation"))
    configs = [*settings.configs, *r2ag_settings(params.get("r2ag")).rows]
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
    robust: dict[str, dict[str, Any]] = {}
    for config in settings.robustness_rows:
        path = base / "generation" / ROBUST / config / "metrics.json"
        if path.is_file():
            robust[config] = json.loads(path.read_text(encoding="utf-8"))
            per_query_em[f"{ROBUST}/{config}"] = {
                str(r["qid"]): float(r["em"])
                for r in iter_jsonl(path.with_name("predictions.jsonl"))
            }
    claims = claims_table(per_query_em, (*PAPER_CLAIMS, *RULE_CLAIMS, *R2AG_CLAIMS, *ROBUST_CLAIMS))
    table = results_table(metrics, name, order=configs)
    queries = sorted({int(m["queries"]) for m in metrics.values() if m.get("queries")})
    generators = sorted({str(m.get("generator")) for m in metrics.values()})
    notes = [
        f"profile `{settings.profile}`, generator model `{settings.model}`, prompt style "
        f"`{settings.prompt_style}`, rules per prompt `{settings.max_rules or 'all selected'}`, "
        f"retriever `{settings.retriever}`, test queries per row: "
        f"{', '.join(map(str, queries)) or '–'}",
        f"generators: {', '.join(generators) or '–'}",
        "R@10, EM and T-F1 in percent; `paper` columns: RuleRAG (Chen et al., arXiv) Table 2, "
        "DPR retrievers and LLAMA2_7B generators on all test queries (–: the paper reports "
        "none).",
    ]
    if missing:
        notes.append(f"no results yet for: {', '.join(missing)}")
    out_dir = base / "report"
    with stage_run(
        "report", name, project_dir=PROJECT_DIR, params={"generation.configs": configs}
    ) as run:
        with staged_outputs(out_dir, "report") as staging:
            with atomic_open(staging / "results.csv") as handle:
                table.to_csv(handle, index=False)
            with atomic_open(staging / "results.md") as handle:
                handle.write(to_markdown(table, f"{name}: RuleRAG result grid", notes))
                if robust:
                    robust_table = results_table(
                        robust, name, order=list(robust), paper_table=PAPER_TABLE7
                    )
                    handle.write("\n" + to_markdown(robust_table, ROBUST_TITLE, ROBUST_NOTES))
                if not claims.empty:
                    handle.write("\n" + claims_to_markdown(claims))
            with atomic_open(staging / "claims.csv") as handle:
                claims.to_csv(handle, index=False)
            plot_results(table, staging / "results.png", f"{name}: R@10 / EM / T-F1 (%)")
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
    sys.exit(run_stage(main))
