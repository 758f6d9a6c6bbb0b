"""The `build_benchmark` step: a KG and its rule bank -> the RuleQA-style benchmark's files.

`benchmark_files` resolves params.yaml's `build_benchmark` for the dataset, makes what its rule
selection needs (the Sentence-BERT encoder for `similarity`, a rule retriever for the retrieval
methods), builds the benchmark (`build.build_benchmark`), turns the test queries into queries
that need no rule (`robustness.degenerate_queries`) and gathers the figures; `BenchmarkFiles`
writes them. A rule retriever lives on a higher floor (`rulerag.rule_retrieval`), so the caller
hands in a `SelectorSource` (`rule_retrieval.selector.RuleRetrievalSelection`) that this module
calls only when the selection is a retrieval one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from rulerag.benchmark.build import (
    Benchmark,
    RuleSelector,
    build_benchmark,
    check_bank,
    table1,
)
from rulerag.benchmark.robustness import degenerate_queries
from rulerag.benchmark.settings import (
    RETRIEVAL_SELECTIONS,
    BuildBenchmarkSettings,
    RuleSelectionSettings,
)
from rulerag.io import read_parquet, write_json, write_jsonl, write_parquet
from rulerag.kg.registry import DATASETS
from rulerag.kg.schema import KnowledgeGraph
from rulerag.kg.store import read_kg
from rulerag.layout import DataLayout

__all__ = ["BenchmarkFiles", "SelectorSource", "benchmark_files", "read_benchmark_files"]


class SelectorSource(Protocol):
    """Makes the rule retriever a retrieval selection (vanilla, SIAR, R³) asks for, from the
    typed `rule_selection`, the bank and the KG's relations (id, name)."""

    def __call__(
        self, selection: RuleSelectionSettings, bank: pd.DataFrame, relations: pd.DataFrame
    ) -> RuleSelector: ...


@dataclass(frozen=True)
class BenchmarkFiles:
    """What `build_benchmark` writes: the benchmark, its robustness queries and its figures."""

    dataset: str
    settings: BuildBenchmarkSettings  # the settings for the dataset (`for_dataset`)
    benchmark: Benchmark
    robust: list[dict[str, Any]]  # the test queries that need no rule
    stats: dict[str, Any]
    paper: Mapping[str, int]  # the paper's Table 1 row for the KG (empty: none)

    def table1(self) -> str:
        """The built sizes beside the paper's Table 1 row, as aligned text."""
        return table1(self.stats, self.paper)

    def write(self, folder: Path, provenance: Mapping[str, Any]) -> None:
        """corpus.jsonl (Pyserini's JsonCollection), corpus.parquet (with `provenance`),
        test/f_r/f_g/robust.jsonl and stats.json into `folder` (a staging folder:
        `io.staged_outputs`)."""
        bench = self.benchmark
        write_jsonl(folder / "corpus.jsonl", bench.corpus[["id", "contents"]].to_dict("records"))
        write_parquet(folder / "corpus.parquet", bench.corpus, provenance)
        write_jsonl(folder / "test.jsonl", bench.test)
        write_jsonl(folder / "f_r.jsonl", bench.f_r)
        write_jsonl(folder / "f_g.jsonl", bench.f_g)
        write_jsonl(folder / "robust.jsonl", self.robust)
        write_json(folder / "stats.json", self.stats)


def read_benchmark_files(
    settings: BuildBenchmarkSettings,
    layout: DataLayout,
    *,
    selectors: SelectorSource | None = None,
) -> BenchmarkFiles:
    """The `build_benchmark` stage: the dataset's KG and rule bank (`layout`) read, then
    `benchmark_files`; a bank file that holds no rule (or is no bank) is refused naming it."""
    kg = read_kg(layout.kg)
    bank = read_parquet(layout.rule_bank)
    check_bank(bank, str(layout.rule_bank), f"rerun mine_rules@{layout.dataset}")
    return benchmark_files(kg, bank, settings, layout.dataset, selectors=selectors)


def benchmark_files(
    kg: KnowledgeGraph,
    bank: pd.DataFrame,
    settings: BuildBenchmarkSettings,
    dataset: str,
    *,
    selectors: SelectorSource | None = None,
) -> BenchmarkFiles:
    """The benchmark of `dataset` (its sizes beside the paper's Table 1 row when the registry
    has one), its robustness queries and stats.json's figures; `selectors` makes the rule
    retriever of a retrieval selection (required for one)."""
    name = f"build_benchmark@{dataset}"
    check_bank(bank, f"{name}: the rule bank", f"rerun mine_rules@{dataset}")  # before selectors
    paper = DATASETS[dataset].paper if dataset in DATASETS else {}
    settings = settings.for_dataset(dataset, paper)
    selection = settings.rule_selection
    encoder = selector = None
    if selection.method == "similarity":
        from rulerag.rules.selection import minilm_encoder  # sentence-transformers, when asked

        encoder = minilm_encoder(selection.encoder)
    if selection.method in RETRIEVAL_SELECTIONS:
        if selectors is None:
            raise ValueError(f"rule selection {selection.method!r} needs a rule selector source")
        selector = selectors(selection, bank, kg.relations)
    bench = build_benchmark(kg, bank, settings, encoder, selector, name=name)
    robust, robust_counts = degenerate_queries(
        bench.test,
        bank,
        bench.corpus,
        kg.entities.set_index("id")["name"].to_dict(),
        kg.relations.set_index("id")["name"].to_dict(),
    )
    stats = {"dataset": dataset, **bench.stats, "seed": settings.seed, "robust": robust_counts}
    if selector is not None:
        stats["selection_cost"] = dict(selector.cost)
    if dataset in DATASETS:
        stats["paper"] = dict(DATASETS[dataset].paper)
    return BenchmarkFiles(dataset, settings, bench, robust, stats, paper)
