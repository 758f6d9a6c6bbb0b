"""Stage `train_generator`: a LoRA adapter for one generator variant (RGFT or SSFT).

Draws `generation.train.samples` + `dev_samples` F_G queries (seeded), takes their documents
from the variant's retriever run over F_G (`retrieval/<config>/run_fg.parquet`: the fine-tuned
retriever, as the paper does), renders the variant's prompt (RGFT: with the query's rules;
SSFT: without) and trains LoRA on the answers (`rulerag.generation.training`). Writes the
adapter to data/<dataset>/generation/adapters/<variant>/, its statistics to
generation/train_<variant>.json (DVC metrics) and the loss curves to train_<variant>_loss.csv
(DVC plots), and logs the adapter to MLflow as a pyfunc model (base + adapter) registered as
`rulerag-<dataset>-generator-<variant>` (`rulerag.tracking.registry`).
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pipeline_steps.common import (
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    run_stage,
)
from rulerag.errors import InputError
from rulerag.generation.config import checked_generation_settings, retrieval_name
from rulerag.generation.generators import adapter_dir, passive_openmp
from rulerag.generation.launch import is_main_process, relaunch_on_gpus
from rulerag.generation.prompts import PromptFormat
from rulerag.generation.samples import fg_examples
from rulerag.io import atomic_open, write_json
from rulerag.tracking import TAG_STAGE_INSTANCE, stage_run


def _train(settings: Any, trainer: Any, base: Path, retrieval: str, spec: Any,
           adapter: Path) -> Any:  # fmt: skip
    """The variant's F_G samples (seeded, the same in every process) and the LoRA training."""
    target = PromptFormat(settings.prompt_style).target
    n_train, n_dev = settings.train.samples, settings.train.dev_samples
    pairs = fg_examples(
        base, n_train + n_dev, retrieval, spec.prompt, spec.rules, settings, shuffle=True
    )
    pairs = [(prompt, target(answer)) for prompt, answer in pairs]
    dev, train = pairs[:n_dev], pairs[n_dev:]
    from rulerag.generation.models import load_causal_lm, load_tokenizer
    from rulerag.generation.training import train_lora

    tokenizer = load_tokenizer(settings.model, padding_side="right")
    model = load_causal_lm(settings.model, quantization=settings.quantization, dtype=settings.dtype)
    return train_lora(
        model,
        tokenizer,
        train,
        dev,
        trainer,
        adapter,
        base_model=settings.model,
        metadata={"prompt_style": settings.prompt_style},
    )


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    parser = dataset_parser(__doc__ or "")
    parser.add_argument("--variant", required=True, help="a name in generation.train.variants")
    args = parser.parse_args(argv)
    name = args.dataset
    params = load_params()
    settings = checked_generation_settings(params)
    variants = settings.train.variants
    if args.variant not in variants:
        raise InputError(f"train_generator: unknown variant {args.variant!r} ({sorted(variants)})")
    spec = variants[args.variant]
    retrieval = retrieval_name(spec.retrieval, settings.retriever)
    trainer = settings.trainer_settings()
    launched = relaunch_on_gpus("pipeline_steps.train_generator", sys.argv[1:] if argv is None
                                else argv, trainer.gpus)  # fmt: skip
    if launched is not None:  # torchrun ran this stage once per GPU
        return launched
    main_process = is_main_process()
    base = data_dir(name)
    out_dir = base / "generation"
    adapter = adapter_dir(base, args.variant)
    tracked = {
        "generation": {k: v for k, v in asdict(settings).items() if k not in {"grid", "api"}},
        "variant": {"name": args.variant, "retrieval": retrieval, "prompt": spec.prompt},
    }
    if not main_process:  # another GPU's process of a torchrun launch: train, write nothing
        _train(settings, trainer, base, retrieval, spec, adapter)
        return 0
    with stage_run("train_generator", name, project_dir=PROJECT_DIR, params=tracked) as run:
        run.set_tags(
            {
                "rulerag.variant": args.variant,
                TAG_STAGE_INSTANCE: f"train_generator@{name}-{args.variant}",
            }
        )
        result = _train(settings, trainer, base, retrieval, spec, adapter)
        stats = {
            k: v
            for k, v in result.stats.items()
            if k not in {"loss_curve", "dev_curve", "settings"}
        }
        stats.update({"variant": args.variant, "retrieval": retrieval, "prompt": spec.prompt})
        write_json(out_dir / f"train_{args.variant}.json", stats)
        with atomic_open(out_dir / f"train_{args.variant}_loss.csv") as handle:
            handle.write("step,loss,split\n")
            for split, curve in (("train", "loss_curve"), ("dev", "dev_curve")):
                for point in result.stats[curve]:
                    handle.write(f"{point['step']},{point['loss']:.5f},{split}\n")
        for point in result.stats["loss_curve"]:
            run.log_metrics({"train_loss": point["loss"]}, step=point["step"])
        for point in result.stats["dev_curve"]:
            run.log_metrics({"dev_loss": point["loss"]}, step=point["step"])
        run.log_metrics(
            {
                k: v
                for k, v in stats.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
        )
        from rulerag.tracking.registry import registered_name, save_generator_model

        run.log_model(
            lambda folder: save_generator_model(adapter, folder),
            "model",
            registered_name=registered_name(name, "generator", args.variant),
            description=f"{args.variant.upper()} LoRA adapter on {settings.model} for {name} "
            f"({settings.prompt_style} prompts, {spec.prompt} prompt)",
        )
        run.log_artifact(out_dir / f"train_{args.variant}.json")
    print(
        f"train_generator@{name}-{args.variant}: {stats['train_samples']} samples, "
        f"{stats['steps']} steps in {stats['train_seconds']:.0f}s "
        f"({stats['seconds_per_100_samples']:.0f}s/100 samples); loss "
        f"{stats['first_loss']:.3f} -> {stats['last_loss']:.3f}, dev "
        f"{stats['dev_loss_before']} -> {stats['dev_loss_best']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
