"""Stage `package_model`: the trained RuleRAG path of one dataset as one registered MLflow model.

Packs what `serve.row` (RuleRAG-FT by default) answers with (`rulerag.serving.packaging`: the
KG's names and history, the rule bank and mined rules, the corpus and its index, the row's
fine-tuned query encoder and LoRA adapter, params.yaml) into a pyfunc model, logs it to the
stage's MLflow run and registers it as `rulerag-<dataset>`; the alias `champion` moves to the
new version only when its grid figure (`serve.champion_metric` of the row's metrics.json) beats
the champion's. Writes data/<dataset>/model/metrics.json (the row's figures, the model's size;
`serve.row: null` registers nothing and says so there).
`make serve` and `mlflow models serve -m models:/rulerag-<dataset>@champion` serve it.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from pipeline_steps.common import numeric_metrics, run_stage, stage_inputs
from rulerag.io import staged_outputs, write_json
from rulerag.serving.packaging import package_model
from rulerag.tracking.registry import served_name


def main(argv: list[str] | None = None) -> int:
    stage = stage_inputs("package_model", argv, __doc__)
    name, layout, params = stage.dataset, stage.layout, stage.params
    serve = params.serve
    if serve.row is None:  # switched off: nothing registered, the outputs say so
        with staged_outputs(layout.packaged, "package_model") as staging:
            write_json(staging / "metrics.json", {"dataset": name, "row": None})
        print(f"package_model@{name}: off (serve.row is null), nothing registered")
        return 0
    with stage.track({"serve": params.section_values("serve")}) as run:
        with tempfile.TemporaryDirectory(prefix=".package_model-", dir=layout.root) as work:
            packaged = package_model(layout, params, Path(stage.args.params), Path(work))
            run.log_metrics(numeric_metrics(packaged.metrics))
            run.log_model(
                lambda folder: shutil.copytree(packaged.path, folder, dirs_exist_ok=True),
                "model",
                registered_name=served_name(name),
                description=(
                    f"RuleRAG on {name}: grid row {serve.row} (EM "
                    f"{packaged.metrics['em']}, T-F1 {packaged.metrics['token_f1']})"
                ),
                champion_metric=serve.champion_metric,
            )
        with staged_outputs(layout.packaged, "package_model") as staging:
            write_json(staging / "metrics.json", packaged.metrics)
    size = packaged.metrics["model_bytes"] / 2**20
    print(f"package_model@{name}: {served_name(name)} ({serve.row}, {size:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
