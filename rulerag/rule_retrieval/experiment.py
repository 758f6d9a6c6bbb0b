"""The rule-retrieval evaluation: every method x retriever x query form x rule form on one set
of queries with gold rules, in the layout of the SIAR + R³ paper's Table 1.

One LLM serves all combinations through the disk cache: the self-induced rule of a query is
generated once and reused by every retriever and SIAR variant; an R³ prompt is paid once per
distinct candidate list. Rows report Recall@k (percent), the LLM prompts a method sent
(cache hits not counted, so a rerun shows 0) and its seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rulerag import markdown
from rulerag.benchmark.settings import RuleSelectionSettings
from rulerag.rule_retrieval.evaluate import recall_at_k
from rulerag.rule_retrieval.library import RuleLibrary
from rulerag.rule_retrieval.llm import CachedLLM
from rulerag.rule_retrieval.methods import select_rules, uses_llm
from rulerag.rule_retrieval.search import Analysis, build_rule_index, choose_analysis
from rulerag.rule_retrieval.settings import RuleRetrievalSettings

__all__ = [
    "RuleRetrievalTask",
    "Shot",
    "flat_metrics",
    "label",
    "library_analysis",
    "results_markdown",
    "run_evaluation",
]


Shot = tuple[str, str]  # a self-induction demonstration: (query, its rule's text)


@dataclass(frozen=True)
class RuleRetrievalTask:
    """Queries with their gold rules over a library, and self-induction demonstrations:
    `shots` for every query, or `query_shots`, one list per query (drawn from the test
    questions without the query's own gold rules, `rulebench.held_out_shots`), which then
    replaces `shots`. `notes` say where the shots came from when that is not the usual
    split."""

    library: RuleLibrary
    qids: tuple[str, ...]
    queries: tuple[str, ...]
    gold: tuple[frozenset[str], ...]
    shots: tuple[Shot, ...] = ()
    query_shots: tuple[tuple[Shot, ...], ...] | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.query_shots is not None and len(self.query_shots) != len(self.queries):
            raise ValueError("rule retrieval task: query_shots must give one list per query")


def label(method: str, query_form: str | None) -> str:
    """The row name the paper's tables use."""
    form = {"si": "w/ SI", "si_input": "w/ SI + input"}.get(query_form or "", "")
    return {
        "vanilla": "vanilla retrieval",
        "vanilla_r3": "vanilla retrieval + R³",
        "siar": f"+ SIAR ({form})",
        "siar_r3": f"+ SIAR-R³ ({form})",
        "similarity": "RuleRAG similarity (θ, N)",
        "head": "RuleRAG head relation (oracle)",
    }[method]


def run_evaluation(
    task: RuleRetrievalTask,
    settings: RuleRetrievalSettings,
    llm_for: Callable[[str], CachedLLM] | None,
    *,
    model_cache: Path | None = None,
    extra_rows: Sequence[dict[str, Any]] = (),
    analysis: Analysis | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(results: one row per combination, selections: one row per query and combination).

    `llm_for(purpose)` gives the cached LLM for `"induce"` or `"rank"` (they differ in their
    token budget); None when no method needs one. `extra_rows` are selections made elsewhere
    (RuleRAG's own) to report beside: dicts with `method` and `ranked`. `analysis`: BM25's
    text analysis as the caller chose it (`library_analysis`, to report it); None chooses it
    here from `settings.analyzer`, once for the whole library (both rule forms).
    """
    analysis = analysis or library_analysis(settings.analyzer, task.library)
    ks = list(settings.ks)
    rows: list[dict[str, Any]] = []
    picked: list[dict[str, Any]] = []

    def record(retriever: str, rule_form: str, name: str, form: str | None, ranked, info) -> None:
        recall = recall_at_k(ranked, task.gold, ks)
        rows.append(
            {
                "retriever": retriever,
                "rule_form": rule_form,
                "method": name,
                "query_form": form,
                "row": label(name, form),
                **{f"R@{k}": round(100 * recall[k], 2) for k in ks},
                **info,
            }
        )
        for qid, rules in zip(task.qids, ranked, strict=True):
            picked.append(
                {
                    "qid": qid,
                    "retriever": retriever,
                    "rule_form": rule_form,
                    "method": name,
                    "query_form": form or "",
                    "rule_ids": list(rules),
                }
            )

    for extra in extra_rows:
        record("-", "natural", extra["method"], None, extra["ranked"], {"llm_calls": 0})
    induce = llm_for("induce") if llm_for and any(map(uses_llm, settings.methods)) else None
    rank = llm_for("rank") if llm_for and any(m.endswith("_r3") for m in settings.methods) else None
    for rule_form in settings.rule_forms:
        for retriever in settings.retrievers:
            index = build_rule_index(
                retriever,
                task.library.texts(rule_form),
                analyzer=analysis.name,
                cache_dir=model_cache,
            )
            for method in settings.methods:
                forms = settings.query_forms if method.startswith("siar") else (None,)
                for form in forms:
                    started = time.perf_counter()
                    point = RuleSelectionSettings(
                        method=method, top_n=settings.top_k, retriever=retriever,
                        query_form=form or "si", rule_form=rule_form, candidates=settings.top_n,
                    )  # fmt: skip
                    selection = select_rules(
                        point, task.queries, task.library, index, llm=induce, rank_llm=rank,
                        shots=task.shots, query_shots=task.query_shots,
                    )  # fmt: skip
                    info = {
                        "llm_calls": selection.llm_calls,
                        "seconds": round(time.perf_counter() - started, 2),
                        "r3_repaired": selection.r3_repaired,
                        "r3_unparsed": selection.r3_unparsed,
                    }
                    record(retriever, rule_form, method, form, selection.ranked, info)
    return pd.DataFrame(rows), pd.DataFrame(picked)


def library_analysis(analyzer: str, library: RuleLibrary) -> Analysis:
    """BM25's analysis for `library` (`analyzer`: auto, english or cjk), chosen by the script
    of all its rule texts, natural and formal, so every rule form is searched alike."""
    return choose_analysis(analyzer, library.natural + library.formal)


def results_markdown(results: pd.DataFrame, title: str, ks: Sequence[int]) -> str:
    """The results as the paper's Table 1 lays them out: a block per retriever (and rule
    form), vanilla first, then the LLM's SIAR / SIAR-R³ rows."""
    cols = [f"R@{k}" for k in ks]
    rows: list[list[object]] = []
    for (retriever, rule_form), block in results.groupby(["retriever", "rule_form"], sort=False):
        if retriever == "-":
            head = "RuleRAG's own rule selection"
        else:
            kind = "sparse retrieval (BM25)" if retriever == "bm25" else f"dense ({retriever})"
            head = f"{kind}, {rule_form} rules"
        rows.append([f"**{head}**", *[None] * (len(cols) + 1)])
        rows += [
            [row["row"], *(f"{row[c]:.2f}" for c in cols), int(row["llm_calls"])]
            for row in block.to_dict("records")
        ]
    lines = [f"# {title}", "", *markdown.table_lines([None, *cols, "LLM calls"], rows)]
    return "\n".join(lines) + "\n"


def flat_metrics(results: pd.DataFrame, ks: Sequence[int]) -> dict[str, float]:
    """MLflow metrics: `<retriever>_<form>_<method>[_<query form>].recall_at_<k>`.

    A row without a query form holds None, which pandas turns into NaN once the column mixes
    types (a truthy float that once made names like `natural_head_nan.recall_at_1`): only
    non-empty strings become parts of a name.
    """
    out = {}
    for row in results.to_dict("records"):
        parts = (row["retriever"], row["rule_form"], row["method"], row["query_form"])
        key = "_".join(p for p in parts if isinstance(p, str) and p and p != "-")
        for k in ks:
            out[f"{key}.recall_at_{k}"] = float(row[f"R@{k}"])
    return out
