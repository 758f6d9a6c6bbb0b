"""The rules package's settings, params.yaml's two rule sections, each checked where it is built:

* `apply_rules` (`ApplySettings`): what rule application takes, its knobs and the choices they
  name (aggregation, ties, noisy-or's precision, the baseline's place). Rule application itself
  is `rulerag.rules.application`, the stage `rulerag.rules.answers`.
* `mine_rules` (`MineRulesSettings`) and its parts, each miner's own: the static miner's
  (`StaticMinerSettings`, with AnyBURL's rules with constants, `ConstantRuleSettings`, and its
  cyclic rules of three atoms, `LongCyclicSettings`), the temporal miner's
  (`TemporalMinerSettings`, with rules with constants, `TemporalConstantSettings`), the bank's
  (`BankConfig`) and rules imported from the original tools (`RuleImport`). The miners are
  `static_miner`, `anyburl_miner`, `long_cyclic`, `temporal_miner`, `temporal_constants`, the
  stage `rulerag.rules.mining`.

Nothing here imports a miner or the application: a stage that only reads the settings (and
`rulerag.params`, which reads every section) loads no NumPy code for it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, ClassVar, Literal, get_args

from annotated_types import Ge, Le

from rulerag.settings import (
    NOT_A_PARAM,
    STRICT_INT,
    Count,
    DatasetName,
    Fraction,
    NonNegative,
    Positive,
    Seed,
    load_settings,
    param_key,
)

__all__ = [
    "AGGREGATIONS",
    "ANYBURL_MIN_SUPPORT",
    "BASELINES",
    "CONSTANT_KINDS",
    "IMPORT_FORMATS",
    "NOISY_OR_MODES",
    "NRNOISY_TEMPORAL",
    "SEED",
    "Aggregation",
    "ApplySettings",
    "BankConfig",
    "Baseline",
    "ClusterLabels",
    "ConstantKind",
    "ConstantRuleSettings",
    "ImportFormat",
    "LongCyclicSettings",
    "MineRulesSettings",
    "NoisyOr",
    "RuleImport",
    "StaticMinerSettings",
    "TemporalConstantSettings",
    "TemporalMinerSettings",
    "TieRank",
    "apply_rules_settings",
    "check_constant_settings",
    "check_discrimination_bound",
    "check_long_cyclic",
    "check_noisy_or",
    "mine_rules_settings",
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

    HELP: ClassVar[str] = (
        "Stage `apply_rules`: the mined rules (rules.parquet, every length) applied as TLogic "
        "applies them (temporal KGs: history before the query time, score a * confidence + (1 - a) "
        "* exp(λ (t_first_body - t)), noisy-or over rules, stop once the top-k candidates differ) "
        "or by their PCA confidence (static KGs), evaluated on the KG's test split (MRR, "
        "Hits@1/3/10, time-aware filtered, both directions) beside TLogic's published ICEWS14 "
        "figures, and RuleQA's test queries answered with explained candidates (history: the "
        "corpus splits). -> data/<dataset>/rule_application/{metrics.json, results.md, "
        "answers.jsonl}"
    )

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
    aggregation: Aggregation = field(
        default="noisy_or",
        metadata={
            "help": (
                "How a candidate's scores from several rules combine: noisy_or (TLogic; AnyBURL's "
                "noisyor), max (AnyBURL's default maxplus: the best rule's score, ties broken by "
                "the next best) or nrnoisy_or (SAFRAN's non-redundant noisy-or, static KGs only: "
                "rules whose predictions on the train split overlap (Jaccard above a threshold "
                "searched per head relation on the valid split) form a cluster; max inside a "
                "cluster, noisy-or across; rulerag/rules/rule_clusters.py). With AMIE's PCA "
                "confidences noisy-or ranks best by our rank (ties first); with ties ranked last "
                'or averaged, nrnoisy_or does on FB15k-237 (docs/results.md "Rules that '
                'answer").'
            )
        },
    )
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
    discrimination_bound: Count = field(
        default=0,
        metadata={
            "help": (
                "Static rules only: a rule that predicts this many candidates or more for a query "
                "predicts none for it (AnyBURL's and SAFRAN's DISCRIMINATION_BOUND, 1000 in both: "
                "so many ties tell a ranking nothing); 0 = no bound. Rules with constants r(X, c) "
                "<= s(X, d | A) also answer r(?, c) with every X their body holds for, as AnyBURL "
                "applies them; the bound keeps those sets small. Temporal rules follow TLogic, "
                "which has no bound."
            )
        },
    )
    #: noisy_or in float32 as TLogic computes it, or exact (`NoisyOr`); aggregation noisy_or
    noisy_or: NoisyOr = field(
        default="float32",
        metadata={
            "help": (
                "noisy_or: float32 computes 1 - Π(1 - s) as TLogic's code does; it rounds to 1.0 "
                "once Π falls below 2^-24 (about 24 rules of score 0.5), tying every candidate "
                "that many rules reach, and the answer ranks first among them. exact ranks by -Σ "
                "log(1 - s) in float64: the same order without the rounding (aggregation noisy_or "
                "only). ICEWS14 beside baseline: below_rules: level on the default rules (-0.0001, "
                "not significant), +0.005 with 1,000 walks per relation, where float32 ties many "
                'more candidates (docs/results.md "The frequency baseline below the rules"). '
                "float32 stays the default (TLogic's; exact changes RuleQA's answer scores): set "
                "exact when mining more rules."
            )
        },
    )
    #: where the evaluation (`forecasting.forecast`) ranks by TLogic's baseline (`Baseline`):
    #: below_rules, better on every KG in its comparison protocol (docs/results.md); TLogic's
    #: own protocol is unanswered. RuleQA's explained candidates are the rules' own either way
    baseline: Baseline = field(
        default="below_rules",
        metadata={
            "help": (
                "Link forecasting's evaluation: TLogic's baseline (the share of the relation's "
                "training facts with each object) ranks the candidates of queries no rule answers "
                "(unanswered: TLogic, whose other queries rank an answer the rules miss at |E|), "
                "or also orders the candidates the rules tie and ranks every entity they miss "
                "after theirs (below_rules). below_rules is better in each KG's comparison "
                "protocol, paired on every test fact: ICEWS14 0.4300 -> 0.4304 (ties first), "
                "FB15k-237 0.2060 -> 0.2417 and NELL-995 0.4056 -> 0.4143 (ties averaged); docs/ "
                'results.md "The frequency baseline below the rules". RuleQA\'s answers stay the '
                "rules' own."
            )
        },
    )
    #: link forecasting on the KG's test split: a seeded sample of this many test facts (both
    #: directions each); None = every test fact (ICEWS14: 13,222 facts)
    evaluate_facts: Positive | None = field(
        default=500,
        metadata={
            "help": (
                "Test facts evaluated (both directions each), a seeded sample; null = every test "
                'fact (ICEWS14: 13,222 facts, 26,444 queries; README "Rules that answer" has the '
                "figures). metrics.json ranks the answer first among the candidates tied with it "
                "(TLogic's protocol) and also averaged and last (ties_average: SAFRAN's / "
                'AnyBURL\'s protocol; docs/results.md "Which rank the figures use")'
            )
        },
    )
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


# params.yaml `mine_rules`: the section (MineRulesSettings) and its parts, each miner's own


#: the default seed of walks and body samples (params.yaml `mine_rules.seed`)
SEED = 12

#: the help of the support floors that are AnyBURL's (`mine_rules.static.constants` and
#: `mine_rules.static.long_cyclic`)
ANYBURL_MIN_SUPPORT = "AnyBURL's THRESHOLD_CORRECT_PREDICTIONS"

#: the kinds of rules with constants the miners learn (`anyburl_miner`, `temporal_constants`)
ConstantKind = Literal["ac1", "ac2", "zero"]
CONSTANT_KINDS: tuple[str, ...] = ("ac1", "ac2", "zero")


@dataclass(frozen=True)
class ConstantRuleSettings:
    """How constant rules are learned (params.yaml `mine_rules.static.constants`)."""

    kinds: tuple[ConstantKind, ...] = field(
        default=(), metadata={"help": "any of [ac1, ac2, zero]; [] = AMIE's closed rules only"}
    )
    min_support: Positive = field(default=2, metadata={"help": ANYBURL_MIN_SUPPORT})
    min_confidence: Fraction = field(
        default=0.0001,
        metadata={"help": "AnyBURL's THRESHOLD_CONFIDENCE (after the weights below)"},
    )
    #: ac1 rules r(X, c) <= s(X, d) need d to have this many s-neighbours X (AnyBURL 2019's
    #: `AC_MIN_NUM_OF_LAST_ATOM_GROUNDINGS` = 5, its `isRedundantACRule`: a rule whose body
    #: constant has fewer is as well said by the few rules about those X themselves)
    min_body_constant_groundings: Count = field(
        default=5, metadata={"help": "ac1: d needs this many s-neighbours (AnyBURL 2019)"}
    )
    # pc in support / (body groundings + pc)
    unseen_negatives: Count = field(
        default=5, metadata={"help": "pc: AnyBURL's UNSEEN_NEGATIVE_EXAMPLES"}
    )
    zero_weight: Fraction = field(
        default=0.01, metadata={"help": "AnyBURL's RULE_ZERO_WEIGHT on zero rules' confidence"}
    )
    ac2_weight: Fraction = field(
        default=0.1, metadata={"help": "AnyBURL's RULE_AC2_WEIGHT on ac2 rules' confidence"}
    )
    #: how the closed (path and pair) rules are scored beside them: `pca` keeps AMIE's PCA
    #: confidence, `anyburl` gives them AnyBURL's too, support / (body size + pc) with the
    #: standard body size (AnyBURL's cyclic rules count every body grounding (X, Y)), so that
    #: all rules share one scale (see `anyburl_miner.closed_rules_confidence`)
    closed_confidence: Literal["pca", "anyburl"] = field(
        default="pca",
        metadata={
            "help": (
                "pca: closed rules keep AMIE's PCA confidence; anyburl: support / (body size + pc)"
            )
        },
    )

    def __post_init__(self) -> None:
        check_constant_settings(self)


def check_constant_settings(settings: Any) -> None:
    """The checks every rules-with-constants setting shares (static: `ConstantRuleSettings`,
    temporal: `TemporalConstantSettings`): known kinds, a support floor of at least
    one, a non-negative pc, and confidences and weights in [0, 1]."""
    unknown = sorted(set(settings.kinds) - set(CONSTANT_KINDS))
    if unknown:
        raise ValueError(f"constant rule kinds must be among {CONSTANT_KINDS}, not {unknown}")
    if settings.min_support < 1 or settings.unseen_negatives < 0:
        raise ValueError("min_support must be >= 1 and unseen_negatives >= 0")
    for name in ("min_confidence", "zero_weight", "ac2_weight"):
        if not 0.0 <= getattr(settings, name) <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {getattr(settings, name)}")


@dataclass(frozen=True)
class LongCyclicSettings:
    """params.yaml `mine_rules.static.long_cyclic`: AnyBURL's cyclic rules of three body atoms."""

    samples_per_head: Count = field(
        default=0, metadata={"help": "head facts sampled per relation; 0 = none learned"}
    )
    rules_per_head: Positive = field(
        default=30, metadata={"help": "candidates counted per head relation, most often seen first"}
    )
    neighbour_cap: Positive = field(
        default=100, metadata={"help": "neighbours followed per entity and step (hubs sampled)"}
    )
    min_seen: Positive = field(
        default=2, metadata={"help": "a candidate is seen in at least this many sampled facts"}
    )
    min_support: Positive = field(default=2, metadata={"help": ANYBURL_MIN_SUPPORT})
    min_confidence: Fraction = field(
        default=0.0001, metadata={"help": "AnyBURL's THRESHOLD_CONFIDENCE"}
    )

    @property
    def enabled(self) -> bool:
        return self.samples_per_head > 0


