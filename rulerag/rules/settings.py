"""What rule application takes: the `apply_rules` section's knobs and the choices they name
(aggregation, ties, noisy-or's precision, the baseline's place), each checked where it is built.
Rule application itself is `rulerag.rules.application`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

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
    """TLogic's application knobs (`apply.py` defaults with the paper's ICEWS14 command)."""

    lengths: tuple[int, ...] = (1, 2, 3)
    window: int = 0  # 0: all history before t; n > 0: the last n time steps; TLogic's -w
    top_k: int = 20
    lmbda: float = 0.1
    a: float = 0.5
    min_confidence: float = 0.01
    min_body_support: float = 2.0
    #: False for a static KG: no time order or recency, a candidate's score from one rule is
    #: the rule's confidence (AMIE's PCA confidence)
    temporal: bool = True
    #: noisy_or (TLogic; AnyBURL's `noisyor`), max (AnyBURL's `maxplus`: the best rule's
    #: score, ties broken by the next best rules) or nrnoisy_or (SAFRAN's non-redundant
    #: noisy-or: max inside clusters of overlapping rules, noisy-or across; static only)
    aggregation: Aggregation = "noisy_or"
    #: nrnoisy_or: the Jaccard thresholds SAFRAN's grid search tries per head relation,
    #: i / cluster_resolution for i = 1..cluster_resolution (SAFRAN's RESOLUTION, 200)
    cluster_resolution: int = 200
    #: nrnoisy_or: the search scores a clustering by the validation MRR of the top this many
    #: candidates (SAFRAN's TOP_K_OUTPUT, 10)
    cluster_top_k: int = 10
    #: nrnoisy_or: the search's validation ranks put an answer tied with other candidates
    #: last among them (SAFRAN) or first (as `filtered_rank`, TLogic's rank, counts). Not a
    #: params.yaml knob: tuned with ties first, the search prefers clusterings that tie the
    #: answer with more candidates (FB15k-237: MRR 0.315 with ties first, 0.196 with ties
    #: last; docs/results.md), a gain of the rank's convention, not of the ranking
    cluster_ties: TieRank = "last"
    #: static rules only: a rule that predicts at least this many candidates for a query
    #: predicts none for it (AnyBURL's and SAFRAN's DISCRIMINATION_BOUND, 1000 in SAFRAN and in
    #: AnyBURL until 2021: so many candidates tell a top-k ranking nothing); 0: no bound.
    #: Temporal rules follow TLogic, which has none
    discrimination_bound: int = 0
    #: noisy_or in float32 as TLogic computes it, or exact (`NoisyOr`); aggregation noisy_or
    noisy_or: NoisyOr = "float32"
    #: where the evaluation (`forecasting.forecast`) ranks by TLogic's baseline (`Baseline`);
    #: RuleQA's explained candidates are the rules' own either way
    baseline: Baseline = "unanswered"

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
