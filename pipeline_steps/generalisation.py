"""Stage `generalisation`: RuleRAG-FT trained on one rule bank, tested on another (Figure 5).

Splits the rule bank into `generalisation.banks` disjoint, equal-size banks
(`rulerag.experiments.generalisation.split_bank`). For each bank R_i it trains an RGFT query
encoder on R_i's F_R items (`generation.retriever`'s encoder, `retriever_steps` steps,
train_retriever's other knobs), searches every bank's sampled test queries and R_i's F_G
queries with it (q ∘ r), and trains an RGFT generator adapter on R_i's F_G samples
(generation.train's knobs, `generator_samples`); then it answers every bank's test queries with
that pair (the `rulerag_ft` row's prompt). Standard RAG (the `standard_rag` row, the retrieve
stage's run) answers the same queries. Writes data/<dataset>/generalisation/: results.md,
gains.csv (the 4×4 table), cells.csv (DVC plot), gains.png (heat map), metrics.json; trained
models stay under generalisation/work/ (not tracked).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from pipeline_steps.common import (
    MODEL_CACHE,
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    run_stage,
)
from rulerag.benchmark.sampling import sample_queries
from rulerag.errors import InputError
from rulerag.experiments.generalisation import (
    GeneralisationSettings,
    assign_queries,
    gains_table,
    generalisation_settings,
    long_form,
    plot_gains,
    split_bank,
    summary,
    to_markdown,
)
from rulerag.generation.config import (
    GenerationSettings,
    checked_generation_settings,
    grid_config,
)
from rulerag.generation.generators import make_generator, passive_openmp
from rulerag.generation.grid import run_row
from rulerag.generation.prompts import PromptFormat
from rulerag.generation.samples import load_samples, prompt_format
from rulerag.io import atomic_open, atomic_path, read_jsonl, write_json
from rulerag.layout import DataLayout
from rulerag.retrieval.configs import retrieve_settings
from rulerag.retrieval.data import to_queries
from rulerag.retrieval.rule_guided import retrieve, rule_query_texts
from rulerag.retrieval.settings import IndexSettings, index_settings
from rulerag.retrieval.training import split_heldout, train_retriever_settings
from rulerag.tracking import TAG_STAGE_INSTANCE, stage_run

FT_ROW = "rulerag_ft"
BASELINE_ROW = "standard_rag"


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    parser = dataset_parser(__doc__ or "")
    parser.add_argument("--params", type=Path, default=None, help="params file (params.yaml)")
    args = parser.parse_args(argv)
    name = args.dataset
    params = load_params(args.params)
    settings = generalisation_settings(params.get("generalisation"))
    generation = checked_generation_settings(params)
    retrieve_cfg = retrieve_settings(params.get("retrieve"))
    index_cfg = index_settings(params.get("index"))
    encoder = generation.retriever
    if encoder == "bm25":
        raise InputError("generalisation: generation.retriever must be a dense encoder (RGFT)")
    base = data_dir(name)
    paths = DataLayout(base)
    out = base / "generalisation"
    work = out / "work"
    import pandas as pd

    bank = pd.read_parquet(base / "rules" / "bank.parquet")
    parts = split_bank(bank, settings.banks, settings.seed)
    rule_texts = dict(zip(bank["rule_id"].astype(str), bank["text"].astype(str), strict=True))
    search_texts = rule_query_texts(rule_texts, retrieve_cfg.rule_query)
    test = assign_queries(read_jsonl(paths.queries("test")), parts)
    f_g = assign_queries([r for r in read_jsonl(paths.queries("f_g")) if r.get("answers")], parts)
    banks = list(range(1, settings.banks + 1))
    tests = {
        j: sample_queries(test.get(j, []), settings.test_queries, settings.seed) for j in banks
    }
    every_test = [q for j in banks for q in tests[j]]
    bank_of = {str(q["qid"]): j for j in banks for q in tests[j]}
    tracked = {"generalisation": params.get("generalisation"), "generation.model": generation.model}
    with stage_run("generalisation", name, project_dir=PROJECT_DIR, params=tracked) as run:
        run.set_tags({TAG_STAGE_INSTANCE: f"generalisation@{name}"})
        baseline_row = run_row(
            base, name, grid_config(BASELINE_ROW, generation), generation, queries=every_test
        )
        baseline = _em_by_bank(baseline_row.records, bank_of, banks)
        em: dict[tuple[int, int], float] = {}
        sizes = {}
        inputs = _retriever_inputs(
            params, encoder, index_cfg, paths, settings, retrieve_cfg.rule_query
        )
        grid = grid_config(FT_ROW, generation)
        for i in banks:
            folder = work / f"R{i}"
            searcher, n_items = _train_retriever(inputs, parts, i)
            folder.mkdir(parents=True, exist_ok=True)
            runs = {}
            for split, queries in (("test", every_test), ("f_g", f_g.get(i, []))):
                frame, _ = retrieve(to_queries(queries), searcher, retrieve_cfg.top_k, search_texts)
                runs[split] = folder / f"run_{split}.parquet"
                frame.to_parquet(runs[split])
            adapter = _train_generator(
                base, generation, f_g.get(i, []), runs["f_g"], settings, folder
            )
            result = run_row(
                base,
                name,
                grid,
                generation,
                lambda b, g, s, r, adapter=adapter: make_generator(b, g, s, r, adapter=adapter),
                run_file=runs["test"],
                queries=every_test,
            )
            for j, value in _em_by_bank(result.records, bank_of, banks).items():
                em[(i, j)] = value
                run.log_metrics({f"em_R{i}_on_R{j}": value})
            sizes[i] = [
                sum(1 for p in parts.values() if p == i),
                int(bank[bank["rule_id"].map(parts) == i]["head_relation"].nunique()),
                n_items,
                len(f_g.get(i, [])),
                len(tests[i]),
            ]
        gains = gains_table(em, baseline)
        out.mkdir(parents=True, exist_ok=True)
        with atomic_open(out / "gains.csv") as handle:  # each output replaced whole
            gains.to_csv(handle)
        with atomic_open(out / "cells.csv") as handle:
            long_form(em, baseline).to_csv(handle, index=False)
        with atomic_path(out / "gains.png") as tmp:
            plot_gains(gains, tmp, f"{name}: RuleRAG-FT over Standard RAG (EM)")
        with atomic_open(out / "results.md") as handle:
            handle.write(to_markdown(name, gains, em, baseline, sizes))
        stats = {**summary(gains), "banks": settings.banks, "bank_rules": sizes[1][0]}
        write_json(out / "metrics.json", stats)
        run.log_metrics(stats)
        for artifact in ("results.md", "gains.csv", "gains.png"):
            run.log_artifact(out / artifact)
    shutil.rmtree(work, ignore_errors=True)
    print(
        f"generalisation@{name}: gain on the trained bank {stats['mean_gain_same_bank']:+.2f}, "
        f"on the others {stats['mean_gain_other_banks']:+.2f} EM points"
    )
    return 0


def _em_by_bank(
    records: Sequence[Mapping[str, Any]], bank_of: Mapping[str, int], banks: Sequence[int]
) -> dict[int, float]:
    """Mean EM of the records of each bank's queries."""
    scores: dict[int, list[float]] = {j: [] for j in banks}
    for record in records:
        scores[bank_of[str(record["qid"])]].append(float(record["em"]))
    return {j: (sum(v) / len(v) if v else 0.0) for j, v in scores.items()}


