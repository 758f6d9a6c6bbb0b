"""One row of the Table 2 grid on one dataset: prompts in, scored answers out.

The same seeded sample of test queries for every row (`generation.test_queries`, `seed`), so
rows are compared on the same queries; each query's documents come from the row's retrieval
run, united over the lists of the rules its prompt shows (`samples.load_samples`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rulerag.evaluation.metrics import aggregate, score_prediction
from rulerag.generation.config import GenerationSettings, GridConfig, retrieval_name
from rulerag.generation.generators import make_generator
from rulerag.generation.samples import load_samples, prompt_format, sample_queries
from rulerag.io import read_jsonl, write_json, write_jsonl, write_parquet
from rulerag.layout import RUN_FILENAME, DataLayout

__all__ = ["RowResult", "run_row"]


@dataclass
class RowResult:
    """Per-query records (for predictions.jsonl) and the row's metrics (metrics.json); a row
    that searched its own queries (robustness) also holds that run (run.parquet)."""

    records: list[dict[str, Any]]
    metrics: dict[str, Any]
    #: the row's own retrieval run and its provenance (None: the row read a stage's run)
    run: pd.DataFrame | None = None
    run_provenance: dict[str, Any] = field(default_factory=dict)

    def write(self, folder: Path) -> None:
        """predictions.jsonl, metrics.json (and run.parquet) into `folder` (a staging folder:
        `io.staged_outputs`)."""
        if self.run is not None:
            write_parquet(folder / RUN_FILENAME, self.run, self.run_provenance)
        write_jsonl(folder / "predictions.jsonl", self.records)
        write_json(folder / "metrics.json", self.metrics)

    def summary(self, recall_k: int) -> str:
        """The row's figures in one line: queries, EM, T-F1, R@k, generator and its time."""

        def pct(value: Any) -> str:
            return "–" if value is None else f"{100 * value:.1f}"

        m = self.metrics
        return (
            f"{m['queries']} queries, EM {pct(m['em'])}, T-F1 {pct(m['token_f1'])}, "
            f"R@{recall_k} {pct(m.get(f'recall_at_{recall_k}'))} "
            f"({m['generator']}, {m['generate_seconds']:.0f}s)"
        )


