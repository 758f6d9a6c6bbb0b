"""Stage `train_r2ag`: the R²-Former of one R²AG variant (paper §3.5) on F_G.

Draws `r2ag.train.samples` + `dev_samples` F_G queries (seeded, as `train_generator` does),
takes their documents from the variant's retrieval run over F_G, marks each document of the
variant's prompt with a placeholder, computes the retrieval features with the run's dense
encoder, and trains the R²-Former on LM + QDM loss with `generation.model` frozen (LoRA on it
for a `lora: true` variant). Writes data/<dataset>/generation/r2ag_models/<variant>/ (the
R²-Former, its metadata, LoRA if any), train_r2ag_<variant>.json (DVC metrics) and
train_r2ag_<variant>_loss.csv (DVC plots), and logs them and the module to MLflow.
"""

from __future__ import annotations

import sys
from dataclasses import asdict

from pipeline_steps.common import (
    MODEL_CACHE,
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    numeric_metrics,
    run_stage,
)
from rulerag.generation.config import checked_generation_settings, retrieval_name
from rulerag.generation.generators import passive_openmp
from rulerag.generation.r2ag.settings import r2ag_settings
from rulerag.generation.samples import fg_samples
from rulerag.io import atomic_open, staged_outputs, write_json
from rulerag.retrieval.configs import retrieve_settings
from rulerag.retrieval.data import read_rule_texts
from rulerag.retrieval.settings import index_settings
from rulerag.tracking import TAG_STAGE_INSTANCE, stage_run

#: the loss parts each curve point has (total, LM, QDM)
LOSSES = ("loss", "lm", "qdm")


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    parser = dataset_parser(__doc__ or "")
    parser.add_argument("--variant", required=True, help="a name in r2ag.variants")
    args = parser.parse_args(argv)
    name, variant = args.dataset, args.variant
    params = load_params()
    generation = checked_generation_settings(params)
    settings = r2ag_settings(params.get("r2ag"))
    spec = settings.variant(variant)
    retrieval = retrieval_name(spec.retrieval, generation.retriever)
    base = data_dir(name)
    out_dir = base / "generation"
    tracked = {
        "r2ag": {**asdict(settings), "profiles": None},
        "variant": {"name": variant, **asdict(spec), "retrieval": retrieval},
        "generation.model": generation.model,
    }
    with stage_run("train_r2ag", name, project_dir=PROJECT_DIR, params=tracked) as run:
        instance = f"train_r2ag@{name}-{variant}"
        run.set_tags({"rulerag.variant": variant, TAG_STAGE_INSTANCE: instance})
        from rulerag.generation.r2ag.encoding import open_feature_encoder
        from rulerag.generation.r2ag.fit import fit_variant, variant_dir
        from rulerag.generation.r2ag.training import save_r2ag

        n_train, n_dev = settings.train.samples, settings.train.dev_samples
        samples = fg_samples(base, n_train + n_dev, retrieval, spec.rules, generation, shuffle=True)
        features = open_feature_encoder(
            base,
            retrieval,
            index_settings(params.get("index")),
            read_rule_texts(base / "rules" / "bank.parquet"),
            encoder=settings.encoder or generation.retriever,
            rule_query=retrieve_settings(params.get("retrieve")).rule_query,
            mask=settings.feature_mask(),
            model_cache=MODEL_CACHE,
        )
        result = fit_variant(
            samples, n_dev, spec, features, generation, settings, retrieval=retrieval
        )
        folder = variant_dir(base, variant)
        with staged_outputs(folder, "train_r2ag") as staging:
            save_r2ag(result.model, staging, result.meta, result.stats)
        curves = {k: result.stats.pop(k) for k in ("loss_curve", "dev_curve")}
        stats = {"variant": variant, **result.meta, **result.stats}
        write_json(out_dir / f"train_r2ag_{variant}.json", stats)
        with atomic_open(out_dir / f"train_r2ag_{variant}_loss.csv") as handle:
            handle.write("step,loss,lm,qdm,split\n")
            for split, curve in (("train", "loss_curve"), ("dev", "dev_curve")):
                for p in curves[curve]:
                    values = [p[k] for k in LOSSES]
                    handle.write(f"{p['step']},{','.join(f'{v:.5f}' for v in values)},{split}\n")
                    logged = {f"{split}_{k}": v for k, v in zip(LOSSES, values, strict=True)}
                    run.log_metrics(logged, p["step"])
        run.log_metrics(numeric_metrics(stats))
        run.log_artifact(folder, "r2ag")
        run.log_artifact(out_dir / f"train_r2ag_{variant}.json")
        run.log_artifact(out_dir / f"train_r2ag_{variant}_loss.csv")
    dev_before, dev_best = stats.get("dev_before") or {}, stats.get("dev_best") or {}
    print(
        f"train_r2ag@{name}-{variant}: {stats['train_samples']} samples, {stats['steps']} steps "
        f"in {stats['train_seconds']:.0f}s; loss {stats['first_loss']:.3f} -> "
        f"{stats['last_loss']:.3f}; dev LM {dev_before.get('lm', float('nan')):.3f} -> "
        f"{dev_best.get('lm', float('nan')):.3f}, QDM accuracy "
        f"{dev_before.get('qdm_accuracy', float('nan')):.2f} -> "
        f"{dev_best.get('qdm_accuracy', float('nan')):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