@dataclass(frozen=True)
class _RetrieverInputs:
    """What every bank's RGFT run shares: read once, not once per bank."""

    index: Any  # DenseIndex over the corpus (the document side stays frozen)
    spec: Any  # the encoder's EncoderSpec
    config: Any  # TrainConfig, `retriever_steps` steps
    items: list[Any]  # every F_R TrainItem (`q ∘ r`)
    device: str


def _retriever_inputs(
    params: Mapping[str, Any],
    encoder: str,
    index_cfg: IndexSettings,
    paths: DataLayout,
    settings: GeneralisationSettings,
    rule_query: str,
) -> _RetrieverInputs:
    from rulerag.retrieval.dense import DenseIndex
    from rulerag.retrieval.training import training_items

    trainer = train_retriever_settings(params.get("train_retriever") or {}, encoder)
    spec = index_cfg.encoder(encoder)
    index = DenseIndex.load(paths.index(encoder), index_cfg.faiss)
    config = trainer.train_config(spec.max_length, index.meta.get("normalize", True))
    config = replace(config, max_steps=settings.retriever_steps, min_steps=0)
    items, _ = training_items(paths, index.doc_ids, True, trainer.positives, rule_query)
    return _RetrieverInputs(index, spec, config, items, index_cfg.device)


def _train_retriever(
    inputs: _RetrieverInputs, parts: Mapping[str, int], part: int
) -> tuple[Any, int]:
    """RGFT on the bank's F_R items; returns the searcher over the corpus index and the
    number of items trained on."""
    from rulerag.retrieval.dense import DenseRetriever
    from rulerag.retrieval.encoders import load_encoder
    from rulerag.retrieval.training import train_query_encoder

    config, spec = inputs.config, inputs.spec
    mine = [item for item in inputs.items if parts.get(item.item_id.split("#", 1)[-1]) == part]
    if not mine:
        raise InputError(f"generalisation: bank R{part} has no F_R item with oracle documents")
    train, heldout = split_heldout(mine, config.heldout_fraction, config.heldout_max, config.seed)
    model = load_encoder(
        spec.query_name, inputs.device, config.max_length, MODEL_CACHE, spec.pooling
    )
    embeddings = inputs.index.embeddings
    train_query_encoder(model, embeddings, train, heldout, config, checkpoint_dir=None)
    return DenseRetriever(model, inputs.index, config.normalize, spec.batch_size), len(mine)