@dataclass(frozen=True)
class StaticMinerSettings:
    """params.yaml `mine_rules.static`: the miner's thresholds (AMIE 3's defaults: pruning on
    head coverage only, no absolute support floor), as `static_miner.mine_static` takes them."""

    max_atoms: Annotated[int, STRICT_INT, Ge(2), Le(3)] = field(
        default=3, metadata={"help": "head included: 2 = one body atom, 3 = up to two"}
    )
    min_support: Count = 0
    min_head_coverage: Fraction = 0.01
    min_pca_confidence: Fraction = 0.1
    min_std_confidence: Fraction = 0.0
    min_initial_support: Count = field(
        default=100, metadata={"help": "head relations with fewer facts are skipped (AMIE's -mins)"}
    )
    skyline: bool = field(
        default=True,
        metadata={"help": "keep a refined rule only if it beats its parents' PCA conf"},
    )
    #: AnyBURL's rules with constants (`anyburl_miner`), none by default
    constants: ConstantRuleSettings = field(
        default_factory=ConstantRuleSettings,
        metadata={
            "help": (
                "AnyBURL's rules with constants (rulerag/rules/anyburl_miner.py), counted exactly: "
                "ac1 r(X, c) <= s(X, d), ac2 r(X, c) <= s(X, A), zero r(X, c) <= (no body), with "
                "the constant on either side of the head; confidence = support / (body groundings "
                '+ pc). Off by default (docs/results.md "AnyBURL\'s rules with constants", '
                '"Rules with constants read backwards", "The graph static rules are applied '
                'to"): on FB15k-237 MRR 0.2060 -> 0.3239 with ties averaged, the protocol of '
                "AnyBURL's published 0.355 (0.2719 -> 0.3245 ties first; all kinds, "
                "closed_confidence anyburl, apply_rules.aggregation max, min_confidence 0.0001, "
                "discrimination_bound 1000; rules applied to the training facts), NELL-995 0.4056 "
                "-> 0.4295 (0.4332 -> 0.4409), for 6.9 million rules and over 15 minutes (14 GB) "
                "of mining and applying instead of a minute on FB15k-237. apply_rules reads them "
                "both ways and needs apply_rules.discrimination_bound with them."
            )
        },
    )
    #: AnyBURL's cyclic rules of three body atoms (`long_cyclic`), none by default
    long_cyclic: LongCyclicSettings = field(
        default_factory=LongCyclicSettings,
        metadata={
            "help": (
                "AnyBURL's cyclic rules of three body atoms (rulerag/rules/long_cyclic.py), which "
                "AMIE's refinement above stops short of: paths x-a-b-y found from sampled head "
                "facts r(x, y), counted exactly, confidence support / (body pairs + "
                "constants.unseen_negatives); needs constants.closed_confidence: anyburl. Off by "
                'default (docs/results.md "Cyclic rules of three body atoms"): beside the rules '
                "with constants read both ways on FB15k-237 they add 0.0007 of MRR on every test "
                "fact (ties averaged 0.3391 -> 0.3398, measured with the validation facts as "
                "evidence, before apply_rules used the training facts only) for a third more time; "
                "100 samples and 200 rules per head (37,184 rules) lower it, 0.3239 -> 0.3203, "
                "while AnyBURL's own cyclic rules in place of ours raise it to 0.3283 "
                '(docs/results.md "AnyBURL\'s own learner on this machine").'
            )
        },
    )

    def __post_init__(self) -> None:
        check_long_cyclic(self.long_cyclic, self.constants)


