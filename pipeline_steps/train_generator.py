"""Stage `train_generator`: a LoRA adapter for one generator variant (RGFT or SSFT).

Draws `generation.train.samples` + `dev_samples` F_G queries (seeded), takes their documents
from the variant's retriever run over F_G (`retrieval/<config>/run_fg.parquet`: the fine-tuned
retriever, as the paper does), renders the variant's prompt (RGFT: with the query's rules;
SSFT: without) and trains LoRA on the answers (`rulerag.generation.training`). Writes the
adapter to data/<dataset>/generation/adapters/<variant>/, its statistics to
generation/train_<variant>.json (DVC metrics) and the loss curves to train_<variant>_loss.csv
(DVC plots), and logs the adapter to MLflow.
"""

from __future__ import annotations

import sys
from typing import Any

from pipeline_steps.common import PROJECT_DIR, data_dir, dataset_parser, load_params
from pipeline_steps.generate import fg_examples, passive_openmp
from rulerag.generation.config import apply_profile, retrieval_name
from rulerag.generation.training import TrainSettings
from rulerag.io import atomic_open, write_json
from rulerag.tracking import stage_run

#: keys of generation.train that are not Trainer settings
_DATA_KEYS = ("samples", "dev_samples", "variants")
#: model-level keys of the generation section the Trainer needs as well
_MODEL_KEYS = ("quantization", "dtype", "chat_template", "max_prompt_tokens")


def settings_from(cfg: dict[str, Any]) -> TrainSettings:
    """TrainSettings from the effective generation section."""
    train = {k: v for k, v in (cfg.get("train") or {}).items() if k not in _DATA_KEYS}
    for key in _MODEL_KEYS:
        if cfg.get(key) is not None and key not in train:
            train[key] = cfg[key]
    train.setdefault("seed", int(cfg.get("seed", 12)))
    return TrainSettings.from_dict(train)


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    parser = dataset_parser(__doc__ or "")
    parser.add_argument("--variant", required=True, help="a name in generation.train.variants")
    args = parser.parse_args(argv)
    name = args.dataset
    cfg = apply_profile(load_params().get("generation") or {})
    train_cfg = cfg.get("train") or {}
    variants = train_cfg.get("variants") or {}
    if args.variant not in variants:
        print(f"train_generator: unknown variant {args.variant!r} ({sorted(variants)})")
        return 2
    spec = variants[args.variant]
    retrieval = retrieval_name(str(spec["retrieval"]), cfg["retriever"])
    prompt_kind = str(spec.get("prompt", "rule"))
    settings = settings_from(cfg)
    base = data_dir(name)
    out_dir = base / "generation"
    adapter_dir = out_dir / "adapters" / args.variant
    tracked = {
        "generation": {k: v for k, v in cfg.items() if k not in {"grid", "api"}},
        "variant": {"name": args.variant, "retrieval": retrieval, "prompt": prompt_kind},
    }
    with stage_run("train_generator", name, project_dir=PROJECT_DIR, params=tracked) as run:
        run.set_tags(
            {
                "rulerag.variant": args.variant,
                "rulerag.stage_instance": f"train_generator@{name}-{args.variant}",
            }
        )
        n_train = int(train_cfg.get("samples", 2048))
        n_dev = int(train_cfg.get("dev_samples", 0))
        seed = int(cfg.get("seed", 12))
        rules = str(spec.get("rules", "all"))
        pairs = fg_examples(
            base, n_train + n_dev, seed, retrieval, prompt_kind, rules, cfg, shuffle=True
        )
        dev, train = pairs[:n_dev], pairs[n_dev:]
        from rulerag.generation.models import load_causal_lm, load_tokenizer
        from rulerag.generation.training import train_lora

        model_name = str(cfg["model"])
        tokenizer = load_tokenizer(model_name, padding_side="right")
        model = load_causal_lm(model_name, quantization=settings.quantization, dtype=settings.dtype)
        result = train_lora(
            model, tokenizer, train, dev, settings, adapter_dir, base_model=model_name
        )
        stats = {
            k: v
            for k, v in result.stats.items()
            if k not in {"loss_curve", "dev_curve", "settings"}
        }
        stats.update({"variant": args.variant, "retrieval": retrieval, "prompt": prompt_kind})
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
        run.log_artifact(adapter_dir, "adapter")
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
    sys.exit(main())
