"""Stage `generate`: one configuration of the Table 2 grid on one dataset.

Reads the test queries (a seeded sample of `generation.test_queries`, the same for every
configuration), the configuration's retrieval run, the corpus and the rule bank; renders each
query's prompt; answers with the configuration's generator (the base model, a LoRA adapter from
`train_generator`, or an OpenAI-compatible API with 3 fixed F_G examples); scores the answers.
Writes data/<dataset>/generation/<config>/predictions.jsonl (one line per query: prompt, raw
generation, extracted answer, golds, scores, document ids) and metrics.json.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline_steps.common import PROJECT_DIR, data_dir, dataset_parser, load_params
from rulerag.evaluation.metrics import aggregate, score_prediction
from rulerag.generation.config import GridConfig, apply_profile, grid_config, retrieval_name
from rulerag.generation.prompts import Sample, render_prompt
from rulerag.generation.samples import (
    RUN_FG_FILENAME,
    RUN_FILENAME,
    build_samples,
    load_corpus,
    retrieved_only,
    sample_queries,
    united_documents,
)
from rulerag.io import atomic_open, read_jsonl, write_json
from rulerag.retrieval.data import read_rule_texts
from rulerag.tracking import stage_run

#: where `train_generator` puts the adapters, under data/<dataset>/generation/
ADAPTERS_DIR = "adapters"


def passive_openmp() -> None:
    """Make OpenMP threads sleep rather than spin while they wait, before torch loads.

    With the default (spinning) policy, a CPU shared with any other busy process slows small
    operations such as a decoding step by 10-25x (measured with benchmarks/bench_generation.py
    on 2 cores: 24 query-only prompts took 79 s, 7 s with this). Only effective before torch
    is first imported; a value set by the user wins.
    """
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def load_samples(
    base: Path,
    queries: list[dict[str, Any]],
    retrieval: str | None,
    run_file: str,
    rules: str,
    cfg: dict[str, Any],
) -> list[Sample]:
    """The generator inputs of `queries`: their united documents from the retrieval run (none
    when `retrieval` is None), their rules from the bank, the document texts."""
    documents = None
    needed: set[str] = set()
    if retrieval:
        path = base / "retrieval" / retrieval / run_file
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: run the retrieval stage for {retrieval}")
        run = pd.read_parquet(path)
        run = run[run["qid"].astype(str).isin({str(q["qid"]) for q in queries})]
        documents = united_documents(run, rules)
        keep = max(int(cfg["num_documents"]), max(int(k) for k in cfg["recall_k"]))
        needed = {d for ids in documents.values() for d in ids[:keep]}
    corpus = load_corpus(base / "benchmark" / "corpus.jsonl", needed) if needed else {}
    return build_samples(
        queries,
        rule_texts=read_rule_texts(base / "rules" / "bank.parquet"),
        documents=documents,
        corpus=corpus,
        num_documents=int(cfg["num_documents"]),
        max_rules=cfg.get("max_rules"),
        keep_retrieved=max(int(k) for k in cfg["recall_k"]),
    )


def api_examples(base: Path, grid: GridConfig, cfg: dict[str, Any], retrieval: str | None):
    """The paper's fixed k-shot demonstrations for closed models: the first `shots` F_G
    queries of a seeded sample, rendered with the configuration's own prompt and documents
    from its retriever's F_G run (none when that run is missing), with their first answer."""
    api = cfg.get("api") or {}
    shots = int(api.get("shots", 3))
    if shots <= 0:
        return []
    has_run = retrieval and (base / "retrieval" / retrieval / RUN_FG_FILENAME).is_file()
    return fg_examples(
        base,
        shots,
        int(cfg.get("seed", 12)),
        retrieval if has_run else None,
        grid.prompt,
        grid.rules,
        cfg,
    )


def fg_examples(
    base: Path,
    n: int,
    seed: int,
    retrieval: str | None,
    prompt: str,
    rules: str,
    cfg: dict[str, Any],
    shuffle: bool = False,
) -> list[tuple[str, str]]:
    """(prompt, first gold answer) pairs of a seeded sample of n answered F_G queries.

    Shared by generator training and the API generator's shots, so both see F_G exactly as
    the grid row will see a test query: documents from `retrieval`'s F_G run (only queries
    that run holds; none when `retrieval` is None), the prompt kind and the rule filter.
    `shuffle` reorders the sample with seed + 1 (training splits dev off its head).
    """
    pool = [r for r in read_jsonl(base / "benchmark" / "f_g.jsonl") if r.get("answers")]
    if retrieval:
        pool = retrieved_only(pool, base / "retrieval" / retrieval / RUN_FG_FILENAME)
    chosen = sample_queries(pool, n, seed)
    if shuffle:
        order = np.random.default_rng(seed + 1).permutation(len(chosen))
        chosen = [chosen[int(i)] for i in order]
    samples = load_samples(base, chosen, retrieval, RUN_FG_FILENAME, rules, cfg)
    return [(render_prompt(prompt, s.query, s.documents, s.rules), s.answers[0]) for s in samples]


