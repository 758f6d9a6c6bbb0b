"""What rule application takes: the `apply_rules` section's knobs and the choices they name
(aggregation, ties, noisy-or's precision, the baseline's place), each checked where it is built.
Rule application itself is `rulerag.rules.application`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from rulerag.settings import (
    NOT_A_PARAM,
    Count,
    Fraction,
    NonNegative,
    Positive,
    Seed,
    load_settings,
)

__all__ = [
    "AGGREGATIONS",
    "BASELINES",
    "NOISY_OR_MODES",
    "NRNOISY_TEMPORAL",
    "Aggregation",
    "ApplySettings",
    "Baseline",
    "ClusterLabels",
    "NoisyOr",
    "TieRank",
    "apply_rules_settings",
    "check_discrimination_bound",
    "check_noisy_or",
]


#: how a candidate's per-rule scores combine into its rank
Aggregation = Literal["noisy_or", "max", "nrnoisy_or"]
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)

#: where an answer tied with other candidates ranks among them
TieRank = Literal["last", "first"]

#: how noisy-or is computed: float32 (TLogic's reference code: 1 - Π(1 - s) in float32 rounds
#: to 1.0 once Π falls below 2^-24, tying every candidate that many rules reach) or exact
#: (ranked by -Σ log(1 - s) in float64, the same order without the rounding)
NoisyOr = Literal["float32", "exact"]
NOISY_OR_MODES: tuple[str, ...] = get_args(NoisyOr)

#: where link forecasting's evaluation uses TLogic's baseline, the share of the query
#: relation's training facts with each object: for queries no rule answers (TLogic), or
#: also below the rules (ties among the rules' candidates broken by it, every entity the rules
#: do not reach ranked after theirs by it)
Baseline = Literal["unanswered", "below_rules"]
BASELINES: tuple[str, ...] = get_args(Baseline)

#: Per head relation (TLogic id) the cluster of each of its rules, in `applied_rules` order, or
#: None where SAFRAN's search chose its max approach (maxplus) for that head
ClusterLabels = Mapping[int, Sequence[int] | None]

#: Why nrnoisy_or is refused for temporal rules (ApplySettings and the params check say it)
NRNOISY_TEMPORAL = (
    "aggregation nrnoisy_or (SAFRAN) is defined for static rules only: it clusters rules by "
    "the Jaccard overlap of the triples they infer on the training graph, and a temporal "
    "rule's predictions and scores depend on the query time (TLogic's recency), so there is "
    "no time-free set of inferred triples to compare; use noisy_or or max"
)


def check_discrimination_bound(bound: int) -> None:
    """0 (no bound) or at least 2: with 1 every rule would predict nothing."""
    if bound < 0 or bound == 1:
        raise ValueError(
            "discrimination_bound must be 0 (no bound) or at least 2 (1 would drop every "
            f"prediction), not {bound}"
        )


def check_noisy_or(mode: str, aggregation: str) -> None:
    """noisy_or is float32 or exact, and exact only with aggregation noisy_or (with max or
    nrnoisy_or it would change nothing, which a user who set it did not mean)."""
    if mode not in NOISY_OR_MODES:
        raise ValueError(f"noisy_or must be one of {NOISY_OR_MODES}, not {mode!r}")
    if mode == "exact" and aggregation != "noisy_or":
        raise ValueError(
            f"noisy_or: exact computes aggregation noisy_or; with aggregation {aggregation} "
            "it would change nothing (leave noisy_or: float32)"
        )


@dataclass(frozen=True)
class ApplySettings:
    """params.yaml `apply_rules`: TLogic's application knobs (`apply.py` defaults with the
    paper's ICEWS14 command), the choices beside them and the stage's own (`evaluate_facts`,
    `candidates`, `seed`). `temporal` is no params.yaml key: the stage takes it from the data
    (`for_data`); the section as loaded leaves it None."""

    lengths: tuple[Positive, ...] = field(
        default=(1, 2, 3), metadata={"help": "rule lengths applied (TLogic's ICEWS14 run: 1 2 3)"}
    )
    # TLogic's -w
    window: Count = field(
        default=0,
        metadata={"help": "0: every fact before the query time; n: the last n steps"},
    )
    top_k: Positive = field(
        default=20,
        metadata={"help": "stop once the best top_k candidates have distinct scores"},
    )
    lmbda: NonNegative = field(
        default=0.1, metadata={"help": "recency decay λ of TLogic's score_12"}
    )
    a: Fraction = field(default=0.5, metadata={"help": "weight of the confidence against recency"})
    min_confidence: Fraction = field(
        default=0.01,
        metadata={
            "help": (
                "TLogic's filter_rules (AnyBURL's rules with constants: 0.0001, its weights put "
                "zero-body rules at 0.01 x their confidence)"
            )
        },
    )
    #: AMIE's rules have no such floor
    min_body_support: NonNegative = field(default=2.0, metadata={"help": "temporal rules only"})
    #: False for a static KG: no time order or recency, a candidate's score from one rule is
    #: the rule's confidence (AMIE's PCA confidence). Not a params.yaml knob: the stage takes it
    #: from the data (`for_data`); None (the section as loaded) applies nothing
    temporal: bool | None = field(default=True, metadata=NOT_A_PARAM)
    #: noisy_or (TLogic; AnyBURL's `noisyor`), max (AnyBURL's `maxplus`: the best rule's
    #: score, ties broken by the next best rules) or nrnoisy_or (SAFRAN's non-redundant
    #: noisy-or: max inside clusters of overlapping rules, noisy-or across; static only)
    aggregation: Aggregation = "noisy_or"
    #: nrnoisy_or: the Jaccard thresholds SAFRAN's grid search tries per head relation,
    #: i / cluster_resolution for i = 1..cluster_resolution (SAFRAN's RESOLUTION, 200)
    cluster_resolution: Positive = field(
        default=200,
        metadata={"help": "nrnoisy_or: thresholds tried, i / 200 (SAFRAN's RESOLUTION)"},
    )
    #: nrnoisy_or: the search scores a clustering by the validation MRR of the top this many
    #: candidates (SAFRAN's TOP_K_OUTPUT, 10)
    cluster_top_k: Positive = field(
        default=10,
        metadata={"help": "nrnoisy_or: the search's validation MRR counts the top 10"},
    )
    #: nrnoisy_or: the search's validation ranks put an answer tied with other candidates
    #: last among them (SAFRAN) or first (as `filtered_rank`, TLogic's rank, counts). Not a
    #: params.yaml knob: tuned with ties first, the search prefers clusterings that tie the
    #: answer with more candidates (FB15k-237: MRR 0.315 with ties first, 0.196 with ties
    #: last; docs/results.md), a gain of the rank's convention, not of the ranking
    cluster_ties: TieRank = field(default="last", metadata=NOT_A_PARAM)
    #: static rules only: a rule that predicts at least this many candidates for a query
    #: predicts none for it (AnyBURL's and SAFRAN's DISCRIMINATION_BOUND, 1000 in SAFRAN and in
    #: AnyBURL until 2021: so many candidates tell a top-k ranking nothing); 0: no bound.
    #: Temporal rules follow TLogic, which has none
    discrimination_bound: Count = 0
    #: noisy_or in float32 as TLogic computes it, or exact (`NoisyOr`); aggregation noisy_or
    noisy_or: NoisyOr = "float32"
    #: where the evaluation (`forecasting.forecast`) ranks by TLogic's baseline (`Baseline`):
    #: below_rules, better on every KG in its comparison protocol (docs/results.md); TLogic's
    #: own protocol is unanswered. RuleQA's explained candidates are the rules' own either way
    baseline: Baseline = "below_rules"
    #: link forecasting on the KG's test split: a seeded sample of this many test facts (both
    #: directions each); None = every test fact (ICEWS14: 13,222 facts)
    evaluate_facts: Positive | None = 500
    candidates: Positive = field(
        default=10, metadata={"help": "explained candidates kept per RuleQA test query"}
    )
    seed: Seed = 12

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, not {self.aggregation!r}")
        check_noisy_or(self.noisy_or, self.aggregation)
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {BASELINES}, not {self.baseline!r}")
        if self.aggregation == "nrnoisy_or" and self.temporal:
            raise ValueError(NRNOISY_TEMPORAL)
        if self.cluster_ties not in get_args(TieRank):
            raise ValueError(f"cluster_ties must be last or first, not {self.cluster_ties!r}")
        check_discrimination_bound(self.discrimination_bound)
        if self.cluster_resolution < 1 or self.cluster_top_k < 1:
            raise ValueError(
                "cluster_resolution and cluster_top_k must be at least 1, not "
                f"{self.cluster_resolution} and {self.cluster_top_k}"
            )

    def for_data(self, temporal: bool) -> ApplySettings:
        """These settings for a temporal KG's rules or a static one's (checked again: nrnoisy_or
        is refused for temporal rules)."""
        return replace(self, temporal=temporal)

    def applicable(self) -> ApplySettings:
        """These settings, refused where `temporal` is None (the section as loaded: the stage
        sets it from the data with `for_data`)."""
        if self.temporal is None:
            raise ValueError(
                "ApplySettings.temporal is None (params.yaml's apply_rules section as loaded): "
                "set it from the data first, settings.for_data(temporal)"
            )
        return self


def apply_rules_settings(section: Mapping[str, Any] | None) -> ApplySettings:
    """params.yaml's `apply_rules` section as typed settings, strictly; `temporal` None (the
    stage takes it from the data: `ApplySettings.for_data`)."""
    return load_settings(ApplySettings, section, "apply_rules", given={"temporal": None})
