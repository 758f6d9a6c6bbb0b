"""Stage `apply_rules`: the mined rules applied as their miners' communities apply them.

Link forecasting (temporal KG, TLogic's application and evaluation) or link prediction (static
KG, AMIE rules by PCA confidence, applied to the training facts as AnyBURL and SAFRAN apply
them) on the KG's test split (`rulerag.rules.forecasting`): MRR and
Hits@1/3/10, time-aware filtered, both directions, beside the published figures where there are
some. Then RuleQA's test queries answered by the rules with explained candidates, for the grid
(`rulerag.rules.answers.apply_mined_rules`). Writes data/<dataset>/rule_application/:
metrics.json, results.md, answers.jsonl (per query: candidates with score, rule, evidence).
"""

from __future__ import annotations

import sys
from dataclasses import asdict

from pipeline_steps.common import numeric_metrics, run_stage, stage_inputs
from rulerag.io import staged_outputs
from rulerag.rules.answers import apply_mined_rules


def main(argv: list[str] | None = None) -> int:
    stage = stage_inputs("apply_rules", argv, __doc__)
    layout, settings = stage.layout, stage.params.apply_rules
    corpus_splits = stage.params.build_benchmark.corpus.splits  # the retrievers' history
    rule_splits = stage.params.mine_rules.splits  # a static KG's graph for link prediction
    with stage.track(asdict(settings), instance="") as run:
        applied = apply_mined_rules(settings, corpus_splits, layout, rule_splits)
        with staged_outputs(layout.rule_application, "apply_rules") as staging:
            applied.write(staging)
        metrics = {k: v for k, v in applied.metrics.items() if k != "published"}
        run.log_metrics(numeric_metrics(metrics))
        for artifact in ("metrics.json", "results.md"):
            run.log_artifact(layout.rule_application / artifact)
    print(applied.results)
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
