"""Stage `retrieve`: one retrieval configuration on the test and F_G queries.

`--config <index>-<mode>` (see rulerag/retrieval/configs.py): `bm25-standard`, `bm25-rg`,
`minilm-standard`, `minilm-rg`, `minilm-ssft`, `minilm-rgft`, ... Rule-guided modes search
each (query, rule) pair as `q ∘ r` and unite the lists; the fine-tuned modes load the query
encoder trained by `train_retriever` and search the same corpus index (the document encoder
is frozen; `rulerag.retrieval.runs.retrieve_runs`). dvc.yaml runs the fine-tuned
configurations as the stage `retrieve_finetuned` (they depend on a trained model). Writes
data/<dataset>/retrieval/<config>/:

    run.parquet       test queries: qid, rule, rank, doc_id, score (per-rule top-k lists)
    run_fg.parquet    the same for F_G (the generator's training data needs it); a seeded
                      sample of `retrieve.f_g_queries` of them (null: all)
    metrics.json      recall_at_{1,2,5,10,20,50} (strict: united list cut at k), the paper's
                      loose_recall_at_k (answer anywhere in the per-rule top-k union), F_G
                      recall, timings
    recall.csv        Recall@k over k (DVC plot)
    manifest.json     each file's size and sha256, checked by the readers of the runs (all
                      files are staged and published together: `rulerag.io.staged_outputs`)
"""

from __future__ import annotations

import sys

from pipeline_steps.common import numeric_metrics, run_stage, stage_inputs
from rulerag.retrieval.configs import parse_config
from rulerag.retrieval.runs import retrieve_runs


def main(argv: list[str] | None = None) -> int:
    stage = stage_inputs("retrieve", argv, __doc__, config="<index>-<mode>, e.g. minilm-rg")
    config, params, layout = parse_config(stage.args.config), stage.params, stage.layout
    name = "retrieve_finetuned" if config.trained else "retrieve"  # dvc.yaml's stage
    logged = {
        "retrieve": params.section_values("retrieve"),
        "index": params.section_values("index"),
        "config": config.name,
    }
    tags = {"rulerag.config": config.name}
    with stage.track(logged, stage=name, instance=f"-{config.name}", tags=tags) as run:
        provenance = {"stage": name, "dataset": stage.dataset, **logged}
        runs = retrieve_runs(
            config, layout, params.retrieve, params.index, provenance, stage.model_cache
        )
        out = layout.output(config.name)
        run.log_metrics(numeric_metrics(runs.metrics))
        for artifact in runs.artifacts:
            run.log_artifact(out / artifact)
    for missing in runs.skipped:
        print(f"retrieve@{stage.dataset}: no {missing}; skipped", file=sys.stderr)
    recall = f"Recall@10 {runs.metrics.get('recall_at_10')}"
    loose = f"loose {runs.metrics.get('loose_recall_at_10')}"
    print(f"{name}@{stage.dataset}-{config.name}: {', '.join(runs.files)}; {recall} ({loose})")
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
