"""Stage `retrieval_report`: every retrieval configuration of a dataset side by side.

Reads data/<dataset>/retrieval/<config>/metrics.json for the configurations params name
(retrieve.indexes x standard/rg, retrieve.finetune x ssft/rgft) and writes
data/<dataset>/retrieval/report/: recall_at_k.csv (long: config, k, recall, loose_recall),
results.md (beside the paper's Recall@10) and recall_at_k.png (one line per configuration);
all logged to MLflow (`rulerag.retrieval.report.retrieval_report`).
"""

from __future__ import annotations

import sys

from pipeline_steps.common import run_stage, stage_inputs
from rulerag.retrieval.report import retrieval_report


def main(argv: list[str] | None = None) -> int:
    stage = stage_inputs("retrieval_report", argv, __doc__)
    out = stage.layout.retrieval_report
    with stage.track() as run:
        report = retrieval_report(stage.layout, stage.params.retrieve)
        report.write(out)
        run.log_metrics(report.recall_metrics())
        for artifact in report.FILES:
            run.log_artifact(out / artifact)
    print(report.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
