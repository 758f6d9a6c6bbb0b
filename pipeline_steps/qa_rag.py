"""Stage `qa_rag`: an ordinary QA set (ASQA, PopQA, HotpotQA, NQ...) answered with RuleQA's rules.

Reads the set from `<qa.dir or $RULERAG_DATA_DIR/qa>/<name>/` (`rulerag.qa.reader`), gives each
question the RuleQA bank rules whose Sentence-BERT similarity passes θ (at most N: the knobs of
build_benchmark.rule_selection, the paper's N = 3, θ = 0.7), searches the corpus with the
question alone and with question ∘ rule (`qa.retriever`), and answers with the `qa.rows` of
the grid (`rulerag.generation.grid.run_row`, the same prompts and scoring as RuleQA). Writes
data/<name>/benchmark/, rules/bank.parquet, retrieval/<retriever>-{standard,rg}/run.parquet,
generation/<row>/{predictions.jsonl,metrics.json} and qa/{metrics.json,results.md}.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
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
from rulerag.benchmark.settings import build_benchmark_settings
from rulerag.errors import InputError
from rulerag.evaluation.claims import PAPER_CLAIMS, claims_table, claims_to_markdown
from rulerag.generation.config import checked_generation_settings, grid_config
from rulerag.generation.generators import passive_openmp
from rulerag.generation.grid import run_row
from rulerag.io import atomic_open, staged_outputs, write_json, write_jsonl, write_parquet
from rulerag.kg.ingest import MIRROR_ENV
from rulerag.qa.build import (
    build_qa_benchmark,
    check_qa_rows,
    corpus_of,
    qa_report,
    retrieval_runs,
    union_bank,
)
from rulerag.qa.reader import read_qa_set
from rulerag.qa.settings import qa_settings
from rulerag.retrieval.configs import retrieve_settings
from rulerag.retrieval.rule_guided import rule_query_texts
from rulerag.retrieval.settings import index_settings
from rulerag.tracking import stage_run


def qa_folder(configured: str | None, name: str) -> Path:
    """`qa.dir`/<name>, else <RULERAG_DATA_DIR>/qa/<name> (the local mirror)."""
    mirror = os.environ.get(MIRROR_ENV)
    root = configured or (os.path.join(mirror, "qa") if mirror else None)
    if not root:
        raise InputError(f"qa_rag@{name}: set qa.dir or {MIRROR_ENV} (its qa/ holds QA sets)")
    return Path(root) / name


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    parser = dataset_parser(__doc__ or "")
    parser.add_argument("--params", type=Path, default=None, help="params file (params.yaml)")
    args = parser.parse_args(argv)
    name = args.dataset
    params = load_params(args.params)
    qa = qa_settings(params.get("qa"))
    generation = checked_generation_settings(params)
    generation = replace(generation, retriever=qa.retriever or generation.retriever)
    check_qa_rows(qa.rows, generation.grid)
    rule_selection = build_benchmark_settings(params.get("build_benchmark")).rule_selection
    retrieve = retrieve_settings(params.get("retrieve"))
    index = index_settings(params.get("index"))
    import pandas as pd

    bank_file = data_dir(qa.rule_bank) / "rules" / "bank.parquet"
    if not bank_file.is_file():
        raise InputError(f"qa_rag@{name}: {bank_file} not found: run mine_rules@{qa.rule_bank}")
    banks = {qa.rule_bank: pd.read_parquet(bank_file)}
    questions, documents, corpus_source = read_qa_set(qa_folder(qa.dir, name))
    base = data_dir(name)
    logged = {
        "qa": params.get("qa"),
        "build_benchmark": {"rule_selection": params["build_benchmark"].get("rule_selection")},
        "generation": {"retriever": generation.retriever, "model": generation.model},
    }
    with stage_run("qa_rag", name, project_dir=PROJECT_DIR, params=logged) as run:
        from rulerag.qa.searchers import in_memory_searcher
        from rulerag.rules.selection import minilm_encoder

        benchmark = build_qa_benchmark(
            questions,
            documents,
            union_bank(banks),
            minilm_encoder(rule_selection.encoder),
            top_n=rule_selection.top_n,
            threshold=rule_selection.threshold,
        )
        stats = {**benchmark.stats, "corpus_from": corpus_source}
        with staged_outputs(base / "benchmark", "qa_rag") as staging:
            write_jsonl(staging / "corpus.jsonl", benchmark.corpus)
            write_jsonl(staging / "test.jsonl", benchmark.test)
            write_jsonl(staging / "f_g.jsonl", [])  # no fine-tuning set: API rows are zero-shot
            write_json(staging / "stats.json", stats)
        (base / "rules").mkdir(parents=True, exist_ok=True)
        write_parquet(base / "rules" / "bank.parquet", benchmark.bank, {"source": qa.rule_bank})
        searcher = in_memory_searcher(
            corpus_of(benchmark), generation.retriever, index, MODEL_CACHE
        )
        bank_texts = dict(zip(benchmark.bank["rule_id"], benchmark.bank["text"], strict=True))
        texts = rule_query_texts(bank_texts, retrieve.rule_query)
        for mode, frame in retrieval_runs(benchmark, searcher, retrieve.top_k, texts).items():
            folder = base / "retrieval" / f"{generation.retriever}-{mode}"
            folder.mkdir(parents=True, exist_ok=True)
            write_parquet(folder / "run.parquet", frame, {"qa": name, "mode": mode})
        metrics, per_query = {}, {}
        for row in qa.rows:
            result = run_row(base, name, grid_config(row, generation), generation)
            with staged_outputs(base / "generation" / row, "qa_rag") as staging:
                write_jsonl(staging / "predictions.jsonl", result.records)
                write_json(staging / "metrics.json", result.metrics)
            metrics[row] = result.metrics
            per_query[row] = {r["qid"]: r["em"] for r in result.records}
            run.log_metrics(numeric_metrics(result.metrics, f"{row}."))
        claims = claims_to_markdown(claims_table(per_query, PAPER_CLAIMS))
        out = base / "qa"
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "metrics.json", {"stats": stats, "rows": metrics})
        with atomic_open(out / "results.md") as handle:
            handle.write(qa_report(name, stats, metrics, claims))
        run.log_metrics(numeric_metrics(stats))
        run.log_artifact(out / "results.md")
        run.log_artifact(out / "metrics.json")
    print(
        f"qa_rag@{name}: {stats['questions']} questions, {stats['questions_with_rules']} with "
        "rules; EM " + ", ".join(f"{r} {100 * m['em']:.1f}" for r, m in metrics.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