def check_long_cyclic(long_cyclic: LongCyclicSettings, constants: ConstantRuleSettings) -> None:
    """Cyclic rules of three atoms carry AnyBURL's confidence: the closed rules beside them
    must be on the same scale (`constants.closed_confidence: anyburl`), or max / noisy-or would
    compare a PCA confidence with support / (body + pc)."""
    if long_cyclic.enabled and constants.closed_confidence != "anyburl":
        raise ValueError(
            "long_cyclic.samples_per_head > 0 needs constants.closed_confidence: anyburl "
            f"(the rules of three atoms are scored by AnyBURL's confidence), not "
            f"{constants.closed_confidence!r}"
        )


@dataclass(frozen=True)
class TemporalConstantSettings:
    """How temporal rules with constants are learned (params.yaml
    `mine_rules.temporal.constants`)."""

    kinds: tuple[ConstantKind, ...] = field(
        default=(), metadata={"help": "any of [ac1, ac2, zero]; [] = TLogic's cyclic rules only"}
    )
    min_support: Positive = 2
    min_confidence: Fraction = 0.01
    # pc in support / (body groundings + pc)
    unseen_negatives: Count = field(
        default=0, metadata={"help": "pc: TLogic's score1 smoothing c (0); AnyBURL's is 5"}
    )
    #: what a body grounding is: `facts` (TLogic: entities and times, so X counts once per
    #: body fact) or `entities` (AnyBURL: X counts once, however often the body holds for it,
    #: the "temporal redundancy" TR-Rules removes; it precedes a head when its first body
    #: fact does)
    groundings: Literal["facts", "entities"] = field(
        default="facts",
        metadata={"help": "a body grounding is a fact (TLogic) or an entity X (AnyBURL)"},
    )
    ac2_weight: Fraction = 1.0
    zero_weight: Fraction = 1.0

    def __post_init__(self) -> None:
        check_constant_settings(self)
        if self.groundings not in ("facts", "entities"):
            raise ValueError(f"groundings must be facts or entities, not {self.groundings!r}")


