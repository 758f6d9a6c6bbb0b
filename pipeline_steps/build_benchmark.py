"""Stage `build_benchmark`: KG + rule bank -> data/<dataset>/benchmark/.

Writes corpus.jsonl ({"id", "contents"}, Pyserini's JsonCollection format) with corpus.parquet
(the structured fields), test.jsonl, f_r.jsonl, f_g.jsonl and stats.json, and prints the sizes
beside the paper's Table 1 row for the KG.
"""

from __future__ import annotations

import sys
from typing import Any

from pipeline_steps.common import (
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    numeric_metrics,
)
from rulerag.benchmark.build import BenchmarkConfig, build_benchmark
from rulerag.io import staged_outputs, write_json, write_jsonl, write_parquet
from rulerag.kg.registry import DATASETS
from rulerag.kg.store import read_kg
from rulerag.tracking import stage_run

TABLE1_KEYS = (("rules", "rules"), ("corpus", "corpus docs"), ("f_r", "F_R"), ("f_g", "F_G"),
               ("test", "test queries"))  # fmt: skip


def by_dataset(value: Any, name: str, fallback: Any) -> Any:
    """A setting given once or per dataset (`{default: ..., <dataset>: ...}`)."""
    if isinstance(value, dict):
        return value.get(name, value.get("default", fallback))
    return fallback if value is None else value


def resolve_config(name: str, cfg: dict[str, Any]) -> BenchmarkConfig:
    """params.yaml `build_benchmark` for one dataset (per-dataset corpus filter, paper sizes)."""
    corpus = cfg.get("corpus") or {}
    size = cfg.get("test_size", "paper")
    if size == "paper":
        size = DATASETS[name].paper.get("test") if name in DATASETS else None
    strata = cfg.get("strata") or {}
    selection = cfg.get("rule_selection") or {}
    count = int(strata.get("count", 3))
    return BenchmarkConfig(
        seed=int(cfg.get("seed", 12)),
        corpus_splits=tuple(corpus.get("splits") or ("train",)),
        corpus_filter=by_dataset(corpus.get("filter"), name, "none"),
        test_size=None if size is None else int(size),
        n_strata=count,
        strata_weights=tuple(float(w) for w in strata.get("weights") or [1.0] * count),
        selection=selection.get("method", "head"),
        top_n=int(selection.get("top_n", 3)),
        threshold=float(selection.get("threshold", 0.7)),
        max_oracle_docs=int(cfg.get("max_oracle_docs", 5)),
        finetune_from_train=int(by_dataset(cfg.get("finetune_from_train"), name, 0)),
    )


def table1(name: str, stats: dict[str, Any]) -> str:
    paper = DATASETS[name].paper if name in DATASETS else {}
    lines = [f"{'':14}{'built':>10}{'paper':>10}"]
    for key, label in TABLE1_KEYS:
        lines.append(f"{label:14}{stats[key]:>10,}{paper.get(key, float('nan')):>10,}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = dataset_parser(__doc__ or "").parse_args(argv)
    name = args.dataset
    params = load_params()
    cfg = params.get("build_benchmark") or {}
    config = resolve_config(name, cfg)
    kg = read_kg(data_dir(name) / "kg")
    import pandas as pd

    bank = pd.read_parquet(data_dir(name) / "rules" / "bank.parquet")
    out_dir = data_dir(name) / "benchmark"
    with stage_run(
        "build_benchmark", name, project_dir=PROJECT_DIR, params={"build_benchmark": cfg}
    ) as run:
        encoder = None
        if config.selection == "similarity":
            from rulerag.rules.selection import minilm_encoder

            encoder = minilm_encoder((cfg.get("rule_selection") or {}).get("encoder", "minilm"))
        bench = build_benchmark(kg, bank, config, encoder)
        stats = {"dataset": name, **bench.stats, "seed": config.seed}
        if name in DATASETS:
            stats["paper"] = dict(DATASETS[name].paper)
        provenance = {"stage": "build_benchmark", "dataset": name, "params": cfg}
        with staged_outputs(out_dir, "bench") as staging:
            write_jsonl(
                staging / "corpus.jsonl", bench.corpus[["id", "contents"]].to_dict("records")
            )
            write_parquet(staging / "corpus.parquet", bench.corpus, provenance)
            write_jsonl(staging / "test.jsonl", bench.test)
            write_jsonl(staging / "f_r.jsonl", bench.f_r)
            write_jsonl(staging / "f_g.jsonl", bench.f_g)
            write_json(staging / "stats.json", stats)
        summary = table1(name, stats)
        run.log_params({"corpus_filter": config.corpus_filter, "test_size": config.test_size})
        run.log_metrics(numeric_metrics({k: v for k, v in stats.items() if k != "paper"}))
        run.log_artifact(out_dir / "stats.json")
        run.log_dict({"table1": summary.splitlines()}, "table1.json")
        run.log_dict(bench.test[:20], "sample/test.json")
        run.log_dict(bench.f_r[:20], "sample/f_r.json")
    print(f"build_benchmark@{name} (corpus filter {config.corpus_filter}):\n{summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
