"""Stage `generalisation`: RuleRAG-FT trained on one rule bank, tested on another (Figure 5).

The work is `rulerag.experiments.run_generalisation`. It splits the rule bank into
`generalisation.banks` disjoint, equal-size banks (`generalisation.split_bank`). For each bank
R_i it trains an RGFT query encoder on R_i's F_R items (`generation.retriever`'s encoder,
`retriever_steps` steps, train_retriever's other knobs), searches every bank's sampled test
queries and R_i's F_G queries with it (q ∘ r), and trains an RGFT generator adapter on R_i's F_G
samples (generation.train's knobs, `generator_samples`); then it answers every bank's test
queries with that pair (the `rulerag_ft` row's prompt). Standard RAG (the `standard_rag` row,
the retrieve stage's run) answers the same queries. Writes data/<dataset>/generalisation/:
results.md, gains.csv (the 4×4 table), cells.csv (DVC plot), gains.png (heat map),
metrics.json; trained models stay under generalisation/work/ while it runs.
"""

from __future__ import annotations

import sys

from pipeline_steps.common import run_stage, stage_inputs
from rulerag.experiments.run_generalisation import run_generalisation
from rulerag.generation.generators import passive_openmp


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    stage = stage_inputs("generalisation", argv, __doc__)
    params, name = stage.params, stage.dataset
    tracked = {
        "generalisation": params.section_values("generalisation"),
        "generation.model": params.generation.model,
    }
    with stage.track(tracked, instance="") as run:
        result = run_generalisation(
            stage.layout,
            params.generalisation,
            params.generation,
            params.retrieve,
            params.index,
            params.train_retriever,
            model_cache=stage.model_cache,
            on_cell=lambda i, j, em: run.log_metrics({f"em_R{i}_on_R{j}": em}),
        )
        result.write(stage.layout.generalisation)
        run.log_metrics(result.stats)
        for artifact in ("results.md", "gains.csv", "gains.png"):
            run.log_artifact(stage.layout.generalisation / artifact)
    stats = result.stats
    print(
        f"generalisation@{name}: gain on the trained bank {stats['mean_gain_same_bank']:+.2f}, "
        f"on the others {stats['mean_gain_other_banks']:+.2f} EM points"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_stage(main))
