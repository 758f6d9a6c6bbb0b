"""Stage `index`: data/<dataset>/benchmark/corpus.jsonl -> data/<dataset>/retrieval/index/<name>/.

`--index bm25` builds the bm25s index (always) and the Lucene index through Pyserini (when
`index.sparse.backend` is pyserini or `index.sparse.parity_check` is on), then checks that both
return the same top 10 on a sample of test queries with and without rules. Any other name is
a dense encoder of `index.dense`: the corpus is encoded once with its document encoder
(chunks cached in retrieval/cache/<name>/, so a killed run resumes) and indexed with FAISS
(`rulerag.retrieval.indexing`). Statistics (sizes, timings, parity) go to
retrieval/stats/index-<name>.json and MLflow.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

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
from rulerag.io import staged_dir, verify_output, write_json
from rulerag.layout import DataLayout
from rulerag.retrieval.configs import SPARSE_INDEXES
from rulerag.retrieval.indexing import build_index
from rulerag.retrieval.settings import index_settings
from rulerag.settings import SettingsError
from rulerag.tracking import TAG_STAGE_INSTANCE, stage_run


def main(argv: list[str] | None = None) -> int:
    parser = dataset_parser(__doc__ or "")
    parser.add_argument("--index", required=True, help="bm25 or a dense encoder of index.dense")
    parser.add_argument("--params", type=Path, default=None, help="params file (params.yaml)")
    args = parser.parse_args(argv)
    dataset, name = args.dataset, args.index
    section = load_params(args.params).get("index") or {}
    settings = index_settings(section)
    if name not in SPARSE_INDEXES:
        try:
            settings.encoder(name)
        except SettingsError as err:
            raise SettingsError(f"index@{name}: {err}") from None
    paths = DataLayout(data_dir(dataset))
    if not paths.corpus.is_file():
        raise InputError(f"index@{dataset}: no corpus at {paths.corpus}; run build_benchmark")
    verify_output(paths.corpus)  # Lucene reads the file itself, so check it first
    target = paths.index(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    paths.cache(name).mkdir(parents=True, exist_ok=True)
    with stage_run("index", dataset, project_dir=PROJECT_DIR, params={"index": section}) as run:
        run.set_tags({TAG_STAGE_INSTANCE: f"index@{dataset}-{name}", "rulerag.index": name})
        with staged_dir(target) as staging:
            started = time.perf_counter()
            stats = build_index(name, paths, settings, staging, MODEL_CACHE)
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
    sys.exit(run_stage(main))
