"""Stage `mine_rules`: data/<dataset>/kg -> data/<dataset>/rules/.

Mines rules from the configured splits (default: train only) with the static (AMIE 3-style)
or temporal (TLogic-style) miner, or imports rules mined by the original tools, then selects
the RuleRAG rule bank. Writes rules.parquet (all rules with statistics), bank.parquet,
rules.txt, stats.json, confidence.csv (DVC plot) and confidence.png.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pipeline_steps.common import (  # noqa: E402
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    numeric_metrics,
)
from rulerag.io import atomic_open, staged_outputs, write_json, write_parquet  # noqa: E402
from rulerag.kg.store import read_kg  # noqa: E402
from rulerag.rules.bank import (  # noqa: E402
    BankConfig,
    confidence_histogram,
    rules_frame,
    rules_text,
    select_bank,
)
from rulerag.rules.rule import Rule  # noqa: E402
from rulerag.tracking import stage_run  # noqa: E402


def mine(kg_facts, n_entities: int, n_relations: int, temporal: bool, cfg: dict) -> list[Rule]:
    """Run the miner that fits the KG, with params.yaml's settings."""
    if temporal:
        from rulerag.rules.temporal_miner import mine_temporal

        t = cfg.get("temporal") or {}
        return mine_temporal(
            kg_facts,
            n_entities,
            n_relations,
            lengths=tuple(t.get("lengths", (1, 2, 3))),
            walks_per_relation=int(t.get("walks_per_relation", 200)),
            transition=t.get("transition", "exp"),
            seed=int(cfg.get("seed", 12)),
            num_samples=int(t.get("num_samples", 500)),
            exact=bool(t.get("exact", False)),
            min_confidence=float(t.get("min_confidence", 0.0)),
            min_rule_support=int(t.get("min_rule_support", 1)),
            min_body_support=int(t.get("min_body_support", 1)),
        )
    from rulerag.rules.static_miner import mine_static

    s = cfg.get("static") or {}
    return mine_static(
        kg_facts,
        n_entities,
        n_relations,
        max_atoms=int(s.get("max_atoms", 3)),
        min_support=int(s.get("min_support", 100)),
        min_head_coverage=float(s.get("min_head_coverage", 0.01)),
        min_pca_confidence=float(s.get("min_pca_confidence", 0.1)),
        min_std_confidence=float(s.get("min_std_confidence", 0.0)),
        min_initial_support=int(s.get("min_initial_support", 100)),
        skyline=bool(s.get("skyline", True)),
    )


def import_rules(
    spec: dict[str, Any], relation_keys: dict[str, int], n_relations: int
) -> list[Rule]:
    """Rules mined elsewhere: AMIE 3's TSV output or TLogic's rules JSON."""
    path = Path(spec["path"]).expanduser()
    if spec.get("format") == "amie":
        from rulerag.rules.amie_io import read_amie_tsv

        # Rules with constants (AMIE's -const mode) have no place in the Rule type.
        return read_amie_tsv(
            path, relation_keys, skip_unsupported=bool(spec.get("skip_unsupported", False))
        )
    if spec.get("format") == "tlogic":
        from rulerag.rules.tlogic_io import read_tlogic_json

        return read_tlogic_json(path, n_relations)
    raise ValueError(f"mine_rules.import: format must be 'amie' or 'tlogic', not {spec!r}")


def plot_confidence(hist, path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = range(len(hist))
    ax.bar(x, hist["mined"], label="mined", color="#9ecae1")
    ax.bar(x, hist["bank"], label="bank", color="#3182bd")
    ax.set_xticks(list(x)[::2], hist["confidence"].iloc[::2], rotation=45, ha="right")
    ax.set_xlabel("confidence")
    ax.set_ylabel("rules")
    ax.set_yscale("symlog")
    ax.set_title(title)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = dataset_parser(__doc__ or "").parse_args(argv)
    name = args.dataset
    params = load_params()
    cfg = params.get("mine_rules") or {}
    kg = read_kg(data_dir(name) / "kg")
    splits = list(cfg.get("splits") or ["train"])
    facts = kg.facts[kg.facts["split"].isin(splits)]
    relation_names = kg.relations.set_index("id")["name"].to_dict()
    out_dir = data_dir(name) / "rules"
    imported = (cfg.get("import") or {}).get(name)
    with stage_run("mine_rules", name, project_dir=PROJECT_DIR, params={"mine_rules": cfg}) as run:
        started = time.perf_counter()
        if imported:
            relation_keys = dict(zip(kg.relations["key"], kg.relations["id"], strict=True))
            rules = import_rules(imported, relation_keys, len(kg.relations))
        elif facts.empty:
            print(
                f"mine_rules@{name}: the KG has no facts in splits {splits} "
                f"(it has {sorted(kg.lines_read)}); set mine_rules.splits",
                file=sys.stderr,
            )
            return 2
        else:
            rules = mine(facts, len(kg.entities), len(kg.relations), kg.temporal, cfg)
        seconds = time.perf_counter() - started
        frame = rules_frame(rules, relation_names)
        bank_cfg = cfg.get("bank") or {}
        bank = select_bank(
            frame,
            BankConfig(
                lengths=tuple(bank_cfg.get("lengths", (1,))),
                min_confidence=float(bank_cfg.get("min_confidence", 0.0)),
                min_support=float(bank_cfg.get("min_support", 0.0)),
                top_n_per_head=bank_cfg.get("top_n_per_head"),
            ),
        )
        with_facts = int(facts["relation"].nunique())
        stats = {
            "dataset": name,
            "miner": "import" if imported else ("temporal" if kg.temporal else "static"),
            "mining_seconds": round(seconds, 2),
            "rules": len(frame),
            "rules_by_length": {
                str(k): int(v) for k, v in frame["length"].value_counts().sort_index().items()
            },
            "bank": len(bank),
            "bank_by_length": {
                str(k): int(v) for k, v in bank["length"].value_counts().sort_index().items()
            },
            "relations_with_facts": with_facts,
            "relations_covered": int(bank["head_relation"].nunique()),
            "relations_covered_fraction": round(bank["head_relation"].nunique() / with_facts, 4)
            if with_facts
            else 0.0,
            "bank_mean_confidence": round(float(bank["score"].mean()), 4) if len(bank) else 0.0,
            "paper_bank_size": None,
        }
        from rulerag.kg.registry import DATASETS

        if name in DATASETS:
            stats["paper_bank_size"] = DATASETS[name].paper.get("rules")
        hist = confidence_histogram(frame, bank)
        provenance = {"stage": "mine_rules", "dataset": name, "params": cfg}
        with staged_outputs(out_dir, "mine") as staging:
            write_parquet(staging / "rules.parquet", frame, provenance)
            write_parquet(staging / "bank.parquet", bank, provenance)
            with atomic_open(staging / "rules.txt") as handle:
                handle.write(rules_text(frame))
            with atomic_open(staging / "confidence.csv") as handle:
                hist.to_csv(handle, index=False)
            plot_confidence(hist, staging / "confidence.png", f"{name}: rule confidence")
            write_json(staging / "stats.json", stats)
        run.log_metrics(numeric_metrics(stats))
        for artifact in ("stats.json", "rules.txt", "confidence.png", "confidence.csv"):
            run.log_artifact(out_dir / artifact)
        run.log_dict(bank.head(100).to_dict("records"), "sample/bank.json")
    print(
        f"mine_rules@{name}: {len(frame):,} rules {stats['rules_by_length']} in {seconds:.1f}s; "
        f"bank {len(bank)} rules over {stats['relations_covered']}/{with_facts} relations "
        f"(paper: {stats['paper_bank_size']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
