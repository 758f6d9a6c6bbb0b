"""Stage `retrieve`: one retrieval configuration on the test and F_G queries.

`--config <index>-<mode>` (see rulerag/retrieval/configs.py): `bm25-standard`, `bm25-rg`,
`minilm-standard`, `minilm-rg`, `minilm-ssft`, `minilm-rgft`, ... Rule-guided modes search
each (query, rule) pair as `q ∘ r` and unite the lists; the fine-tuned modes load the query
encoder trained by `train_retriever` and search the same corpus index (the document encoder
is frozen). Writes data/<dataset>/retrieval/<config>/:

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
import time
from pathlib import Path
from typing import Any

from pipeline_steps.common import (
    MODEL_CACHE,
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    numeric_metrics,
)
from rulerag.benchmark.sampling import sample_queries
from rulerag.io import atomic_open, write_json, write_parquet
from rulerag.retrieval.configs import (
    DEFAULT_ENCODERS,
    RUN_FG_FILENAME,
    RUN_FILENAME,
    RetrievalConfig,
    RetrievalPaths,
    parse_config,
)
from rulerag.retrieval.data import read_corpus, read_queries, read_rule_texts
from rulerag.retrieval.metrics import DEFAULT_KS, recall_at_k, recall_curve
from rulerag.retrieval.rule_guided import retrieve
from rulerag.tracking import TAG_STAGE_INSTANCE, stage_run


def open_searcher(config: RetrievalConfig, paths: RetrievalPaths, index_cfg: dict[str, Any]):
    """The BM25 back end of `index.sparse.backend`, or query encoder + FAISS index."""
    if config.sparse:
        from rulerag.retrieval.sparse import load_sparse

        sparse = index_cfg.get("sparse") or {}
        backend = sparse.get("backend", "bm25s")
        return load_sparse(backend, paths.index(config.index), int(sparse.get("threads", 2)))
    from rulerag.retrieval.dense import DenseIndex, DenseRetriever, FaissConfig
    from rulerag.retrieval.encoders import EncoderSpec, load_encoder

    specs = {**DEFAULT_ENCODERS, **(index_cfg.get("dense") or {})}
    spec = EncoderSpec.from_params(specs.get(config.index))
    faiss_config = FaissConfig.from_params(index_cfg.get("faiss"))
    index = DenseIndex.load(paths.index(config.index), faiss_config)
    if config.trained:
        query_name = str(paths.model(config.model_name or ""))
        if not Path(query_name).is_dir():
            raise SystemExit(f"retrieve: no trained query encoder at {query_name}")
    else:
        query_name = spec.query_name
    device = index_cfg.get("device", "auto")
    model = load_encoder(query_name, device, spec.max_length, MODEL_CACHE)
    normalize = bool(index.meta.get("normalize", spec.normalize))
    return DenseRetriever(model, index, normalize, spec.batch_size)


def main(argv: list[str] | None = None) -> int:
    parser = dataset_parser(__doc__ or "")
    parser.add_argument("--config", required=True, help="<index>-<mode>, e.g. minilm-rg")
    parser.add_argument("--params", type=Path, default=None, help="params file (params.yaml)")
    args = parser.parse_args(argv)
    dataset = args.dataset
    config = parse_config(args.config)
    params = load_params(args.params)
    cfg = params.get("retrieve") or {}
    index_cfg = params.get("index") or {}
    k = int(cfg.get("top_k", 50))
    ks = [int(x) for x in cfg.get("ks", DEFAULT_KS) if int(x) <= k]
    splits = list(cfg.get("splits", ["test", "f_g"]))
    unknown = sorted(set(splits) - {"test", "f_g"})
    if unknown:
        raise SystemExit(f"retrieve.splits: {unknown} not among test, f_g")
    seed = int(cfg.get("seed", 12))
    paths = RetrievalPaths(data_dir(dataset))
    out = paths.output(config.name)
    corpus = read_corpus(paths.corpus)
    contents = dict(zip(corpus.ids, corpus.contents, strict=True))
    rules = read_rule_texts(paths.rule_bank) if config.use_rules else {}
    logged = {"retrieve": cfg, "index": index_cfg, "config": config.name}
    # dvc.yaml runs the fine-tuned configurations as their own stage (they depend on a model)
    stage = "retrieve_finetuned" if config.trained else "retrieve"
    with stage_run(stage, dataset, project_dir=PROJECT_DIR, params=logged) as run:
        run.set_tags(
            {
                TAG_STAGE_INSTANCE: f"{stage}@{dataset}-{config.name}",
                "rulerag.config": config.name,
            }
        )
        searcher = open_searcher(config, paths, index_cfg)
        metrics: dict[str, Any] = {
            "dataset": dataset,
            "config": config.name,
            "index": config.index,
            "mode": config.mode,
            "top_k": k,
        }
        provenance = {"stage": stage, "dataset": dataset, "config": config.name, **logged}
        written = []
        for split in splits:
            source = paths.queries(split)
            if not source.is_file():
                print(f"retrieve@{dataset}: no {source.name}; skipped", file=sys.stderr)
                continue
            queries = read_queries(source)
            if split != "test" and cfg.get("f_g_queries") is not None:
                # The generator trains on a few hundred F_G samples in the CPU profile: retrieve
                # a seeded sample (train_generator draws only from queries the run holds).
                queries = list(sample_queries(queries, int(cfg["f_g_queries"]), seed))
            started = time.perf_counter()
            frame, plan = retrieve(
                queries, searcher, k, rules, config.use_rules, show_progress=True
            )
            seconds = time.perf_counter() - started
            answers = {q.qid: q.answers for q in queries}
            figures = recall_at_k(frame, contents, answers, ks)
            timing = {
                "queries": len(queries),
                "searches": len(plan.texts),
                "unknown_rules": plan.unknown_rules,
                "fallbacks": plan.fallbacks,
                "seconds": round(seconds, 2),
                "queries_per_second": round(len(queries) / seconds, 1) if seconds else 0.0,
            }
            name = RUN_FILENAME if split == "test" else RUN_FG_FILENAME
            write_parquet(out / name, frame, {**provenance, "split": split})
            written.append(name)
            rounded = {key: round(v, 4) for key, v in figures.items() if key != "queries"}
            if split == "test":
                metrics.update(rounded, **timing)
                curve = recall_curve(figures, config.name, ks)
                with atomic_open(out / "recall.csv") as handle:
                    curve.to_csv(handle, index=False)
            else:
                metrics[split] = {**rounded, **timing}
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
    sys.exit(main())
