"""Retrieval speed on a built benchmark: encoding, dense and BM25 queries/s, bm25s vs Pyserini.

Run by hand, never as a test, after `build_benchmark` (and `index` for the dense encoders):

    .venv/bin/python benchmarks/bench_retrieval.py [--dataset icews14]
        [--encoders minilm,mpnet] [--encode-docs 2000] [--threads 0] [--skip-pyserini]

Measures, on data/<dataset>/:

* corpus encoding throughput (docs/s) of each document encoder on the first N corpus texts;
* dense retrieval over the whole test set with rules (every `q ∘ r` of every test query, as
  the `rg` configuration sends them; queries alone as `standard`): query encoding + FAISS
  search, in test queries per second and searches per second. Needs the encoder's index
  (retrieval/index/<encoder>/, from the `index` stage);
* BM25 with bm25s and with Lucene through Pyserini: index build time, queries/s for the same
  searches, and their top-10 agreement on every search (exact, and up to ties at place 10).

Prints a table and writes the figures as JSON to stdout's last line (`--json PATH` to a file).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="icews14")
    parser.add_argument("--encoders", default="minilm", help="comma-separated index.dense names")
    parser.add_argument("--encode-docs", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--skip-pyserini", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "unused")

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from rulerag.layout import DataLayout
    from rulerag.retrieval.data import read_corpus, read_queries, read_rule_texts
    from rulerag.retrieval.dense import DenseIndex, DenseRetriever, cpu_threads
    from rulerag.retrieval.encoders import encode, load_encoder
    from rulerag.retrieval.rule_guided import expand
    from rulerag.retrieval.settings import SparseSettings
    from rulerag.retrieval.sparse import BM25sIndex, PyseriniIndex, parity

    paths = DataLayout(ROOT / "data" / args.dataset)
    corpus = read_corpus(paths.corpus)
    queries = read_queries(paths.queries("test"))
    rules = read_rule_texts(paths.rule_bank)
    guided = expand(queries, rules, True).texts
    plain = [q.text for q in queries]
    results: dict = {
        "dataset": args.dataset,
        "machine": f"{platform.processor() or platform.machine()}, {cpu_threads()} cores, "
        f"torch threads {torch.get_num_threads()}, cuda {torch.cuda.is_available()}",
        "corpus": len(corpus),
        "test_queries": len(queries),
        "rg_searches": len(guided),
    }
    cache = ROOT / ".models"
    for name in [e for e in args.encoders.split(",") if e]:
        model = load_encoder(name, "auto", 64, cache)
        sample = list(corpus.contents[: args.encode_docs])
        encode(model, sample[:64], args.batch_size)  # warm-up
        _, seconds = timed(encode, model, sample, args.batch_size)
        entry: dict = {"encode_docs_per_s": round(len(sample) / seconds, 1)}
        entry["corpus_encode_min_estimate"] = round(
            len(corpus) / entry["encode_docs_per_s"] / 60, 1
        )
        if paths.index(name).is_dir():
            index = DenseIndex.load(paths.index(name))
            searcher = DenseRetriever(model, index, bool(index.meta.get("normalize", True)))
            for label, texts in (("standard", plain), ("rg", guided)):
                _, seconds = timed(searcher.search, texts, 50)
                entry[f"{label}_queries_per_s"] = round(len(queries) / seconds, 1)
                entry[f"{label}_searches_per_s"] = round(len(texts) / seconds, 1)
        else:
            entry["note"] = f"no index at {paths.index(name)}: run the index stage for qps"
        results[name] = entry
        del model

    config = SparseSettings(threads=max(1, cpu_threads()))
    bm25s_index, seconds = timed(BM25sIndex.build, corpus, config)
    sparse: dict = {"bm25s_build_s": round(seconds, 2)}
    for label, texts in (("standard", plain), ("rg", guided)):
        _, seconds = timed(bm25s_index.search, texts, 50)
        sparse[f"bm25s_{label}_queries_per_s"] = round(len(queries) / seconds, 1)
    if not args.skip_pyserini:
        with tempfile.TemporaryDirectory() as tmp:
            lucene, seconds = timed(PyseriniIndex.build, corpus, Path(tmp) / "lucene", config)
            sparse["pyserini_build_s"] = round(seconds, 2)
            for label, texts in (("standard", plain), ("rg", guided)):
                _, seconds = timed(lucene.search, texts, 50)
                sparse[f"pyserini_{label}_queries_per_s"] = round(len(queries) / seconds, 1)
            agreement = parity(bm25s_index, lucene, plain + guided, k=10)
            sparse["top10_agreement"] = {k: round(v, 6) for k, v in agreement.items()}
            lucene.close()
    results["bm25"] = sparse

    print(f"{args.dataset}: {len(corpus):,} docs, {len(queries):,} test queries, "
          f"{len(guided):,} (query, rule) searches; {results['machine']}")  # fmt: skip
    for name in [e for e in args.encoders.split(",") if e]:
        e = results[name]
        print(
            f"  {name:<8} encode {e['encode_docs_per_s']:>8} docs/s "
            f"(corpus ~{e['corpus_encode_min_estimate']} min); "
            f"standard {e.get('standard_queries_per_s', '-')} q/s; "
            f"rg {e.get('rg_queries_per_s', '-')} q/s "
            f"({e.get('rg_searches_per_s', '-')} searches/s)"
        )
    print(
        f"  bm25s    build {sparse['bm25s_build_s']} s; standard "
        f"{sparse['bm25s_standard_queries_per_s']} q/s; rg {sparse['bm25s_rg_queries_per_s']} q/s"
    )
    if "pyserini_build_s" in sparse:
        print(
            f"  pyserini build {sparse['pyserini_build_s']} s; standard "
            f"{sparse['pyserini_standard_queries_per_s']} q/s; rg "
            f"{sparse['pyserini_rg_queries_per_s']} q/s"
        )
        a = sparse["top10_agreement"]
        print(
            f"  top-10 agreement over {int(a['queries'])} searches: exact {a['same_topk']:.2%}, "
            f"up to ties {a['same_topk_up_to_ties']:.2%}, mean overlap {a['mean_overlap']:.2%}"
        )
    text = json.dumps(results)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
