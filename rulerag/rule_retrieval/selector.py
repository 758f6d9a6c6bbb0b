"""Rule retrieval as build_benchmark's rule selection, so the whole RuleRAG grid (retrieval,
training, generation) can run on the rules vanilla retrieval, SIAR or R³ choose.

The bank becomes a rule library (its natural text, or the formal `r2(X, Y) <- r1(X, Y)` form)
indexed once; a query's rules are the method's top `top_n` (`rule_selection.top_n`, 3 as
RuleRAG's N). R³ re-ranks `candidates` search results. Nothing here looks at the query's
relation: the self-induction shots are the only place a relation-matched rule appears, and
build_benchmark draws them from F_R, never from the test queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rulerag.benchmark.settings import RuleSelectionSettings
from rulerag.generation.settings import ApiSettings
from rulerag.rule_retrieval.experiment import library_analysis
from rulerag.rule_retrieval.library import RuleLibrary
from rulerag.rule_retrieval.llm import LLMPool
from rulerag.rule_retrieval.methods import METHODS, select_rules, uses_llm
from rulerag.rule_retrieval.search import RuleIndex, build_rule_index
from rulerag.rule_retrieval.settings import RuleRetrievalSettings

__all__ = ["RetrievalSelector", "RuleRetrievalSelection", "benchmark_selector"]


class RetrievalSelector:
    """`selector(queries, shots)`: bank rule ids per query, best first (build_benchmark's
    `RuleSelector`); `cost` adds up what the LLM was asked and how often R³ was repaired."""

    def __init__(
        self,
        selection: RuleSelectionSettings,
        library: RuleLibrary,
        index: RuleIndex,
        llms: LLMPool | None,
        *,
        shots: int = 3,
    ) -> None:
        """`selection`: the method and its numbers (`index` searches its `rule_form`'s texts);
        `shots`: how many self-induction demonstrations a query gets (`rule_retrieval.shots`,
        for the caller that draws them)."""
        method = selection.method
        if method not in METHODS:
            raise ValueError(f"rule retrieval method must be one of {METHODS}, not {method!r}")
        if uses_llm(method) and llms is None:
            raise ValueError(f"rule selection {method!r} needs an LLM")
        self.selection, self.method = selection, method
        self.library, self.index, self.llms = library, index, llms
        self.shots = shots
        self._text = library.text_of(selection.rule_form)
        self.cost = {"queries": 0, "llm_calls": 0, "r3_repaired": 0, "r3_unparsed": 0}

    def __call__(self, queries: Sequence[str], shots: Sequence[tuple[str, str]]) -> list[list[str]]:
        if not queries:
            return []
        llms = self.llms
        siar, rerank = self.method.startswith("siar"), self.method.endswith("_r3")
        picked = select_rules(
            self.selection,
            queries,
            self.library,
            self.index,
            llm=llms("induce") if siar and llms else None,
            rank_llm=llms("rank") if rerank and llms else None,
            shots=[(query, self._text[rule_id]) for query, rule_id in shots],
        )
        self.cost["queries"] += len(queries)
        self.cost["llm_calls"] += picked.llm_calls
        self.cost["r3_repaired"] += picked.r3_repaired
        self.cost["r3_unparsed"] += picked.r3_unparsed
        return picked.ranked


def benchmark_selector(
    selection: RuleSelectionSettings,
    rule_retrieval: RuleRetrievalSettings,
    api: ApiSettings,
    bank: pd.DataFrame,
    relations: pd.DataFrame,
    *,
    cache_path: Path | None,
    model_cache: Path | None,
) -> RetrievalSelector:
    """The selector `build_benchmark.rule_selection` asks for, with `rule_retrieval`'s LLM (its
    profile applied), shots and BM25 analyzer and, for an API LLM, `generation.api`'s endpoint;
    `relations`: the KG's relations (id, name) for the formal form.

    Each argument is its section's typed settings (`Params.build_benchmark.rule_selection`,
    `Params.rule_retrieval`, `Params.generation.api`): the selector reads no params file."""
    names = dict(zip(relations["id"], relations["name"], strict=True))
    library = RuleLibrary.from_bank(bank, names)
    index = build_rule_index(
        selection.retriever,
        library.texts(selection.rule_form),
        analyzer=library_analysis(rule_retrieval.analyzer, library).name,
        cache_dir=model_cache,
    )
    llms = None
    if uses_llm(selection.method):
        llms = LLMPool(rule_retrieval.llm, cache_path, model_cache=model_cache, api=api)
    return RetrievalSelector(selection, library, index, llms, shots=rule_retrieval.shots)


@dataclass(frozen=True)
class RuleRetrievalSelection:
    """What build_benchmark's rule-retrieval selection needs besides `rule_selection`: the
    `rule_retrieval` and `generation.api` settings and where the LLM's answers and the models
    are kept.

    The benchmark sits on a lower floor than rule retrieval, so it cannot build this selector
    itself: it receives this object (`benchmark.make.SelectorSource`) and calls it with its
    `rule_selection`, the bank and the relations, only when the selection is a retrieval one.
    """

    rule_retrieval: RuleRetrievalSettings
    api: ApiSettings
    cache_path: Path | None = None
    model_cache: Path | None = None

    def __call__(
        self, selection: RuleSelectionSettings, bank: pd.DataFrame, relations: pd.DataFrame
    ) -> RetrievalSelector:
        return benchmark_selector(
            selection,
            self.rule_retrieval,
            self.api,
            bank,
            relations,
            cache_path=self.cache_path,
            model_cache=self.model_cache,
        )