def _train_generator(
    base: Path,
    generation: GenerationSettings,
    f_g_queries: Sequence[Mapping[str, Any]],
    run_fg: Path,
    settings: GeneralisationSettings,
    folder: Path,
) -> Path:
    """An RGFT adapter on the bank's F_G queries (the rulerag_ft row's prompt and rules)."""
    from rulerag.generation.models import load_causal_lm, load_tokenizer
    from rulerag.generation.training import train_lora

    spec = generation.train.variants["rgft"]
    n_dev = settings.dev_samples
    chosen = sample_queries(f_g_queries, settings.generator_samples + n_dev, settings.seed)
    order = np.random.default_rng(settings.seed + 1).permutation(len(chosen))  # dev: any time
    chosen = [chosen[int(k)] for k in order]
    if len(chosen) <= n_dev:
        raise InputError(f"generalisation: {folder.name} has {len(chosen)} F_G queries")
    samples = load_samples(base, chosen, "bank", run_fg, spec.rules, generation)
    target = PromptFormat(generation.prompt_style).target
    pairs = [
        (prompt_format(generation, s).render_sample(spec.prompt, s), target(s.answers[0]))
        for s in samples
    ]
    dev, train = pairs[:n_dev], pairs[n_dev:]
    tokenizer = load_tokenizer(generation.model, padding_side="right")
    model = load_causal_lm(
        generation.model, quantization=generation.quantization, dtype=generation.dtype
    )
    adapter = folder / "adapter"
    train_lora(
        model,
        tokenizer,
        train,
        dev,
        generation.trainer_settings(),
        adapter,
        base_model=generation.model,
        metadata={"prompt_style": generation.prompt_style},
    )
    return adapter


if __name__ == "__main__":
    sys.exit(run_stage(main))