@dataclass(frozen=True)
class TemporalMinerSettings:
    """params.yaml `mine_rules.temporal`: TLogic's knobs, as `temporal_miner.mine_temporal`
    takes them (its seed is `mine_rules.seed`, default `SEED`)."""

    lengths: tuple[Annotated[int, STRICT_INT, Ge(1), Le(3)], ...] = (1, 2, 3)
    walks_per_relation: Positive = field(default=200, metadata={"help": "per relation and length"})
    transition: Literal["exp", "unif"] = field(
        default="exp", metadata={"help": "exp (prefer recent edges) or unif"}
    )
    num_samples: Positive = field(
        default=500, metadata={"help": "body groundings sampled per rule for its confidence"}
    )
    exact: bool = field(
        default=False, metadata={"help": "true: count every body grounding instead of sampling"}
    )
    #: one-atom rules: walks (TLogic: the structures 200 walks happen to find, confidence from
    #: samples) or exact (every structure with a body fact before a head fact on the same
    #: entity pair, confidence over every grounding; longer rules still come from walks)
    length1: Literal["walks", "exact"] = field(
        default="walks",
        metadata={
            "help": (
                "One-atom rules: walks = the structures TLogic's walks happen to find (the paper's "
                "miner); exact = every one-atom rule with a body fact before a head fact on one "
                "entity pair, confidence over all its groundings (walks still find the longer "
                "rules). On ICEWS14 exact finds 18,568 one-atom rules instead of 5,007, none "
                "confident one missed, but its bank favours rare rules (mean body support 23 "
                "instead of 104) whose bodies seldom reach a query's documents: F_R shrinks from "
                "6,875 to 1,676 items, RuleRAG-FT's EM from 17 to 11 (README \"Rules that "
                "answer\"). Hence the default stays TLogic's."
            )
        },
    )
    min_confidence: Fraction = 0.0
    # 1 = TLogic's `conf > 0`
    min_rule_support: Count = field(
        default=1,
        metadata={"help": "TLogic keeps rules whose sampled bodies predicted the head once"},
    )
    min_body_support: Count = 1
    #: rules with constants (`temporal_constants`), none by default
    constants: TemporalConstantSettings = field(
        default_factory=TemporalConstantSettings,
        metadata={
            "help": (
                "Rules with constants under TLogic's time order "
                "(rulerag/rules/temporal_constants.py), counted exactly on the splits above: ac1 "
                "r(X, c, T) <= s(X, d, T'), ac2 r(X, c, T) <= s(X, A, T'), T' < T, zero r(X, c, T) "
                "<= (no body), the constant on either side of the head; body groundings = body "
                "facts, support = those a head fact follows, confidence = weight * support / (body "
                "groundings + pc). Applied with score_12 of the latest body fact before the query "
                '(zero rules: a * confidence). Off by default (docs/results.md "Temporal rules '
                "with constants\"): on ICEWS14's first 2,000 test facts ac1 and ac2 rules lower "
                'the MRR (max: 0.4248 -> 0.3804 facts / 0.4193 entities; their noisy-or "gains" '
                "are float32 ties at 1.0), zero rules counted by entity raise it (noisy-or 0.4543 "
                "-> 0.4566; every test fact: 0.4300 -> 0.4307 against TLogic's 0.4304, ties "
                "averaged 0.4272 -> 0.4284, with [zero] and groundings: entities), but paired they "
                "rank 1,973 queries worse and 1,362 better, and Hits@1 falls "
                "(benchmarks/bench_paired_forecast.py): an option, not the default"
            )
        },
    )


