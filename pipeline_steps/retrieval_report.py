"""Stage `retrieval_report`: every retrieval configuration of a dataset side by side.

Reads data/<dataset>/retrieval/<config>/metrics.json for the configurations params name
(retrieve.indexes x standard/rg, retrieve.finetune x ssft/rgft) and writes
data/<dataset>/retrieval/report/: recall_at_k.csv (long: config, k, recall, loose_recall),
results.md (beside the paper's Recall@10) and recall_at_k.png (one line per configuration);
all logged to MLflow.
"""

from __future__ import annotations

import json
import sys

from pipeline_steps.common import PROJECT_DIR, data_dir, dataset_parser, load_params, run_stage
from rulerag.errors import InputError
from rulerag.io import atomic_open, atomic_path
from rulerag.layout import DataLayout
from rulerag.retrieval.configs import retrieve_settings
from rulerag.retrieval.report import plot_recall, recall_table, to_markdown
from rulerag.tracking import TAG_STAGE_INSTANCE, stage_run


def main(argv: list[str] | None = None) -> int:
    args = dataset_parser(__doc__ or "").parse_args(argv)
    settings = retrieve_settings(load_params().get("retrieve"))
    ks = list(settings.ks)
    paths = DataLayout(data_dir(args.dataset))
    metrics = {}
    for name in settings.config_names():
        source = paths.output(name) / "metrics.json"
        if not source.is_file():
            raise InputError(f"retrieval_report@{args.dataset}: {source} missing")
        metrics[name] = json.loads(source.read_text(encoding="utf-8"))
    table = recall_table(metrics, ks)
    out = paths.retrieval / "report"
    out.mkdir(parents=True, exist_ok=True)
    with atomic_open(out / "recall_at_k.csv") as handle:
        table.to_csv(handle, index=False)
    markdown = to_markdown(args.dataset, table, ks)
    with atomic_open(out / "results.md") as handle:
        handle.write(markdown)
    with atomic_path(out / "recall_at_k.png") as tmp:
        plot_recall(args.dataset, table, tmp)
    with stage_run("retrieval_report", args.dataset, project_dir=PROJECT_DIR) as run:
        run.set_tags({TAG_STAGE_INSTANCE: f"retrieval_report@{args.dataset}"})
        for name, figures in metrics.items():
            for k in ks:
                if f"recall_at_{k}" in figures:
                    run.log_metrics({f"{name}_recall_at_{k}": figures[f"recall_at_{k}"]})
        for artifact in ("recall_at_k.csv", "results.md", "recall_at_k.png"):
            run.log_artifact(out / artifact)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