def run_row(
    base: Path,
    dataset: str,
    grid: GridConfig,
    settings: GenerationSettings,
    generator_factory: Callable[..., Any] | None = None,
    *,
    query_set: str = "test",
    run_file: str | Path | pd.DataFrame = RUN_FILENAME,
    queries: Sequence[Mapping[str, Any]] | None = None,
) -> RowResult:
    """Answer and score the row's test queries (data/<dataset>/ is `base`).

    `generator_factory(base, grid, settings, retrieval)` builds the row's generator (default
    `make_generator`). A generator with `render(format, kind, sample)` writes its own prompts
    and one with `generate_samples(samples, prompts)` reads the samples too (R²AG does both).
    `query_set` (benchmark/<query_set>.jsonl) and `run_file` (its retrieval run, a name in the
    row's retrieval folder or a path) answer another query set, e.g. the robustness queries;
    `queries` (records of that set) answers exactly these instead of the seeded sample;
    `run_file` may also be the run itself (a frame).
    """
    retrieval = retrieval_name(grid.retrieval, settings.retriever) if grid.retrieval else None
    if queries is None:
        test = read_jsonl(DataLayout(Path(base)).queries(query_set))
        queries = sample_queries(test, settings.test_queries, settings.seed)
    samples = load_samples(base, queries, retrieval, run_file, grid.rules, settings)
    if grid.evidence:
        from rulerag.generation.symbolic import add_evidence, read_answers

        samples = add_evidence(samples, read_answers(base), grid.evidence)
    started = time.perf_counter()
    if grid.generator == "symbolic" and generator_factory is None:
        from rulerag.generation.symbolic import SymbolicGenerator, read_answers

        generator: Any = SymbolicGenerator(read_answers(base))
    else:
        generator = (generator_factory or make_generator)(base, grid, settings, retrieval)
    loaded = time.perf_counter()
    formats = [prompt_format(settings, s) for s in samples]
    render = getattr(generator, "render", None)
    prompts = [
        render(f, grid.prompt, s) if render else f.render_sample(grid.prompt, s)
        for f, s in zip(formats, samples, strict=True)
    ]
    decoding = grid.decoding or settings.decoding
    ranked: list[dict[str, Any]] = []
    if decoding == "rank":
        generations, ranked = _ranked(base, queries, samples, prompts, formats, generator)
    elif hasattr(generator, "generate_samples"):
        generations = generator.generate_samples(samples, prompts)
    else:
        generations = generator.generate(prompts)
    seconds = time.perf_counter() - loaded
    ks = settings.recall_k
    records = []
    rows = zip(samples, prompts, generations, strict=True)
    for i, (sample, prompt, generation) in enumerate(rows):
        scores = score_prediction(
            generation,
            sample.answers,
            sample.extra.get("retrieved") if retrieval else None,
            ks,
        )
        records.append(
            {
                "qid": sample.qid,
                "query": sample.query,
                "answers": list(sample.answers),
                **scores,
                "generation": generation,
                "rule_ids": sample.extra.get("rule_ids", []),
                "doc_ids": sample.extra.get("doc_ids", []),
                **({"evidence": sample.extra["evidence"]} if "evidence" in sample.extra else {}),
                **(ranked[i] if ranked else {}),
                "prompt": prompt,
            }
        )
    metrics: dict[str, Any] = aggregate(
        records, ["em", "token_f1", *[f"recall_at_{k}" for k in ks]]
    )
    if ranked:
        from rulerag.generation.ranking import rank_metrics

        metrics.update(rank_metrics([r["gold_rank"] for r in ranked]))
        metrics["mean_candidates"] = round(
            sum(r["candidate_count"] for r in ranked) / len(ranked), 1
        )
    metrics.update(
        {
            "dataset": dataset,
            "config": grid.name,
            "retrieval": retrieval,
            "generator": generator.name,
            "prompt": grid.prompt,
            "decoding": decoding,
            "prompt_style": settings.prompt_style,
            "max_rules": settings.max_rules,
            "profile": settings.profile,
            "seed": settings.seed,
            "load_seconds": round(loaded - started, 2),
            "generate_seconds": round(seconds, 2),
            "prompts_per_second": round(len(prompts) / seconds, 3) if seconds else None,
        }
    )
    stats = getattr(generator, "stats", None)
    if stats is not None:
        metrics["new_tokens_per_second"] = round(stats.new_tokens_per_second, 2)
        metrics["mean_prompt_tokens"] = round(stats.prompt_tokens / max(1, stats.prompts), 1)
    return RowResult(records, metrics)


def _ranked(
    base: Path,
    queries: list[dict[str, Any]],
    samples: list[Any],
    prompts: list[str],
    formats: list[Any],
    generator: Any,
) -> tuple[list[str], list[dict[str, Any]]]:
    """`decoding: rank`: candidates from the prompt's documents and the rules' answers, scored
    by the local generator (`ranking.py`)."""
    from rulerag.generation.ranking import answer_by_ranking, candidate_sets, doc_entity_names
    from rulerag.generation.symbolic import read_answers

    if not hasattr(generator, "tokenizer"):
        raise ValueError("decoding: rank needs a local generator (it scores with the model)")
    rules = (
        {q: [c["name"] for c in cands] for q, cands in read_answers(base).items()}
        if DataLayout(Path(base)).rule_answers.is_file()
        else {}
    )
    subjects = {str(q["qid"]): str(q.get("head_name", "")) for q in queries}
    candidates = candidate_sets(samples, doc_entity_names(base), subjects, rules)
    return answer_by_ranking(generator, samples, prompts, formats, candidates)
