"""Stage `retrieve`: one retrieval configuration on the test and F_G queries.

`--config <index>-<mode>` (see rulerag/retrieval/configs.py): `bm25-standard`, `bm25-rg`,
`minilm-standard`, `minilm-rg`, `minilm-ssft`, `minilm-rgft`, ... Rule-guided modes search
each (query, rule) pair as `q ∘ r` and unite the lists; the fine-tuned modes load the query
encoder trained by `train_retriever` and search the same corpus index (the document encoder
is frozen; `rulerag.retrieval.runs`). Writes data/<dataset>/retrieval/<config>/:

    run.parquet       test queries: qid, rule, rank, doc_id, score (per-rule top-k lists)
    run_fg.parquet    the same for F_G (the generator's training data needs it); a seeded
                      sample of `retrieve.f_g_queries` of them (null: all)
    metrics.json      recall_at_{1,2,5,10,20,50} (strict: united list cut at k), the paper's
                      loose_recall_at_k (answer anywhere in the per-rule top-k union), F_G
                      recall, timings
    recall.csv        Recall@k over k (DVC plot)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pipeline_steps.common import (
    MODEL_CACHE,
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    numeric_metrics,
    run_stage,
)
from rulerag.errors import InputError
from rulerag.io import atomic_open, write_json, write_parquet
from rulerag.layout import RUN_FG_FILENAME, RUN_FILENAME, DataLayout
from rulerag.retrieval.configs import parse_config, retrieve_settings
from rulerag.retrieval.data import read_corpus, read_queries, read_rule_texts
from rulerag.retrieval.metrics import recall_curve
from rulerag.retrieval.rule_guided import rule_query_texts
from rulerag.retrieval.runs import open_searcher, run_split
from rulerag.retrieval.settings import index_settings
from rulerag.tracking import TAG_STAGE_INSTANCE, stage_run


def main(argv: list[str] | None = None) -> int:
    parser = dataset_parser(__doc__ or "")
    parser.add_argument("--config", required=True, help="<index>-<mode>, e.g. minilm-rg")
    parser.add_argument("--params", type=Path, default=None, help="params file (params.yaml)")
    args = parser.parse_args(argv)
    dataset = args.dataset
    config = parse_config(args.config)
    params = load_params(args.params)
    section = params.get("retrieve") or {}
    index_section = params.get("index") or {}
    settings = retrieve_settings(section)
    index_cfg = index_settings(index_section)
    paths = DataLayout(data_dir(dataset))
    out = paths.output(config.name)
    corpus = read_corpus(paths.corpus)
    contents = dict(zip(corpus.ids, corpus.contents, strict=True))
    rules = {}
    if config.use_rules:
        rules = rule_query_texts(read_rule_texts(paths.rule_bank), settings.rule_query)
    logged = {"retrieve": section, "index": index_section, "config": config.name}
    # dvc.yaml runs the fine-tuned configurations as their own stage (they depend on a model)
    stage = "retrieve_finetuned" if config.trained else "retrieve"
    with stage_run(stage, dataset, project_dir=PROJECT_DIR, params=logged) as run:
        run.set_tags(
            {
                TAG_STAGE_INSTANCE: f"{stage}@{dataset}-{config.name}",
                "rulerag.config": config.name,
            }
        )
        try:
            searcher = open_searcher(config, paths, index_cfg, MODEL_CACHE)
        except FileNotFoundError as err:
            raise InputError(f"retrieve@{dataset}: {err}") from None
        metrics: dict[str, Any] = {
            "dataset": dataset,
            "config": config.name,
            "index": config.index,
            "mode": config.mode,
            "top_k": settings.top_k,
        }
        provenance = {"stage": stage, "dataset": dataset, "config": config.name, **logged}
        written = []
        for split in settings.splits:
            source = paths.queries(split)
            if not source.is_file():
                print(f"retrieve@{dataset}: no {source.name}; skipped", file=sys.stderr)
                continue
            result = run_split(
                split, read_queries(source), searcher, settings, rules, config.use_rules, contents
            )
            name = RUN_FILENAME if split == "test" else RUN_FG_FILENAME
            write_parquet(out / name, result.frame, {**provenance, "split": split})
            written.append(name)
            if split == "test":
                metrics.update(result.rounded, **result.timing)
                curve = recall_curve(result.figures, config.name, settings.search_ks)
                with atomic_open(out / "recall.csv") as handle:
                    curve.to_csv(handle, index=False)
            else:
                metrics[split] = {**result.rounded, **result.timing}
        write_json(out / "metrics.json", metrics)
        run.log_metrics(numeric_metrics(metrics))
        run.log_artifact(out / "metrics.json")
        if (out / "recall.csv").is_file():
            run.log_artifact(out / "recall.csv")
    r10 = metrics.get("recall_at_10")
    loose = metrics.get("loose_recall_at_10")
    print(f"{stage}@{dataset}-{config.name}: {', '.join(written)}; Recall@10 {r10} (loose {loose})")
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
