"""params.yaml's `generalisation` section as typed settings (read strictly): the rule-bank
generalisation experiment (`rulerag.experiments.generalisation`, stage `generalisation`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rulerag.settings import Count, Positive, Seed, UniqueDatasetNames, load_settings

__all__ = ["GeneralisationSettings", "generalisation_settings"]


@dataclass(frozen=True)
class GeneralisationSettings:
    """params.yaml `generalisation` (stage `generalisation`, `make exp-generalisation`)."""

    HELP: ClassVar[str] = (
        "Stage `generalisation` (the anonymous version's Sec. 6, Figure 5; `make "
        "exp-generalisation`): the rule bank split into `banks` disjoint equal-size banks by head "
        "relation (seeded); RuleRAG-FT (RGFT encoder of generation.retriever + RGFT adapter) "
        "trained on each bank's F_R / F_G queries and tested on every bank's test queries; EM gain "
        "over Standard RAG as a heat map. CPU-sized: ~25 min for ICEWS14 on 2 cores (4 encoders, 4 "
        "adapters, 5 x 100 answers)."
    )

    datasets: UniqueDatasetNames = field(
        default=(), metadata={"help": "RuleQA sets to run it on; [] = the stage is off"}
    )
    # disjoint rule banks (the paper: 4)
    banks: Positive = field(default=4, metadata={"help": "R_1..R_4 (the paper: 4)"})
    seed: Seed = 12
    retriever_steps: Positive = field(
        default=40, metadata={"help": "RGFT steps per bank (train_retriever's other knobs)"}
    )
    generator_samples: Positive = field(
        default=48,
        metadata={"help": "F_G training samples per bank (generation.train's other knobs)"},
    )
    dev_samples: Count = field(
        default=8, metadata={"help": "held-out F_G samples per bank (best adapter checkpoint)"}
    )
    test_queries: Positive | None = field(
        default=25, metadata={"help": "test queries per bank (seeded); null = all of the bank's"}
    )


def generalisation_settings(section: Mapping[str, Any] | None) -> GeneralisationSettings:
    return load_settings(GeneralisationSettings, section, "generalisation")
