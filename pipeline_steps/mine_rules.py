"""Stage `mine_rules`: data/<dataset>/kg -> data/<dataset>/rules/.

Mines rules from the configured splits (default: train only) with the static (AMIE 3-style)
or temporal (TLogic-style) miner, or imports rules mined by the original tools, then selects
the RuleRAG rule bank (`rulerag.rules.mining.mine_rule_bank`). Writes rules.parquet (all rules
with statistics), bank.parquet, rules.txt, stats.json, confidence.csv (DVC plot) and
confidence.png.
"""

from __future__ import annotations

import sys

from pipeline_steps.common import numeric_metrics, run_stage, stage_inputs
from rulerag.io import staged_outputs
from rulerag.kg.registry import DATASETS
from rulerag.kg.store import read_kg
from rulerag.rules.mining import mine_rule_bank


def main(argv: list[str] | None = None) -> int:
    stage = stage_inputs("mine_rules", argv, __doc__)
    name, layout = stage.dataset, stage.layout
    section = stage.params.section_values("mine_rules")
    paper = DATASETS[name].paper.get("rules") if name in DATASETS else None
    with stage.track({"mine_rules": section}) as run:
        mined = mine_rule_bank(read_kg(layout.kg), stage.params.mine_rules, name, paper)
        provenance = {"stage": "mine_rules", "dataset": name, "params": section}
        with staged_outputs(layout.rules_dir, "mine_rules") as staging:
            mined.write(staging, provenance)
        run.log_metrics(numeric_metrics(mined.metrics()))
        for artifact in ("stats.json", "rules.txt", "confidence.png", "confidence.csv"):
            run.log_artifact(layout.rules_dir / artifact)
        run.log_dict(mined.bank.head(100).to_dict("records"), "sample/bank.json")
    stats = mined.stats
    print(
        f"mine_rules@{name}: {len(mined.rules):,} rules {stats['rules_by_length']} in "
        f"{mined.seconds:.1f}s; bank {len(mined.bank)} rules over "
        f"{stats['relations_covered']}/{stats['relations_with_facts']} relations "
        f"(paper: {stats['paper_bank_size']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
