"""How one BM25 search's cost grows with the corpus: bm25s against Lucene (Pyserini).

Run by hand, never as a test, after `bench_scale.py` has run `index` at the factors asked
(each project copy's BM25 index holds both back ends: `index.sparse.parity_check` builds the
Lucene one beside bm25s's):

    .venv/bin/python benchmarks/bench_bm25_growth.py --work /work/bench-scale \
        [--factors 1 4 16] [--queries 2000] [--seed 0]

Why: `retrieve` grew with the square of the graph on the scale curve (the test set grows with
the graph, and bm25s scores every document for every query). This measures the second factor
alone: the same sample of each factor's RuleQA test queries searched (top 50, one thread, the
index loaded first) with each back end, in milliseconds a query, with the growth exponent of
each (log-log slope over the factors) and their top-10 agreement (`parity`: the share of
queries with the same ten documents, and the mean share of the ten both return; Lucene keeps
document lengths lossily past a few terms, which moves its scores by about 1 % on the grown
graphs' longer documents, so near-ties may cut differently).
Prints a Markdown table and a JSON line per factor.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_scale import exponent, slope  # noqa: E402


def sample_queries(test_file: Path, count: int, seed: int) -> list[str]:
    """`count` test queries' texts, the seeded sample in file order the grid draws
    (`rulerag.benchmark.sampling.sample_queries`)."""
    from rulerag.benchmark import sampling
    from rulerag.io import read_jsonl

    records = read_jsonl(test_file)
    return [record["query"] for record in sampling.sample_queries(records, count, seed)]


def per_query_ms(index, texts: list[str], k: int = 50) -> float:
    """Milliseconds a text, after a warm-up search (the JVM's first calls are slow)."""
    index.search(texts[:20], k)
    started = time.perf_counter()
    index.search(texts, k)
    return (time.perf_counter() - started) / len(texts) * 1e3


def measure(work: Path, factor: int, count: int, seed: int) -> dict[str, float]:
    from rulerag.layout import DataLayout
    from rulerag.retrieval.sparse import BM25sIndex, PyseriniIndex, parity

    paths = DataLayout.of(work / f"project-{factor}" / "data", f"scale{factor}")
    folder = paths.index("bm25")
    texts = sample_queries(paths.benchmark / "test.jsonl", count, seed)
    bm25s = BM25sIndex.load(folder / "bm25s", threads=1)
    lucene = PyseriniIndex.load(folder / "pyserini", threads=1)
    agreement = parity(bm25s, lucene, texts, k=10)
    return {
        "factor": factor,
        "docs": len(bm25s.corpus_ids),
        "queries": len(texts),
        "bm25s_ms": round(per_query_ms(bm25s, texts), 2),
        "lucene_ms": round(per_query_ms(lucene, texts), 2),
        "same_top10": round(agreement["same_topk"], 3),
        "top10_overlap": round(agreement["mean_overlap"], 3),
    }


def table(rows: list[dict[str, float]]) -> str:
    lines = [
        "| factor | documents | bm25s ms/query | Lucene ms/query | same top 10 | top-10 overlap |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| ×{row['factor']} | {row['docs']:,} | {row['bm25s_ms']:.2f} | "
            f"{row['lucene_ms']:.2f} | {row['same_top10']:.1%} | {row['top10_overlap']:.1%} |"
        )
    docs = [float(r["docs"]) for r in rows]
    fitted = [slope(docs, [float(r[key]) for r in rows]) for key in KEYS]
    exponents = [exponent(value) if value is not None else "–" for value in fitted]
    lines.append(f"| exponent (in documents) | | {exponents[0]} | {exponents[1]} | | |")
    return "\n".join(lines)


KEYS = ("bm25s_ms", "lucene_ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="bench_scale.py's --work")
    parser.add_argument("--factors", type=int, nargs="*", default=[1, 4, 16])
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault("OPENAI_API_KEY", "unused")  # Pyserini refuses to import without it
    rows = []
    for factor in args.factors:
        rows.append(measure(args.work, factor, args.queries, args.seed))
        print(json.dumps(rows[-1]), flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
