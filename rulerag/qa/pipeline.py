"""The `qa_rag` stage's work: an ordinary QA set equipped with a RuleQA bank's rules, searched
and answered by grid rows, laid out as a RuleQA dataset under data/<name>/.

It is a small pipeline of its own, and its steps read what the earlier ones wrote (the grid's
`run_row` reads benchmark/test.jsonl and the retrieval runs from the dataset's folder), so each
step writes its files as it goes, every folder staged and replaced whole (`io.staged_outputs`):

1. the benchmark (corpus.jsonl, test.jsonl, an empty f_g.jsonl, stats.json) and the bank,
2. the `standard` and `rg` retrieval runs of `qa.retriever`,
3. each of `qa.rows` answered (generation/<row>/predictions.jsonl, metrics.json),
4. qa/metrics.json and qa/results.md (the rows, the paired test, the paper's Table 3).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rulerag.benchmark.settings import RuleSelectionSettings
from rulerag.errors import InputError
from rulerag.evaluation.claims import PAPER_CLAIMS, claims_table, claims_to_markdown
from rulerag.generation.grid import run_row
from rulerag.generation.grid_names import grid_config
from rulerag.generation.settings import GenerationSettings
from rulerag.io import (
    atomic_open,
    read_parquet,
    staged_outputs,
    write_json,
    write_jsonl,
    write_parquet,
)
from rulerag.kg.ingest import MIRROR_ENV
from rulerag.layout import DataLayout
from rulerag.qa.build import build_qa_benchmark, corpus_of, qa_report, retrieval_runs, union_bank
from rulerag.qa.reader import read_qa_set
from rulerag.qa.settings import QASettings
from rulerag.retrieval.rule_guided import rule_query_texts
from rulerag.retrieval.settings import IndexSettings, RetrieveSettings

__all__ = ["QARun", "answer_qa_set", "qa_folder"]


@dataclass(frozen=True)
class QARun:
    """What `answer_qa_set` wrote, for the stage's log and MLflow."""

    stats: dict[str, Any]  # the benchmark's (questions, rules matched, ...) and its source
    rows: dict[str, dict[str, Any]]  # row -> its metrics.json


def qa_folder(configured: str | None, name: str, mirror: str | None = None) -> Path:
    """`qa.dir`/<name>, else <mirror>/qa/<name> (the local mirror, `RULERAG_DATA_DIR`)."""
    mirror = mirror if mirror is not None else os.environ.get(MIRROR_ENV)
    root = configured or (os.path.join(mirror, "qa") if mirror else None)
    if not root:
        raise InputError(f"qa_rag@{name}: set qa.dir or {MIRROR_ENV} (its qa/ holds QA sets)")
    return Path(root) / name


def answer_qa_set(
    layout: DataLayout,
    bank_layout: DataLayout,
    qa: QASettings,
    generation: GenerationSettings,
    rule_selection: RuleSelectionSettings,
    retrieve: RetrieveSettings,
    index: IndexSettings,
    *,
    model_cache: Path,
    on_row: Callable[[str, Mapping[str, Any]], None] | None = None,
) -> QARun:
    """The steps of the module docstring for the QA set `layout.dataset`; `bank_layout`: the
    RuleQA dataset (`qa.rule_bank`) whose mined bank gives the rules; `on_row(row, metrics)`
    is called as each row is answered (the stage logs it to MLflow)."""
    from rulerag.qa.searchers import in_memory_searcher
    from rulerag.rules.selection import minilm_encoder

    name = layout.dataset
    generation = replace(generation, retriever=qa.retriever or generation.retriever)
    if not bank_layout.rule_bank.is_file():
        raise InputError(
            f"qa_rag@{name}: {bank_layout.rule_bank} not found: run mine_rules@{qa.rule_bank}"
        )
    banks = {qa.rule_bank: read_parquet(bank_layout.rule_bank)}
    questions, documents, corpus_source = read_qa_set(qa_folder(qa.dir, name))
    benchmark = build_qa_benchmark(
        questions,
        documents,
        union_bank(banks),
        minilm_encoder(rule_selection.encoder),
        top_n=rule_selection.top_n,
        threshold=rule_selection.threshold,
    )
    stats = {**benchmark.stats, "corpus_from": corpus_source}
    with staged_outputs(layout.benchmark, "qa_rag") as staging:
        write_jsonl(staging / "corpus.jsonl", benchmark.corpus)
        write_jsonl(staging / "test.jsonl", benchmark.test)
        write_jsonl(staging / "f_g.jsonl", [])  # no fine-tuning set: API rows are zero-shot
        write_json(staging / "stats.json", stats)
    layout.rules_dir.mkdir(parents=True, exist_ok=True)
    write_parquet(layout.rule_bank, benchmark.bank, {"source": qa.rule_bank})

    searcher = in_memory_searcher(corpus_of(benchmark), generation.retriever, index, model_cache)
    bank_texts = dict(zip(benchmark.bank["rule_id"], benchmark.bank["text"], strict=True))
    texts = rule_query_texts(bank_texts, retrieve.rule_query)
    for mode, frame in retrieval_runs(benchmark, searcher, retrieve.top_k, texts).items():
        config = f"{generation.retriever}-{mode}"
        layout.output(config).mkdir(parents=True, exist_ok=True)
        write_parquet(layout.run(config), frame, {"qa": name, "mode": mode})

    metrics, per_query = {}, {}
    for row in qa.rows:
        result = run_row(layout.root, name, grid_config(row, generation), generation)
        with staged_outputs(layout.row(row), "qa_rag") as staging:
            write_jsonl(staging / "predictions.jsonl", result.records)
            write_json(staging / "metrics.json", result.metrics)
        metrics[row] = result.metrics
        per_query[row] = {r["qid"]: r["em"] for r in result.records}
        if on_row is not None:
            on_row(row, result.metrics)

    claims = claims_to_markdown(claims_table(per_query, PAPER_CLAIMS))
    layout.qa.mkdir(parents=True, exist_ok=True)
    write_json(layout.qa / "metrics.json", {"stats": stats, "rows": metrics})
    with atomic_open(layout.qa / "results.md") as handle:
        handle.write(qa_report(name, stats, metrics, claims))
    return QARun(stats, metrics)
