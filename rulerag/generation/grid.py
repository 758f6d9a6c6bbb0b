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
from rulerag.generation.generators import make_generator
from rulerag.generation.grid_names import retrieval_name
from rulerag.generation.samples import load_samples, prompt_format, sample_queries
from rulerag.generation.settings import GenerationSettings, GridConfig
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
        queries = _sampled_queries(base, query_set, settings)
    samples = _row_samples(base, queries, retrieval, run_file, grid, settings)
    started = time.perf_counter()
    generator = _row_generator(base, grid, settings, retrieval, generator_factory)
    loaded = time.perf_counter()
    formats, prompts = _prompts(generator, grid, settings, samples)
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
    records = _scored_records(samples, prompts, generations, ranked, bool(retrieval), ks)
    metrics: dict[str, Any] = aggregate(
        records, ["em", "token_f1", *[f"recall_at_{k}" for k in ks]]
    )
    if ranked:
        metrics.update(_ranking_metrics(ranked))
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
            **_throughput(generator),
        }
    )
    return RowResult(records, metrics)


def _sampled_queries(base: Path, query_set: str, settings: GenerationSettings) -> list[Any]:
    """The row's queries: the same seeded sample of the query set for every row, so that rows
    are compared on the same queries."""
    test = read_jsonl(DataLayout(Path(base)).queries(query_set))
    return sample_queries(test, settings.test_queries, settings.seed)


def _row_samples(
    base: Path,
    queries: Sequence[Mapping[str, Any]],
    retrieval: str | None,
    run_file: str | Path | pd.DataFrame,
    grid: GridConfig,
    settings: GenerationSettings,
) -> list[Any]:
    """Each query with what its prompt shows: the retrieval run's documents, united over the
    lists of its rules, and the rules' answers as evidence where the row asks for them."""
    samples = load_samples(base, queries, retrieval, run_file, grid.rules, settings)
    if grid.evidence:
        from rulerag.generation.symbolic import add_evidence, read_answers

        samples = add_evidence(samples, read_answers(base), grid.evidence)
    return samples


def _row_generator(
    base: Path,
    grid: GridConfig,
    settings: GenerationSettings,
    retrieval: str | None,
    generator_factory: Callable[..., Any] | None,
) -> Any:
    """The row's generator: the factory's, else the symbolic row's (the rules' answers, no
    model), else `make_generator`'s (a local model, an API, R²AG)."""
    if grid.generator == "symbolic" and generator_factory is None:
        from rulerag.generation.symbolic import SymbolicGenerator, read_answers

        return SymbolicGenerator(read_answers(base))
    return (generator_factory or make_generator)(base, grid, settings, retrieval)


def _prompts(
    generator: Any, grid: GridConfig, settings: GenerationSettings, samples: Sequence[Any]
) -> tuple[list[Any], list[str]]:
    """Each sample's prompt format and prompt: the generator's own `render` where it has one
    (R²AG), else the format's."""
    formats = [prompt_format(settings, s) for s in samples]
    render = getattr(generator, "render", None)
    prompts = [
        render(f, grid.prompt, s) if render else f.render_sample(grid.prompt, s)
        for f, s in zip(formats, samples, strict=True)
    ]
    return formats, prompts


def _scored_records(
    samples: Sequence[Any],
    prompts: Sequence[str],
    generations: Sequence[str],
    ranked: Sequence[dict[str, Any]],
    retrieved: bool,
    ks: Sequence[int],
) -> list[dict[str, Any]]:
    """predictions.jsonl: each query's answer scored (EM, T-F1, and Recall@k where the row
    retrieved), with what its prompt showed and, for `decoding: rank`, its candidates."""
    records = []
    rows = zip(samples, prompts, generations, strict=True)
    for i, (sample, prompt, generation) in enumerate(rows):
        scores = score_prediction(
            generation,
            sample.answers,
            sample.extra.get("retrieved") if retrieved else None,
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
    return records


def _ranking_metrics(ranked: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """`decoding: rank`'s figures: the gold answer's rank among the candidates, and how many
    candidates a query had."""
    from rulerag.generation.ranking import rank_metrics

    metrics: dict[str, Any] = rank_metrics([r["gold_rank"] for r in ranked])
    metrics["mean_candidates"] = round(sum(r["candidate_count"] for r in ranked) / len(ranked), 1)
    return metrics


def _throughput(generator: Any) -> dict[str, float]:
    """A local generator's token figures (none for the others)."""
    stats = getattr(generator, "stats", None)
    if stats is None:
        return {}
    return {
        "new_tokens_per_second": round(stats.new_tokens_per_second, 2),
        "mean_prompt_tokens": round(stats.prompt_tokens / max(1, stats.prompts), 1),
    }


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
