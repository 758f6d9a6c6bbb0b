"""Stage `export`: RuleQA in the formats others read -> data/<dataset>/export/.

A Hugging Face dataset folder (`datasets.load_dataset` reads it as is: corpus, rules, test,
f_r, f_g, a dataset card and checksums), F_R as DPR retriever training data (`rgft`, `ssft`)
and F_G / test in the official RuleRAG code's layout (`rulerag.export.build`). The folder is
replaced as a whole when everything is written; stats.json gives the rows beside Table 1.
"""

from __future__ import annotations

import sys
from dataclasses import asdict

from pipeline_steps.common import PROJECT_DIR, numeric_metrics, run_stage, stage_inputs
from rulerag.export.build import export_dataset
from rulerag.io import staged_dir
from rulerag.tracking.identity import git_commit


def main(argv: list[str] | None = None) -> int:
    stage = stage_inputs("export", argv, __doc__)
    name, layout, params = stage.dataset, stage.layout, stage.params
    # the card shows the export's knobs as resolved (defaults included; its rules per prompt are
    # generation.max_rules, under the key they had there), the benchmark's as written
    sections = {
        "export": {**asdict(params.export), "max_rules": params.generation.max_rules},
        "build_benchmark": params.section_values("build_benchmark"),
    }
    with stage.track({"export": params.section_values("export")}) as run:
        export = export_dataset(
            layout,
            params.export,
            params.index,
            params.retrieve,
            params.generation,
            stage.model_cache,
        )
        build = {
            "command": f"make export (dvc repro export@{name})",
            "commit": git_commit(PROJECT_DIR),
            "params": {**sections, "retrieve.rule_query": params.retrieve.rule_query},
        }
        with staged_dir(layout.export) as staging:
            stats = export.write(staging, build)
        run.log_metrics(numeric_metrics({k: stats[k] for k in ("configs", "dpr", "official")}))
        run.log_artifact(layout.export / "stats.json")
        run.log_artifact(layout.export / "huggingface" / "README.md")
    print(f"export@{name} -> {layout.export}:\n{export.table1()}")
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
