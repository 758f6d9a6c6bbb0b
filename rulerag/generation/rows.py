"""A grid row as the stages `generate`, `generate_r2ag` and `robustness` run it.

A configuration name is answered by one of three kinds of generator, decided from the typed
settings alone (`row_plan`):

* a row of `generation.grid`: the base model, a trained adapter, the API or the rules alone
  (`generators.make_generator`, `grid.run_row`);
* a VE / CoK chain row (`method`): the row's model searching the corpus itself
  (`chains.chain_factory`, with `generation.retriever`'s index);
* an R²AG variant of `r2ag.variants` that is no grid row (stage `generate_r2ag`): its
  R²-Former, trained by `train_r2ag`, in front of the frozen generator (`r2ag.fit`).

`robust_plan` is a row of `generation.robustness_rows` on the robustness queries
(benchmark/robust.jsonl): it searches the row's retrieval configuration with them itself, then
answers them as the row answers the test queries.

The plan names its stage and the MLflow params before anything loads, so the stage opens its
run first and a failure is recorded there; `RowPlan.answer` does the work and returns what the
stage writes (`grid.RowResult.write`).

Importing this module does not import torch (`passive_openmp` runs first in the stages).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rulerag.errors import InputError
from rulerag.generation.grid import RowResult, run_row
from rulerag.generation.grid_names import grid_config, retrieval_name
from rulerag.generation.r2ag.settings import R2AGSettings
from rulerag.generation.samples import sample_queries
from rulerag.generation.settings import GenerationSettings, GridConfig
from rulerag.io import read_jsonl
from rulerag.layout import ROBUST, RUN_FILENAME, DataLayout
from rulerag.retrieval.settings import IndexSettings, RetrieveSettings

__all__ = ["RobustSearch", "RowPlan", "robust_plan", "row_plan"]


@dataclass(frozen=True)
class RobustSearch:
    """How a robustness row searches its queries itself: the retrieve stage's settings."""

    index: IndexSettings
    retrieve: RetrieveSettings
    model_cache: Path | None = None

    def run(
        self, retrieval: str, queries: Sequence[Mapping[str, Any]], layout: DataLayout
    ) -> pd.DataFrame:
        """The run frame of retrieval configuration `retrieval` searched with `queries`, as
        the retrieve stage searches a query set (`runs.run_split`, split `robust`)."""
        from rulerag.retrieval.configs import parse_config
        from rulerag.retrieval.data import read_corpus, read_rule_texts, to_queries
        from rulerag.retrieval.rule_guided import rule_query_texts
        from rulerag.retrieval.runs import open_searcher, run_split

        config = parse_config(retrieval)
        corpus = read_corpus(layout.corpus)
        contents = dict(zip(corpus.ids, corpus.contents, strict=True))
        rules = {}
        if config.use_rules:
            rules = rule_query_texts(read_rule_texts(layout.rule_bank), self.retrieve.rule_query)
        try:
            searcher = open_searcher(config, layout, self.index, self.model_cache)
        except FileNotFoundError as err:
            raise InputError(f"robustness: {err}") from None
        blocks: list[pd.DataFrame] = []
        run_split(
            ROBUST,
            to_queries(queries),
            searcher,
            self.retrieve,
            rules,
            config.use_rules,
            contents,
            blocks.append,
        )
        return pd.concat(blocks, ignore_index=True)


@dataclass(frozen=True)
class RowPlan:
    """What answers one configuration, under which stage name, tracked with which params."""

    stage: str  # generate | generate_r2ag | robustness
    grid: GridConfig
    generation: GenerationSettings
    tracked: dict[str, Any]
    #: `run_row`'s generator factory (None: `generators.make_generator`)
    factory: Callable[..., Any] | None = None
    #: set for a robustness row: it answers the robustness queries, searched by itself
    robust: RobustSearch | None = None

    def answer(self, layout: DataLayout) -> RowResult:
        """Answer and score the row's seeded sample of its query set (`grid.run_row`)."""
        if self.robust is None:
            return run_row(layout.root, layout.dataset, self.grid, self.generation, self.factory)
        return self._answer_robust(layout, self.robust)

    def _answer_robust(self, layout: DataLayout, search: RobustSearch) -> RowResult:
        """The robustness queries: the row's own search of them (kept as run.parquet), then
        the row on that run."""
        generation, grid = self.generation, self.grid
        source = layout.queries(ROBUST)
        if not source.is_file():
            raise InputError(
                f"robustness@{layout.dataset}: {source} not found: run build_benchmark"
            )
        run, retrieval = None, None
        if grid.retrieval:
            chosen = sample_queries(read_jsonl(source), generation.test_queries, generation.seed)
            retrieval = retrieval_name(grid.retrieval, generation.retriever)
            run = search.run(retrieval, chosen, layout)
        result = run_row(
            layout.root,
            layout.dataset,
            grid,
            generation,
            query_set=ROBUST,
            run_file=RUN_FILENAME if run is None else run,  # no run: the row retrieves nothing
        )
        result.metrics["query_set"] = ROBUST
        if run is not None:
            result.run = run
            result.run_provenance = {"stage": "robustness", "config": retrieval}
        return result


def _tracked(generation: GenerationSettings, grid: GridConfig) -> dict[str, Any]:
    """A row's MLflow params: `generation` without the grid, and the row's own entry."""
    return {"generation": {**asdict(generation), "grid": None}, "config": asdict(grid)}


def row_plan(
    config: str,
    generation: GenerationSettings,
    r2ag: R2AGSettings,
    index: IndexSettings,
    retrieve: RetrieveSettings,
    *,
    model_cache: Path | None = None,
) -> RowPlan:
    """How `generate` answers `config`: a grid row (a chain row with its factory), or an R²AG
    variant that is no grid row (stage `generate_r2ag`)."""
    if config in r2ag.variants and config not in generation.grid:
        from rulerag.generation.r2ag.fit import generator_factory

        spec = r2ag.variant(config)
        grid = GridConfig(config, spec.retrieval, "r2ag", spec.prompt, spec.rules)
        factory = generator_factory(
            config,
            index,
            retrieve,
            encoder=r2ag.encoder or generation.retriever,
            model_cache=model_cache,
        )
        tracked = {**_tracked(generation, grid), "r2ag": {**asdict(r2ag), "profiles": None}}
        return RowPlan("generate_r2ag", grid, generation, tracked, factory)
    grid = grid_config(config, generation)
    factory = None
    if grid.method is not None:  # VE / CoK / RuleRAG-CoK: the chain searches the corpus
        from rulerag.generation.chains import chain_factory

        factory = chain_factory(index, retrieve, model_cache)
    return RowPlan("generate", grid, generation, _tracked(generation, grid), factory)


def robust_plan(
    config: str,
    generation: GenerationSettings,
    index: IndexSettings,
    retrieve: RetrieveSettings,
    *,
    model_cache: Path | None = None,
) -> RowPlan:
    """How `robustness` answers `config`, a row of `generation.robustness_rows`."""
    if config not in generation.robustness_rows:
        raise InputError(f"robustness: {config!r} is not in generation.robustness_rows")
    grid = grid_config(config, generation)
    search = RobustSearch(index, retrieve, model_cache)
    return RowPlan("robustness", grid, generation, _tracked(generation, grid), robust=search)
