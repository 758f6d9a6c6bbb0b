"""The `generalisation` stage's work: RuleRAG-FT trained on one rule bank, tested on every one.

For each of the disjoint banks R_i (`generalisation.split_bank`) it fine-tunes an RGFT query
encoder on R_i's F_R items and an RGFT adapter on R_i's F_G samples, with the same training
sequences the `train_retriever` and `train_generator` stages run (`fit_query_encoder`,
`fit_adapter`), shortened to `retriever_steps` steps and `generator_samples` samples; then it
answers every bank's sampled test queries with that pair (the `rulerag_ft` row's prompt).
Standard RAG (the `standard_rag` row on the retrieve stage's run) answers the same queries, and
the cells are EM gains over it (Figure 5).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rulerag.benchmark.sampling import sample_queries
from rulerag.errors import InputError
from rulerag.experiments.generalisation import (
    assign_queries,
    gains_table,
    long_form,
    plot_gains,
    split_bank,
    summary,
    to_markdown,
)
from rulerag.experiments.settings import GeneralisationSettings
from rulerag.generation.grid_names import grid_config
from rulerag.generation.settings import GenerationSettings
from rulerag.io import atomic_open, atomic_path, read_jsonl, read_parquet, write_json
from rulerag.layout import DataLayout
from rulerag.retrieval.settings import IndexSettings, RetrieveSettings
from rulerag.retrieval.training import TrainRetrieverSettings

__all__ = ["BASELINE_ROW", "FT_ROW", "Generalisation", "run_generalisation"]

FT_ROW = "rulerag_ft"
BASELINE_ROW = "standard_rag"


@dataclass(frozen=True)
class Generalisation:
    """The experiment's figures: what data/<dataset>/generalisation/ holds."""

    dataset: str
    em: dict[tuple[int, int], float]  # (trained on R_i, tested on R_j) -> EM
    baseline: dict[int, float]  # R_j -> Standard RAG's EM
    sizes: dict[int, list[int]]  # R_i -> rules, head relations, F_R items, F_G, test queries
    gains: pd.DataFrame

    @property
    def stats(self) -> dict[str, Any]:
        """metrics.json: the gains' summary and the banks' size."""
        return {**summary(self.gains), "banks": len(self.baseline), "bank_rules": self.sizes[1][0]}

    def write(self, folder: Path) -> None:
        """gains.csv, cells.csv (DVC plot), gains.png, results.md, metrics.json (each replaced
        whole)."""
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_open(folder / "gains.csv") as handle:
            self.gains.to_csv(handle)
        with atomic_open(folder / "cells.csv") as handle:
            long_form(self.em, self.baseline).to_csv(handle, index=False)
        with atomic_path(folder / "gains.png") as tmp:
            plot_gains(self.gains, tmp, f"{self.dataset}: RuleRAG-FT over Standard RAG (EM)")
        with atomic_open(folder / "results.md") as handle:
            handle.write(to_markdown(self.dataset, self.gains, self.em, self.baseline, self.sizes))
        write_json(folder / "metrics.json", self.stats)


def run_generalisation(
    layout: DataLayout,
    settings: GeneralisationSettings,
    generation: GenerationSettings,
    retrieve: RetrieveSettings,
    index: IndexSettings,
    train_retriever: TrainRetrieverSettings,
    *,
    model_cache: Path,
    on_cell: Callable[[int, int, float], None] | None = None,
) -> Generalisation:
    """The module docstring's experiment on `layout`'s dataset. Trained models live under
    generalisation/work/ while it runs and are removed at the end; `on_cell(i, j, em)` is
    called as each cell is known (the stage logs it to MLflow)."""
    from rulerag.generation.grid import run_row
    from rulerag.retrieval.data import to_queries
    from rulerag.retrieval.rule_guided import retrieve as search
    from rulerag.retrieval.rule_guided import rule_query_texts

    encoder = generation.retriever
    if encoder == "bm25":
        raise InputError("generalisation: generation.retriever must be a dense encoder (RGFT)")
    bank = read_parquet(layout.rule_bank)
    parts = split_bank(bank, settings.banks, settings.seed)
    rule_texts = dict(zip(bank["rule_id"].astype(str), bank["text"].astype(str), strict=True))
    search_texts = rule_query_texts(rule_texts, retrieve.rule_query)
    test = assign_queries(read_jsonl(layout.queries("test")), parts)
    f_g = assign_queries([r for r in read_jsonl(layout.queries("f_g")) if r.get("answers")], parts)
    banks = list(range(1, settings.banks + 1))
    tests = {
        j: sample_queries(test.get(j, []), settings.test_queries, settings.seed) for j in banks
    }
    every_test = [q for j in banks for q in tests[j]]
    bank_of = {str(q["qid"]): j for j in banks for q in tests[j]}

    baseline_row = run_row(
        layout.root, layout.dataset, grid_config(BASELINE_ROW, generation), generation,
        queries=every_test,
    )  # fmt: skip
    baseline = _em_by_bank(baseline_row.records, bank_of, banks)
    retriever = _BankRetriever.open(layout, encoder, index, train_retriever, settings, retrieve)
    grid = grid_config(FT_ROW, generation)
    work = layout.generalisation / "work"
    em: dict[tuple[int, int], float] = {}
    sizes = {}
    for i in banks:
        folder = work / f"R{i}"
        searcher, n_items = retriever.fit(parts, i, model_cache)
        folder.mkdir(parents=True, exist_ok=True)
        runs = {}
        for split, queries in (("test", every_test), ("f_g", f_g.get(i, []))):
            frame, _ = search(to_queries(queries), searcher, retrieve.top_k, search_texts)
            runs[split] = folder / f"run_{split}.parquet"
            frame.to_parquet(runs[split])
        adapter = _fit_bank_adapter(
            layout, generation, f_g.get(i, []), runs["f_g"], settings, folder
        )
        result = run_row(
            layout.root,
            layout.dataset,
            grid,
            generation,
            lambda b, g, s, r, adapter=adapter: _adapter_generator(b, g, s, r, adapter),
            run_file=runs["test"],
            queries=every_test,
        )
        for j, value in _em_by_bank(result.records, bank_of, banks).items():
            em[(i, j)] = value
            if on_cell is not None:
                on_cell(i, j, value)
        sizes[i] = [
            sum(1 for p in parts.values() if p == i),
            int(bank[bank["rule_id"].map(parts) == i]["head_relation"].nunique()),
            n_items,
            len(f_g.get(i, [])),
            len(tests[i]),
        ]
    shutil.rmtree(work, ignore_errors=True)
    return Generalisation(layout.dataset, em, baseline, sizes, gains_table(em, baseline))


