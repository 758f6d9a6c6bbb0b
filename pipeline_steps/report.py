"""Stage `report`: the result grid of one dataset in the layout of the paper's Table 2.

Reads data/<dataset>/generation/<config>/metrics.json for every configuration in
`generation.configs` and every R²AG row of `r2ag.rows` (and generation/robust/<config>/ for
`generation.robustness_rows`), and writes data/<dataset>/report/:
results.md (Markdown, the paper's figures beside ours), results.csv (the same numbers) and
results.png (bars of R@10 / EM / T-F1). Below the table, results.md checks the paper's claims
(and R²AG's) row against row on the same queries (exact McNemar on predictions.jsonl,
`rulerag.evaluation.claims`); claims.csv has the numbers (`rulerag.evaluation.grid_report`).
The figures, results.md and results.png also go to the pipeline run's parent run in MLflow
(`rulerag.tracking.parent`): one row per pipeline run to compare.
"""

from __future__ import annotations

import sys

from pipeline_steps.common import run_stage, stage_inputs
from rulerag.evaluation.grid_report import REPORT_FILES, grid_report
from rulerag.io import staged_outputs


def main(argv: list[str] | None = None) -> int:
    stage = stage_inputs("report", argv, __doc__)
    generation, rows = stage.params.generation, stage.params.r2ag.rows
    out = stage.layout.report
    with stage.track({"generation.configs": [*generation.configs, *rows]}) as run:
        report = grid_report(stage.layout, generation, rows)
        with staged_outputs(out, "report") as staging:
            report.write(staging)
        run.log_metrics(report.metrics())
        for artifact in REPORT_FILES:
            run.log_artifact(out / artifact)
        # the pipeline run's parent row: the grid's figures and the report to read beside them
        run.log_summary(report.metrics(), [out / "results.md", out / "results.png"])
    print(report.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
