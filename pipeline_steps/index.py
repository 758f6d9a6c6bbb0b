"""Stage `index`: data/<dataset>/benchmark/corpus.jsonl -> data/<dataset>/retrieval/index/<name>/.

`--index bm25` builds the bm25s index (always) and the Lucene index through Pyserini (when
`index.sparse.backend` is pyserini or `index.sparse.parity_check` is on), then checks that both
return the same top 10 on a sample of test queries with and without rules. Any other name is
a dense encoder of `index.dense`: the corpus is encoded once with its document encoder
(chunks cached in retrieval/cache/<name>/, so a killed run resumes) and indexed with FAISS.
Statistics (sizes, timings, parity) go to retrieval/stats/index-<name>.json and MLflow.
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
from rulerag.io import staged_dir, write_json
from rulerag.retrieval.configs import DEFAULT_ENCODERS, SPARSE_INDEXES, RetrievalPaths
from rulerag.retrieval.data import read_corpus, read_queries, read_rule_texts
from rulerag.tracking import TAG_STAGE_INSTANCE, stage_run


def sparse_config(cfg: dict[str, Any]):
    from rulerag.retrieval.sparse import BM25Config

    s = cfg.get("sparse") or {}
    return BM25Config(
        k1=float(s.get("k1", 0.9)),
        b=float(s.get("b", 0.4)),
        stemmer=s.get("stemmer", "porter"),
        threads=int(s.get("threads", 2)),
    )


def parity_texts(paths: RetrievalPaths, n: int, seed: int = 12) -> list[str]:
    """A sample of test queries, half alone and half as `q ∘ r` (what retrieval sends)."""
    import random

    from rulerag.retrieval.rule_guided import expand

    if not paths.queries("test").is_file() or n <= 0:
        return []
    queries = read_queries(paths.queries("test"))
    rules = read_rule_texts(paths.rule_bank) if paths.rule_bank.is_file() else {}
    rng = random.Random(seed)
    plain = [q.text for q in queries]
    guided = expand(queries, rules, True).texts
    return rng.sample(plain, min(len(plain), n // 2)) + rng.sample(
        guided, min(len(guided), n - n // 2)
    )


def build_sparse(paths: RetrievalPaths, cfg: dict[str, Any], staging: Path) -> dict[str, Any]:
    from rulerag.retrieval.sparse import BM25sIndex, PyseriniIndex, parity

    s = cfg.get("sparse") or {}
    config = sparse_config(cfg)
    corpus = read_corpus(paths.corpus)
    stats: dict[str, Any] = {"kind": "sparse", "docs": len(corpus), "backend": s.get("backend")}
    started = time.perf_counter()
    bm25s_index = BM25sIndex.build(corpus, config, show_progress=True)
    bm25s_index.save(staging / "bm25s")
    stats["bm25s_build_seconds"] = round(time.perf_counter() - started, 2)
    if s.get("backend") == "pyserini" or s.get("parity_check", True):
        started = time.perf_counter()
        lucene = PyseriniIndex.build(corpus, staging / "pyserini", config)
        stats["pyserini_build_seconds"] = round(time.perf_counter() - started, 2)
        texts = parity_texts(paths, int(s.get("parity_queries", 200)))
        if texts:
            stats["parity_top10"] = parity(bm25s_index, lucene, texts, k=10)
        lucene.close()
    return stats


def build_dense(
    name: str, paths: RetrievalPaths, cfg: dict[str, Any], staging: Path
) -> dict[str, Any]:
    import torch

    from rulerag.retrieval.dense import FaissConfig, build_dense_index, corpus_key
    from rulerag.retrieval.encoders import (
        DualEncoder,
        EncoderSpec,
        load_encoder,
        model_fingerprint,
        pick_device,
        resolve_model,
    )

    if int(cfg.get("threads") or 0) > 0:  # 0: torch's default (all cores)
        torch.set_num_threads(int(cfg["threads"]))
    specs = {**DEFAULT_ENCODERS, **(cfg.get("dense") or {})}
    if name not in specs:
        raise SystemExit(f"index@{name}: no encoder named {name!r} in index.dense ({list(specs)})")
    spec = EncoderSpec.from_params(specs[name])
    device = pick_device(cfg.get("device", "auto"))
    doc_model = resolve_model(spec.doc_name, MODEL_CACHE)
    corpus = read_corpus(paths.corpus)
    # Only the document side is needed to index; the query side is loaded by `retrieve`.
    doc = load_encoder(spec.doc_name, device, spec.max_length, MODEL_CACHE)
    encoder = DualEncoder(doc, doc, spec.normalize)
    key = corpus_key(
        model_fingerprint(doc_model),
        corpus.contents,
        max_length=spec.max_length,
        normalize=spec.normalize,
    )
    faiss_config = FaissConfig.from_params(cfg.get("faiss"))
    meta = {
        "encoder": name,
        "doc_model": spec.doc_name,
        "doc_model_path": doc_model,
        "query_model": spec.query_name,
        "normalize": spec.normalize,
        "max_length": spec.max_length,
        "cache_key": key,
    }
    index, timing = build_dense_index(
        encoder,
        corpus.ids,
        corpus.contents,
        faiss_config,
        batch_size=spec.batch_size,
        cache_dir=paths.cache(name) / key,
        meta=meta,
    )
    index.save(staging)
    rate = timing.docs_per_second
    return {
        "kind": "dense",
        "docs": len(corpus),
        "dim": index.dim,
        "device": device,
        "faiss": faiss_config.kind,
        "encoded_docs": timing.encoded_docs,
        "cached_docs": timing.cached_docs,
        "encode_seconds": round(timing.seconds, 2),
        "docs_per_second": None if rate is None else round(rate, 1),
        "model": spec.doc_name,
    }


def main(argv: list[str] | None = None) -> int:
    parser = dataset_parser(__doc__ or "")
    parser.add_argument("--index", required=True, help="bm25 or a dense encoder of index.dense")
    parser.add_argument("--params", type=Path, default=None, help="params file (params.yaml)")
    args = parser.parse_args(argv)
    dataset, name = args.dataset, args.index
    cfg = load_params(args.params).get("index") or {}
    paths = RetrievalPaths(data_dir(dataset))
    if not paths.corpus.is_file():
        print(f"index@{dataset}: no corpus at {paths.corpus}; run build_benchmark", file=sys.stderr)
        return 2
    target = paths.index(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    paths.cache(name).mkdir(parents=True, exist_ok=True)
    with stage_run("index", dataset, project_dir=PROJECT_DIR, params={"index": cfg}) as run:
        run.set_tags({TAG_STAGE_INSTANCE: f"index@{dataset}-{name}", "rulerag.index": name})
        with staged_dir(target) as staging:
            started = time.perf_counter()
            if name in SPARSE_INDEXES:
                stats = build_sparse(paths, cfg, staging)
            else:
                stats = build_dense(name, paths, cfg, staging)
            stats.update(dataset=dataset, index=name)
            stats["seconds"] = round(time.perf_counter() - started, 2)
        write_json(paths.index_stats(name), stats)
        run.log_metrics(numeric_metrics(stats))
        run.log_artifact(paths.index_stats(name))
    parity = stats.get("parity_top10")
    note = f", bm25s/Lucene top-10 agreement {parity['same_topk']:.1%}" if parity else ""
    print(f"index@{dataset}-{name}: {stats['docs']:,} docs in {stats['seconds']:.1f}s{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
