"""Stage `index`: data/<dataset>/benchmark/corpus.jsonl -> data/<dataset>/retrieval/index/<name>/.

`--index bm25` builds the bm25s index (always) and the Lucene index through Pyserini (when
`index.sparse.backend` is pyserini or `index.sparse.parity_check` is on), then checks that both
return the same top 10 on a sample of test queries with and without rules. Any other name is
a dense encoder of `index.dense`: the corpus is encoded once with its document encoder
(chunks cached in retrieval/cache/<name>/, so a killed run resumes) and indexed with FAISS
(`rulerag.retrieval.indexing.index_corpus`). Statistics (sizes, parity) go to
retrieval/stats/index-<name>.json and MLflow, this run's timings and cache use to MLflow and
the log only (a rerun rewrites the same file).
"""

from __future__ import annotations

import sys

from pipeline_steps.common import numeric_metrics, run_stage, stage_inputs
from rulerag.io import write_json
from rulerag.retrieval.indexing import index_corpus


def main(argv: list[str] | None = None) -> int:
    stage = stage_inputs("index", argv, __doc__, index="bm25 or a dense encoder of index.dense")
    name, layout = stage.args.index, stage.layout
    logged = {"index": stage.params.section_values("index")}
    with stage.track(logged, instance=f"-{name}", tags={"rulerag.index": name}) as run:
        built = index_corpus(name, layout, stage.params.index, stage.model_cache)
        write_json(layout.index_stats(name), built.stats)
        run.log_metrics(numeric_metrics(built.metrics()))
        run.log_artifact(layout.index_stats(name))
    docs, seconds = built.stats["docs"], built.run_figures["seconds"]
    parity = built.stats.get("parity_top10")
    note = f", bm25s/Lucene top-10 agreement {parity['same_topk']:.1%}" if parity else ""
    print(f"index@{stage.dataset}-{name}: {docs:,} docs in {seconds:.1f}s{note}")
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