def make_generator(base: Path, grid: GridConfig, cfg: dict[str, Any], retrieval: str | None):
    """The configuration's generator (see the module docstring)."""
    if grid.generator == "api":
        from rulerag.generation.api import ApiGenerator

        api = cfg.get("api") or {}
        return ApiGenerator(
            base_url=api.get("base_url"),
            model=str(api.get("model")),
            key_env=tuple(api.get("key_env") or ("RULERAG_API_KEY", "OPENAI_API_KEY")),
            airflow_conn_id=api.get("airflow_conn_id"),
            examples=api_examples(base, grid, cfg, retrieval),
            max_tokens=int(cfg["max_new_tokens"]),
            timeout=float(api.get("timeout", 60)),
            max_retries=int(api.get("max_retries", 5)),
            backoff=float(api.get("backoff", 1.0)),
            concurrency=int(api.get("concurrency", 1)),
        )
    from rulerag.generation.local import LocalGenerator

    adapter = None
    trained: dict[str, Any] = {}
    if grid.trained:
        adapter = base / "generation" / ADAPTERS_DIR / grid.generator
        if not (adapter / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{adapter}: run train_generator for {grid.generator}")
        trained = json.loads((adapter / "train_stats.json").read_text(encoding="utf-8"))
        if trained.get("base_model") != str(cfg["model"]):
            raise ValueError(
                f"{adapter} was trained on {trained.get('base_model')!r}, not on "
                f"generation.model {cfg['model']!r}: run train_generator again"
            )
    generator = LocalGenerator.from_pretrained(
        str(cfg["model"]),
        adapter=adapter,
        quantization=cfg.get("quantization"),
        dtype=cfg.get("dtype"),
        max_new_tokens=int(cfg["max_new_tokens"]),
        batch_size=int(cfg["batch_size"]),
        chat_template=cfg.get("chat_template", "auto"),
        max_prompt_tokens=cfg.get("max_prompt_tokens"),
    )
    if adapter is not None and trained.get("chat_template") != generator.chat_template:
        raise ValueError(
            f"{adapter} was trained with chat_template={trained.get('chat_template')}, "
            f"generation would use {generator.chat_template}: the prompts would differ"
        )
    return generator


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    parser = dataset_parser(__doc__ or "")
    parser.add_argument("--config", required=True, help="a name in generation.grid")
    args = parser.parse_args(argv)
    name = args.dataset
    section = load_params().get("generation") or {}
    cfg = apply_profile(section)
    grid = grid_config(args.config, cfg.get("grid") or {})
    retrieval = retrieval_name(grid.retrieval, cfg["retriever"]) if grid.retrieval else None
    base = data_dir(name)
    out_dir = base / "generation" / grid.name
    seed = int(cfg.get("seed", 12))
    tracked = {"generation": {k: v for k, v in cfg.items() if k != "grid"}, "config": asdict(grid)}
    with stage_run("generate", name, project_dir=PROJECT_DIR, params=tracked) as run:
        run.set_tags(
            {"rulerag.config": grid.name, "rulerag.stage_instance": f"generate@{name}-{grid.name}"}
        )
        test = read_jsonl(base / "benchmark" / "test.jsonl")
        queries = sample_queries(test, cfg.get("test_queries"), seed)
        samples = load_samples(base, queries, retrieval, RUN_FILENAME, grid.rules, cfg)
        prompts = [render_prompt(grid.prompt, s.query, s.documents, s.rules) for s in samples]
        started = time.perf_counter()
        generator = make_generator(base, grid, cfg, retrieval)
        loaded = time.perf_counter()
        generations = generator.generate(prompts)
        seconds = time.perf_counter() - loaded
        ks = tuple(int(k) for k in cfg["recall_k"])
        records = []
        for sample, prompt, generation in zip(samples, prompts, generations, strict=True):
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
                    "prompt": prompt,
                }
            )
        metrics: dict[str, Any] = aggregate(
            records, ["em", "token_f1", *[f"recall_at_{k}" for k in ks]]
        )
        stats = getattr(generator, "stats", None)
        metrics.update(
            {
                "dataset": name,
                "config": grid.name,
                "retrieval": retrieval,
                "generator": generator.name,
                "prompt": grid.prompt,
                "profile": cfg.get("profile", "cpu"),
                "seed": seed,
                "load_seconds": round(loaded - started, 2),
                "generate_seconds": round(seconds, 2),
                "prompts_per_second": round(len(prompts) / seconds, 3) if seconds else None,
            }
        )
        if stats is not None:
            metrics["new_tokens_per_second"] = round(stats.new_tokens_per_second, 2)
            metrics["mean_prompt_tokens"] = round(stats.prompt_tokens / max(1, stats.prompts), 1)
        out_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".generate-", dir=out_dir))
        try:
            with atomic_open(staging / "predictions.jsonl") as handle:
                for record in records:
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            write_json(staging / "metrics.json", metrics)
            for item in sorted(staging.iterdir()):
                os.replace(item, out_dir / item.name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        run.log_metrics(
            {
                k: v
                for k, v in metrics.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
        )
        run.log_artifact(out_dir / "metrics.json")
        run.log_artifact(out_dir / "predictions.jsonl")

    def pct(value: Any) -> str:
        return "–" if value is None else f"{100 * value:.1f}"

    recall = metrics.get(f"recall_at_{ks[-1]}")
    print(
        f"generate@{name}-{grid.name}: {len(records)} queries, EM {pct(metrics['em'])}, "
        f"T-F1 {pct(metrics['token_f1'])}, R@{ks[-1]} {pct(recall)} "
        f"({generator.name}, {seconds:.0f}s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
