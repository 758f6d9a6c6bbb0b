"""Rule retrieval on a RuleQA benchmark: the bank as the library, test queries with gold rules.

A query's gold rules are the bank rules whose head is its relation: RuleRAG's own matching
(`head` selection), so that row is the oracle (Recall@k is 100 whenever the bank has a rule
for the relation) and every other method is measured against it without seeing the relation.
Self-induction demonstrations are F_R items (a query and a rule of its relation), never test
queries.

`evaluate_rule_retrieval` is the `rule_retrieval_eval` stage: every combination of
`rule_retrieval` on the dataset's test queries beside RuleRAG's own selections, with the
paper's claims as paired tests (`RuleRetrievalEvaluation` writes it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rulerag.benchmark.settings import RuleSelectionSettings
from rulerag.generation.settings import ApiSettings
from rulerag.io import atomic_open, read_jsonl, read_parquet, write_json, write_parquet
from rulerag.layout import DataLayout
from rulerag.rule_retrieval.claims import claims_markdown, rule_claims
from rulerag.rule_retrieval.experiment import (
    RuleRetrievalTask,
    library_analysis,
    results_markdown,
    run_evaluation,
)
from rulerag.rule_retrieval.library import RuleLibrary
from rulerag.rule_retrieval.llm import LLMPool
from rulerag.rule_retrieval.plots import plot_recall
from rulerag.rule_retrieval.search import Analysis
from rulerag.rule_retrieval.settings import RuleRetrievalSettings

__all__ = [
    "RuleRetrievalEvaluation",
    "evaluate_rule_retrieval",
    "reference_rows",
    "ruleqa_task",
]


def ruleqa_task(
    layout: DataLayout, queries: int | None, shots: int, seed: int
) -> tuple[RuleRetrievalTask, pd.DataFrame, list[dict[str, Any]]]:
    """(the task, the bank, the sampled test records) for one dataset's files."""
    bank = read_parquet(layout.rule_bank)
    relations = read_parquet(layout.relations)
    names = dict(zip(relations["id"], relations["name"], strict=True))
    library = RuleLibrary.from_bank(bank, names)
    test = read_jsonl(layout.queries("test"))
    rng = random.Random(seed)
    if queries is not None and queries < len(test):
        test = [test[i] for i in sorted(rng.sample(range(len(test)), queries))]
    by_head: dict[int, set[str]] = {}
    for rule_id, head in zip(bank["rule_id"], bank["head_relation"], strict=True):
        by_head.setdefault(int(head), set()).add(str(rule_id))
    items = [r for r in read_jsonl(layout.queries("f_r")) if r.get("rule_text")]
    demos = rng.sample(items, min(shots, len(items)))
    task = RuleRetrievalTask(
        library=library,
        qids=tuple(str(r["qid"]) for r in test),
        queries=tuple(str(r["query"]) for r in test),
        gold=tuple(frozenset(by_head.get(int(r["relation"]), ())) for r in test),
        shots=tuple((str(d["query"]), str(d["rule_text"])) for d in demos),
    )
    return task, bank, test


def reference_rows(
    task: RuleRetrievalTask,
    bank: pd.DataFrame,
    test: list[dict[str, Any]],
    top_k: int,
    similarity: tuple[int, float] | None,
) -> list[dict[str, Any]]:
    """RuleRAG's own selections as rows beside the retrieval methods: `head` (the oracle) and,
    given (N, θ), `similarity` (Sentence-BERT over the bank's texts, as build_benchmark)."""
    from rulerag.rules.selection import minilm_encoder, select_by_head, select_by_similarity

    rows = [
        {"method": "head", "ranked": select_by_head([r["relation"] for r in test], bank, top_k)}
    ]
    if similarity is not None:
        top_n, threshold = similarity
        ranked = select_by_similarity(task.queries, bank, minilm_encoder(), top_n, threshold)
        rows.append({"method": "similarity", "ranked": ranked})
    return rows


@dataclass(frozen=True)
class RuleRetrievalEvaluation:
    """What `rule_retrieval_eval` writes: the table (one row per combination), the rules each
    chose per query, the paper's claims as paired tests, the figures. `analysis` (BM25's
    text analysis that ran) is for the stage's log and MLflow run; it is not written, so the
    files stay what they were before `auto` chose it."""

    title: str
    ks: tuple[int, ...]
    results: pd.DataFrame
    selections: pd.DataFrame
    claims: pd.DataFrame
    metrics: dict[str, Any]
    analysis: Analysis | None = None

    def markdown(self) -> str:
        """results.md: the table in the paper's Table 1 layout, the claims under it."""
        k = max(self.ks)
        return results_markdown(self.results, self.title, self.ks) + claims_markdown(self.claims, k)

    def write(self, folder: Path) -> None:
        """results.csv, results.md, claims.csv, selections.parquet, recall.png and metrics.json
        into `folder` (a staging folder: `io.staged_outputs`)."""
        self.results.to_csv(folder / "results.csv", index=False)
        with atomic_open(folder / "results.md") as handle:
            handle.write(self.markdown())
        self.claims.to_csv(folder / "claims.csv", index=False)
        write_parquet(
            folder / "selections.parquet", self.selections, {"stage": "rule_retrieval_eval"}
        )
        plot_recall(self.results, max(self.ks), folder / "recall.png", self.title)
        write_json(folder / "metrics.json", self.metrics)


def evaluate_rule_retrieval(
    settings: RuleRetrievalSettings,
    selection: RuleSelectionSettings,
    api: ApiSettings,
    layout: DataLayout,
    model_cache: Path | None,
) -> RuleRetrievalEvaluation:
    """The `rule_retrieval_eval` stage on one dataset's files: a seeded sample of the test
    queries (`settings.queries`), every method x retriever x query form x rule form of
    `settings` beside RuleRAG's `head` selection and, with `settings.similarity`, its
    Sentence-BERT one (N and θ of `selection`, as build_benchmark selects). The LLM
    (`settings.llm`; an API one at `api`'s endpoint) answers through
    `layout.rule_llm_cache`, so a rerun sends no prompt."""
    task, bank, test = ruleqa_task(layout, settings.queries, settings.shots, settings.seed)
    similarity = (selection.top_n, selection.threshold) if settings.similarity else None
    llms = LLMPool(settings.llm, layout.rule_llm_cache, model_cache=model_cache, api=api)
    extra = reference_rows(task, bank, test, settings.top_k, similarity)
    analysis = library_analysis(settings.analyzer, task.library)
    results, picked = run_evaluation(
        task, settings, llms, model_cache=model_cache, extra_rows=extra, analysis=analysis
    )
    k = max(settings.ks)
    claims = rule_claims(picked, task.qids, task.gold, k)
    title = (
        f"{layout.dataset}: rule retrieval, Recall@k (%) of the gold rules, "
        f"{len(test)} test queries"
    )
    metrics = {
        "queries": len(test),
        "library": len(task.library),
        "llm": f"{settings.llm.kind}:{settings.llm.model}",
        "llm_calls": llms.calls,
        "rows": results.to_dict("records"),
    }
    return RuleRetrievalEvaluation(
        title, tuple(settings.ks), results, picked, claims, metrics, analysis
    )