def _em_by_bank(
    records: Sequence[Mapping[str, Any]], bank_of: Mapping[str, int], banks: Sequence[int]
) -> dict[int, float]:
    """Mean EM of the records of each bank's queries."""
    scores: dict[int, list[float]] = {j: [] for j in banks}
    for record in records:
        scores[bank_of[str(record["qid"])]].append(float(record["em"]))
    return {j: (sum(v) / len(v) if v else 0.0) for j, v in scores.items()}


def _adapter_generator(base: Path, grid: Any, settings: Any, retrieval: Any, adapter: Path) -> Any:
    """The row's generator with the bank's adapter instead of the row's own."""
    from rulerag.generation.generators import make_generator

    return make_generator(base, grid, settings, retrieval, adapter=adapter)


@dataclass(frozen=True)
class _BankRetriever:
    """What every bank's RGFT run shares, read once: the corpus index (its document side
    stays frozen), the encoder, its settings and every F_R item (`q ∘ r`)."""

    index: Any  # DenseIndex
    spec: Any  # EncoderSpec
    settings: TrainRetrieverSettings
    items: list[Any]  # TrainItem
    device: str
    steps: int

    @classmethod
    def open(
        cls,
        layout: DataLayout,
        encoder: str,
        index: IndexSettings,
        train_retriever: TrainRetrieverSettings,
        settings: GeneralisationSettings,
        retrieve: RetrieveSettings,
    ) -> _BankRetriever:
        from rulerag.retrieval.dense import DenseIndex
        from rulerag.retrieval.training import training_items

        trainer = train_retriever.for_encoder(encoder)
        dense = DenseIndex.load(layout.index(encoder), index.faiss)
        items, _ = training_items(layout, dense.doc_ids, True, trainer.positives, retrieve)
        return cls(
            dense, index.encoder(encoder), trainer, items, index.device, settings.retriever_steps
        )

    def fit(self, parts: Mapping[str, int], part: int, model_cache: Path) -> tuple[Any, int]:
        """RGFT on bank R_`part`'s F_R items (`fit_query_encoder`, `steps` steps, no
        checkpoints); the searcher over the corpus index and the number of items."""
        from rulerag.retrieval.training import fit_query_encoder

        mine = [item for item in self.items if parts.get(item.item_id.split("#", 1)[-1]) == part]
        if not mine:
            raise InputError(f"generalisation: bank R{part} has no F_R item with oracle documents")
        fitted = fit_query_encoder(
            mine,
            self.index,
            self.spec,
            self.settings,
            device=self.device,
            model_cache=model_cache,
            where=f"generalisation: bank R{part}",
            max_steps=self.steps,
            min_steps=0,
        )
        return fitted.searcher(self.index), len(mine)


def _fit_bank_adapter(
    layout: DataLayout,
    generation: GenerationSettings,
    f_g_queries: Sequence[Mapping[str, Any]],
    run_fg: Path,
    settings: GeneralisationSettings,
    folder: Path,
) -> Path:
    """An RGFT adapter on the bank's F_G queries (`fit_adapter`, the rulerag_ft row's prompt
    and rules): `generator_samples` + `dev_samples` of them, seeded, in a seeded order."""
    from rulerag.generation.adapters import fit_adapter
    from rulerag.generation.samples import load_samples

    spec = generation.train.variants["rgft"]
    n_dev = settings.dev_samples
    chosen = sample_queries(f_g_queries, settings.generator_samples + n_dev, settings.seed)
    order = np.random.default_rng(settings.seed + 1).permutation(len(chosen))  # dev: any time
    chosen = [chosen[int(k)] for k in order]
    if len(chosen) <= n_dev:
        raise InputError(f"generalisation: {folder.name} has {len(chosen)} F_G queries")
    samples = load_samples(layout.root, chosen, "bank", run_fg, spec.rules, generation)
    adapter = folder / "adapter"
    fit_adapter(samples, n_dev=n_dev, prompt=spec.prompt, generation=generation, output_dir=adapter)
    return adapter