@dataclass(frozen=True)
class BankConfig:
    """Which mined rules make the bank (params.yaml `mine_rules.bank`)."""

    lengths: tuple[Positive, ...] = (1,)
    min_confidence: Fraction = 0.0
    min_support: NonNegative = field(
        default=0.0,
        metadata={
            "help": (
                "head facts a rule must predict (2 keeps exact one-atom rules seen once out: "
                "588 rules instead of 709 on ICEWS14)"
            )
        },
    )
    top_n_per_head: Positive | None = field(
        default=None, metadata={"help": "best N rules per head relation; null keeps all"}
    )


#: AMIE 3's TSV output, TLogic's rules JSON or AnyBURL's rule file
ImportFormat = Literal["amie", "tlogic", "anyburl"]
IMPORT_FORMATS: tuple[str, ...] = get_args(ImportFormat)


@dataclass(frozen=True)
class RuleImport:
    """Rules mined by the original tools (params.yaml `mine_rules.import.<dataset>`)."""

    format: ImportFormat
    path: str
    #: rules the Rule type cannot hold, AMIE's with constants (its -const mode) or AnyBURL's
    #: with its reflexive token or a constant and several body atoms: drop them (true) or
    #: fail (false)
    skip_unsupported: bool = False


@dataclass(frozen=True)
class MineRulesSettings:
    """params.yaml `mine_rules`."""

    HELP: ClassVar[str] = (
        "Stage `mine_rules`: data/<dataset>/kg -> data/<dataset>/rules/{rules,bank}.parquet, "
        "rules.txt, stats.json, confidence.csv/png. Static KGs use the AMIE 3-style miner, "
        "temporal KGs the TLogic-style one."
    )

    #: splits the rules are learned from (the paper: the training links only)
    splits: tuple[str, ...] = field(
        default=("train",),
        metadata={
            "help": (
                "Splits the rules are learned from. The paper mines the training links only; a KG "
                "without a train split (the WIKI mirror) must name another split here explicitly."
            )
        },
    )
    seed: Seed = SEED  # the temporal miner's walks and body samples
    static: StaticMinerSettings = field(
        default_factory=StaticMinerSettings,
        metadata={
            "help": (
                "AMIE 3 semantics and AMIE 3's defaults: it prunes on head coverage only, so "
                "min_support is 0 (an absolute support floor on top; 100 halves the static banks: "
                "NELL-995 116 rules instead of 282, FB15k-237 218 instead of 441, against the "
                "paper's 234 and 367)."
            )
        },
    )
    temporal: TemporalMinerSettings = field(
        default_factory=TemporalMinerSettings,
        metadata={
            "help": (
                "TLogic semantics: temporal random walks, confidence = rule support / body support."
            )
        },
    )
    bank: BankConfig = field(
        default_factory=BankConfig,
        metadata={
            "help": (
                "The RuleRAG rule bank used downstream (the paper: one-body-atom rules). With "
                "these defaults: ICEWS14 501 rules (paper 557), FB15k-237 441 (367), NELL-995 282 "
                "(234)."
            )
        },
    )
    #: what a dataset's bank changes of `bank` (keys of `bank`), by dataset: e.g. longer rules
    #: where one-atom rules cannot give the paper's bank (YAGO has 9 one-atom rules in all)
    bank_by_dataset: dict[DatasetName, dict[str, Any]] = field(
        default_factory=dict,
        metadata={
            "help": (
                "What a dataset's bank changes of `bank`. The paper's yearly banks cannot be "
                "one-atom rules: YAGO (10 relations, facts repeated every year of their validity) "
                "has 9 one-atom rules in all, 6 above confidence 0.1 (paper: 99 rules), WIKI 28 "
                "one-atom bank rules over 24 relations (paper: 78). With rules of up to 3 atoms: "
                "YAGO 75 rules over 7 relations (born in, graduated from and created have no rule "
                "of any length), WIKI 72 over all 24."
            )
        },
    )
    #: rules mined elsewhere instead of mining, by dataset
    import_: Annotated[dict[DatasetName, RuleImport], param_key("import")] = field(
        default_factory=dict,
        metadata={
            "help": (
                "Rules mined by the original tools instead of mining, by dataset, e.g.\n"
                "  import: {fb15k237: {format: amie, path: /data/amie_rules.tsv}}   (or format: "
                "tlogic,\n"
                "  or format: anyburl for a rule file AnyBURL learned on the KG's training facts; "
                "its rules\n"
                "  with constants then need apply_rules.discrimination_bound on a static dataset)\n"
                "AMIE rules with constants, and AnyBURL's rules with its reflexive token "
                "me_myself_i, cannot be used; add skip_unsupported: true to drop them."
            )
        },
    )

    def bank_for(self, dataset: str) -> BankConfig:
        """The bank settings of one dataset: `bank` with its `bank_by_dataset` entry on top."""
        override = self.bank_by_dataset.get(dataset)
        if not override:
            return self.bank
        merged = {**dataclasses.asdict(self.bank), **override}
        return load_settings(BankConfig, merged, f"mine_rules.bank_by_dataset.{dataset}")


def mine_rules_settings(section: Mapping[str, Any] | None) -> MineRulesSettings:
    """params.yaml's `mine_rules` section as typed settings, strictly (each dataset's bank
    override too, so a typo there fails before any stage runs)."""
    settings = load_settings(MineRulesSettings, section, "mine_rules")
    for dataset in settings.bank_by_dataset:
        settings.bank_for(dataset)
    return settings
