"""Stage `mine_rules`: data/<dataset>/kg -> data/<dataset>/rules/.

Mines rules from the configured splits (default: train only) with the static (AMIE 3-style)
or temporal (TLogic-style) miner, or imports rules mined by the original tools, then selects
the RuleRAG rule bank (`rulerag.rules.mining`). Writes rules.parquet (all rules with
statistics), bank.parquet, rules.txt, stats.json, confidence.csv (DVC plot) and confidence.png.
"""

from __future__ import annotations

import sys
import time

from pipeline_steps.common import (
    PROJECT_DIR,
    data_dir,
    dataset_parser,
    load_params,
    numeric_metrics,
    run_stage,
)
from rulerag.errors import InputError
from rulerag.io import atomic_open, staged_outputs, write_json, write_parquet
from rulerag.kg.registry import DATASETS
from rulerag.kg.store import read_kg
from rulerag.rules.bank import confidence_histogram, rules_frame, rules_text, select_bank
from rulerag.rules.mining import (
    describe_rules,
    import_rules,
    mine,
    mine_rules_settings,
    plot_confidence,
)
from rulerag.tracking import stage_run


def main(argv: list[str] | None = None) -> int:
    args = dataset_parser(__doc__ or "").parse_args(argv)
    name = args.dataset
    section = load_params().get("mine_rules") or {}
    settings = mine_rules_settings(section)
    kg = read_kg(data_dir(name) / "kg")
    splits = list(settings.splits)
    facts = kg.facts[kg.facts["split"].isin(splits)]
    relation_names = kg.relations.set_index("id")["name"].to_dict()
    out_dir = data_dir(name) / "rules"
    imported = settings.import_.get(name)
    with stage_run(
        "mine_rules", name, project_dir=PROJECT_DIR, params={"mine_rules": section}
    ) as run:
        started = time.perf_counter()
        if imported:
            relation_keys = dict(zip(kg.relations["key"], kg.relations["id"], strict=True))
            rules = import_rules(imported, relation_keys, len(kg.relations))
        elif facts.empty:
            raise InputError(
                f"mine_rules@{name}: the KG has no facts in splits {splits} "
                f"(it has {sorted(kg.lines_read)}); set mine_rules.splits"
            )
        else:
            rules = mine(facts, len(kg.entities), len(kg.relations), kg.temporal, settings)
        seconds = time.perf_counter() - started
        frame = rules_frame(rules, relation_names)
        bank = select_bank(frame, settings.bank_for(name))
        miner = "import" if imported else ("temporal" if kg.temporal else "static")
        paper = DATASETS[name].paper.get("rules") if name in DATASETS else None
        stats = describe_rules(name, miner, seconds, frame, bank, facts, paper)
        hist = confidence_histogram(frame, bank)
        provenance = {"stage": "mine_rules", "dataset": name, "params": section}
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
        f"bank {len(bank)} rules over {stats['relations_covered']}/"
        f"{stats['relations_with_facts']} relations (paper: {stats['paper_bank_size']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
