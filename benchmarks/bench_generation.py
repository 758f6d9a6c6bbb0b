"""Generation throughput (prompts and tokens per second) and LoRA training time per 100 samples.

Run by hand, never as a test:

    .venv/bin/python benchmarks/bench_generation.py [--model smollm2] [--dataset icews14]
        [--prompts 32] [--batch-size 8] [--num-documents 5] [--max-new-tokens 10]
        [--kinds query,plain,rule] [--train-samples 16] [--lora-layers all,8] [--out FILE]

Prompts are built like the `generate` stage builds them: test queries of the dataset's
benchmark (data/<dataset>/benchmark, when it is there) with `num_documents` corpus documents
and up to three of the query's rules; without a benchmark, ICEWS-like synthetic ones of the
same shape. Retrieval quality does not matter here, only prompt length. Training runs one
epoch of LoRA (`rulerag.generation.training.train_lora`, the stage's code) on (prompt, answer)
pairs of the `rule` kind with the stage's settings (params.yaml's `generation` section in its
effective profile, else the library defaults), once per `--lora-layers` setting (`all` =
every layer, as the paper; N = the last N layers, the CPU profile's choice), no dev slice.

Numbers depend on what else runs on the machine: close other CPU-heavy jobs first. OpenMP's
wait policy is set to PASSIVE as in the stages (rulerag.generation.generators.passive_openmp); run
with OMP_WAIT_POLICY=ACTIVE to see the spinning default.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_queries(dataset: str, n: int, num_documents: int, seed: int) -> list[dict]:
    """n samples of (query, documents, rules, answer) with the benchmark's text shapes."""
    import numpy as np

    from rulerag.layout import DataLayout

    layout = DataLayout.of(ROOT / "data", dataset)
    rng = np.random.default_rng(seed)
    if layout.queries("test").is_file():
        from rulerag.benchmark.sampling import sample_queries
        from rulerag.io import read_jsonl
        from rulerag.retrieval.data import read_rule_texts

        queries = sample_queries(read_jsonl(layout.queries("test")), n, seed)
        docs = []
        with open(layout.corpus, encoding="utf-8") as handle:
            for i, line in enumerate(handle):
                if i % 50 == 0:
                    docs.append(json.loads(line)["contents"])
        bank = read_rule_texts(layout.rule_bank) if layout.rule_bank.is_file() else {}
        out = []
        for q in queries:
            rules = [bank[r] for r in q.get("rule_ids", []) if r in bank][:3]
            picks = rng.choice(len(docs), size=num_documents, replace=False)
            out.append(
                {
                    "query": q["query"],
                    "documents": [docs[int(i)] for i in picks],
                    "rules": rules,
                    "answer": (q.get("answers") or ["unknown"])[0],
                }
            )
        return out
    names = ["Abdullah Abdullah", "Afghanistan", "John Kerry", "Iran", "Barack Obama", "Ukraine"]
    relations = ["Make a visit", "Consult", "Express intent to meet or negotiate", "Accuse"]
    out = []
    for i in range(n):
        s, o = names[i % len(names)], names[(i * 5 + 1) % len(names)]
        r = relations[i % len(relations)]
        out.append(
            {
                "query": f"Time 2014-12-{i % 28 + 1:02d} what does {s} {r} ?",
                "documents": [
                    f"Time 2014-0{j % 9 + 1}-1{j % 10} {s} {relations[j % 4]} {names[j % 6]}."
                    for j in range(num_documents)
                ],
                "rules": [
                    f"[Entity1, {relations[j]}, Entity2] leads to [Entity1, {r}, Entity2]"
                    for j in range(3)
                ],
                "answer": o,
            }
        )
    return out


def bench_generation(args: argparse.Namespace, items: list[dict]) -> list[dict]:
    from rulerag.generation.local import LocalGenerator
    from rulerag.generation.prompts import render_prompt

    started = time.perf_counter()
    generator = LocalGenerator.from_pretrained(
        args.model, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size
    )
    load = time.perf_counter() - started
    generator.generate([render_prompt("query", items[0]["query"])])  # warm-up
    rows = []
    for kind in args.kinds.split(","):
        prompts = [render_prompt(kind, it["query"], it["documents"], it["rules"]) for it in items]
        generator.generate(prompts)
        stats = generator.stats
        rows.append(
            {
                "kind": kind,
                **stats.as_dict(),
                "prompt_tokens_per_second": round(stats.prompt_tokens / stats.seconds, 1),
                "mean_prompt_tokens": round(stats.prompt_tokens / stats.prompts, 1),
                "load_seconds": round(load, 2),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def stage_settings() -> Any:
    """The train_generator stage's settings from params.yaml (its effective profile)."""
    from rulerag.params import load_params

    return load_params(ROOT / "params.yaml").generation.trainer_settings()


def bench_training(args: argparse.Namespace, items: list[dict]) -> list[dict]:
    from rulerag.generation.models import load_causal_lm, load_tokenizer
    from rulerag.generation.prompts import render_prompt
    from rulerag.generation.settings import LoraSettings, TrainSettings
    from rulerag.generation.training import train_lora

    pairs = [
        (render_prompt("rule", it["query"], it["documents"], it["rules"]), it["answer"])
        for it in items[: args.train_samples]
    ]
    base_settings = stage_settings()
    rows = []
    for layers in args.lora_layers.split(","):
        chosen = None if layers == "all" else int(layers)
        lora = LoraSettings(**{**asdict(base_settings.lora), "layers": chosen})
        settings = TrainSettings(
            **{**asdict(base_settings), "lora": lora, "epochs": 1, "logging_steps": 1}
        )
        tokenizer = load_tokenizer(args.model, padding_side="right")
        model = load_causal_lm(args.model)
        with tempfile.TemporaryDirectory() as tmp:
            result = train_lora(model, tokenizer, pairs, [], settings, Path(tmp) / "adapter")
        stats = result.stats
        rows.append(
            {
                "lora_layers": layers,
                "lora_modules": ",".join(settings.lora.target_modules),
                "lora_r": settings.lora.r,
                "samples": stats["train_samples"],
                "steps": stats["steps"],
                "train_seconds": stats["train_seconds"],
                "seconds_per_100_samples": stats["seconds_per_100_samples"],
                "trainable_parameters": stats["trainable_parameters"],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--dataset", default="icews14")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-documents", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=10)
    parser.add_argument("--kinds", default="query,plain,rule")
    parser.add_argument("--train-samples", type=int, default=16, help="0 skips training")
    parser.add_argument("--lora-layers", default="all,8")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = parser.parse_args()
    from rulerag.generation.generators import passive_openmp

    passive_openmp()  # as the stages do; OMP_WAIT_POLICY=ACTIVE in the environment overrides
    import torch

    items = build_queries(
        args.dataset, max(args.prompts, args.train_samples), args.num_documents, args.seed
    )
    report = {
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        },
        "args": {k: str(v) for k, v in vars(args).items()},
        "generation": bench_generation(args, items[: args.prompts]) if args.prompts else [],
        "training": bench_training(args, items) if args.train_samples else [],
    }
    report["machine"]["load_average_after"] = os.getloadavg()
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
