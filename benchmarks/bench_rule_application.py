"""Temporal rule application and link-forecasting evaluation: speed and MRR against TLogic's.

Run by hand, never as a test (after `mine_rules` for the dataset):

    .venv/bin/python benchmarks/bench_rule_application.py [--dataset icews14] [--limit N]
        [--lengths 1 2 3] [--window 0] [--top-k 20] [--aggregation noisy_or|max|nrnoisy_or]
        [--data FOLDER] [--out FILE] [--mine] [--constant-kinds ac1 ac2 zero]
        [--closed-confidence pca|anyburl] [--long-cyclic-samples 30] [--min-confidence 0.01]
        [--discrimination-bound 1000]

Applies data/<dataset>/rules/rules.parquet (every mined rule, lengths 1-3; `--rules` another
file) to every test fact in both directions with TLogic's semantics (static KGs: AMIE rules
by PCA confidence, applied to the training facts; `rulerag.rules.application`) and prints
queries per minute, MRR and Hits@1/3/10 (time-aware filtered, `rulerag.rules.forecasting`)
beside TLogic's published
ICEWS14 figures (its Table 3: MRR 0.4304, Hits@1 0.3356, @3 0.4827, @10 0.6117). The
reference implementation applies about 210 queries a minute with two processes on a 2-core
machine. `--limit` evaluates the first N test facts only (a quick look). `--aggregation
nrnoisy_or` (static KGs) first clusters the rules as SAFRAN does (`rulerag.rules.rule_clusters`:
Jaccard on the train split, thresholds searched on the valid split) and reports that time
(`clustering_seconds`, inside `seconds`) and what the search chose per head relation.
`--data` reads <FOLDER>/<dataset>/ instead of the project's data/ (read only). Beside the
figures with ties ranked first (TLogic's rank, the project's), `ties_last` has them with the
answer ranked last among the candidates it ties with, `ties_average` at the mean of the two (as
SAFRAN's eval.py ranks ties, scipy's rankdata "average"); the same candidates and filter
(`rulerag.rules.forecasting`, as the apply_rules stage reports them).
`--cluster-ties first` tunes nrnoisy_or's search for ties ranked first (a comparison only).

`--mine` mines the rules in-process instead (params.yaml's `mine_rules` settings, the KG's
training facts; the mining time is reported), and `--constant-kinds` (implies `--mine`) adds
AnyBURL's rules with constants of those kinds (`mine_rules.static.constants.kinds`); rules
by kind are reported; `--closed-confidence` is `mine_rules.static.constants.closed_confidence`
(implies `--mine`), `--long-cyclic-samples` `mine_rules.static.long_cyclic.samples_per_head`
(implies `--mine`). `--min-confidence` is
`apply_rules.min_confidence` (0.01; AnyBURL's weights put zero-body rules below it),
`--discrimination-bound` `apply_rules.discrimination_bound` (0: none).

Temporal KGs: `--temporal-constant-kinds ac1 ac2 zero` adds TLogic-style rules with constants
(`mine_rules.temporal.constants`, `rulerag.rules.temporal_constants`), mined in-process from
the training facts and added to the rules read (or, with `--mine`, to all rules mined in
process); `--temporal-constant-min-support`, `-min-confidence`, `-unseen-negatives`,
`-ac2-weight`, `-zero-weight` and `-groundings` override that section's keys;
`mining_seconds` is then the constant rules' mining time (all mining with `--mine`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rulerag.io import read_parquet  # noqa: E402
from rulerag.layout import DataLayout  # noqa: E402
from rulerag.params import load_params  # noqa: E402
from rulerag.rules.bank import frame_rules  # noqa: E402
from rulerag.rules.forecasting import forecast, rounded_metrics  # noqa: E402
from rulerag.rules.mining import mine  # noqa: E402
from rulerag.rules.rule_clusters import rule_clusters  # noqa: E402
from rulerag.rules.settings import (  # noqa: E402
    AGGREGATIONS,
    ApplySettings,
    MineRulesSettings,
    TemporalConstantSettings,
)
from rulerag.rules.temporal_constants import mine_temporal_constant_rules  # noqa: E402

TLOGIC_ICEWS14 = {"mrr": 0.4304, "hits_at_1": 0.3356, "hits_at_3": 0.4827, "hits_at_10": 0.6117}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="icews14")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--window", type=int, default=0)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--aggregation", choices=AGGREGATIONS, default="noisy_or")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--cluster-ties", choices=["last", "first"], default="last", help="nrnoisy_or's search"
    )
    parser.add_argument("--rules", type=Path, default=None, help="a rules.parquet to apply")
    parser.add_argument(
        "--data",
        type=Path,
        default=ROOT / "data",
        help="the data folder holding <dataset>/ (read only; default: the project's data/)",
    )
    parser.add_argument("--mine", action="store_true", help="mine the rules in-process")
    parser.add_argument(
        "--constant-kinds", nargs="*", default=None, choices=["ac1", "ac2", "zero"],
        help="AnyBURL's rules with constants to mine (implies --mine)",
    )  # fmt: skip
    parser.add_argument("--closed-confidence", choices=["pca", "anyburl"], default=None)
    parser.add_argument(
        "--long-cyclic-samples", type=int, default=None,
        help="mine_rules.static.long_cyclic.samples_per_head: AnyBURL's cyclic rules of three "
        "body atoms (implies --mine; needs --closed-confidence anyburl)",
    )  # fmt: skip
    parser.add_argument("--min-confidence", type=float, default=0.01)
    parser.add_argument(
        "--discrimination-bound", type=int, default=0,
        help="apply_rules.discrimination_bound (static rules; AnyBURL and SAFRAN: 1000)",
    )  # fmt: skip
    parser.add_argument(
        "--temporal-constant-kinds", nargs="*", default=None, choices=["ac1", "ac2", "zero"],
        help="temporal rules with constants to mine and add (mine_rules.temporal.constants)",
    )  # fmt: skip
    for knob, kind in (
        ("min_support", int),
        ("min_confidence", float),
        ("unseen_negatives", int),
        ("ac2_weight", float),
        ("zero_weight", float),
    ):
        flag = "--temporal-constant-" + knob.replace("_", "-")
        parser.add_argument(flag, dest=f"tc_{knob}", type=kind, default=None)
    parser.add_argument(
        "--temporal-constant-groundings", dest="tc_groundings", choices=["facts", "entities"]
    )
    args = parser.parse_args()
    layout = DataLayout.of(args.data, args.dataset)
    if not layout.facts.is_file():
        parser.error(f"--data {args.data}: no {layout.facts} (run the pipeline for it first)")
    facts = read_parquet(layout.facts)
    n_relations = len(read_parquet(layout.relations))
    n_entities = len(read_parquet(layout.entities))
    if args.limit:
        test = facts[facts["split"] == "test"].head(args.limit)
        facts = pd.concat([facts[facts["split"] != "test"], test])
    temporal = bool(facts["time"].notna().any())
    mining_seconds = None
    settings_mine = load_params(ROOT / "params.yaml").mine_rules
    temporal_constants = temporal_constant_settings(args, settings_mine)
    if temporal_constants is not None:
        settings_mine = dataclasses.replace(
            settings_mine,
            temporal=dataclasses.replace(settings_mine.temporal, constants=temporal_constants),
        )
    if args.mine or any(
        option is not None
        for option in (args.constant_kinds, args.closed_confidence, args.long_cyclic_samples)
    ):
        settings_mine = with_static_constants(
            settings_mine, args.constant_kinds, args.closed_confidence, args.long_cyclic_samples
        )
        train = facts[facts["split"].isin(settings_mine.splits)]
        started = time.perf_counter()
        rules = mine(train, n_entities, n_relations, temporal, settings_mine)
        mining_seconds = round(time.perf_counter() - started, 1)
    else:
        rules = frame_rules(read_parquet(args.rules or layout.rules))
        if temporal and temporal_constants is not None:
            started = time.perf_counter()
            train = facts[facts["split"].isin(settings_mine.splits)]
            found = mine_temporal_constant_rules(train, n_entities, n_relations, temporal_constants)
            mining_seconds = round(time.perf_counter() - started, 1)
            rules = [*rules, *found]
    settings = ApplySettings(
        lengths=tuple(args.lengths),
        window=args.window,
        top_k=args.top_k,
        temporal=temporal,
        aggregation=args.aggregation,
        cluster_ties=args.cluster_ties,
        min_confidence=args.min_confidence,
        discrimination_bound=args.discrimination_bound,
        baseline="unanswered",  # TLogic's protocol, that of the published figures
    )
    started = time.perf_counter()
    clustering = None
    if settings.aggregation == "nrnoisy_or":
        clustering = rule_clusters(rules, facts, n_relations, settings, progress=True)
    result = forecast(
        facts,
        rules,
        n_relations,
        n_entities,
        settings,
        clusters=clustering.labels if clustering else None,
    )
    seconds = time.perf_counter() - started
    queries = len(result.ranks)
    report = {
        "dataset": args.dataset,
        "rules": len(rules),
        "rules_by_kind": dict(Counter(rule.kind for rule in rules)),
        "rules_by_body_atoms": dict(sorted(Counter(len(rule.body) for rule in rules).items())),
        "constant_kinds": args.constant_kinds,
        "temporal_constants": (
            dataclasses.asdict(temporal_constants) if temporal_constants is not None else None
        ),
        "closed_confidence": args.closed_confidence or "pca",
        "mining_seconds": mining_seconds,
        "aggregation": args.aggregation,
        "discrimination_bound": args.discrimination_bound,
        "cluster_ties": args.cluster_ties if clustering else None,
        "queries": queries,
        "seconds": round(seconds, 1),
        "queries_per_minute": round(60 * queries / seconds),
        "clustering_seconds": round(clustering.seconds, 1) if clustering else None,
        "clusters": clustering.summary() if clustering else None,
        **rounded_metrics(result.metrics),
        "tlogic_published": TLOGIC_ICEWS14 if args.dataset == "icews14" else None,
    }
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


def temporal_constant_settings(
    args: argparse.Namespace, settings: MineRulesSettings
) -> TemporalConstantSettings | None:
    """params.yaml's `mine_rules.temporal.constants` with the command line's overrides; None
    when no kind is asked for."""
    base = settings.temporal.constants
    changes = {
        knob: getattr(args, f"tc_{knob}")
        for knob in (
            "min_support", "min_confidence", "unseen_negatives", "ac2_weight", "zero_weight",
            "groundings",
        )
        if getattr(args, f"tc_{knob}") is not None
    }  # fmt: skip
    if args.temporal_constant_kinds is not None:
        changes["kinds"] = tuple(args.temporal_constant_kinds)
    chosen = dataclasses.replace(base, **changes)
    return chosen if chosen.kinds else None


def with_static_constants(
    settings: MineRulesSettings,
    kinds: list[str] | None,
    closed_confidence: str | None,
    long_cyclic_samples: int | None = None,
) -> MineRulesSettings:
    """`settings` with AnyBURL's rules with constants of `kinds`, the closed rules' confidence
    and the cyclic rules of three atoms' samples per head replaced where given (None: as
    params.yaml has them); the benchmarks' --mine."""
    static = settings.static
    constants = static.constants
    if kinds is not None:
        constants = dataclasses.replace(constants, kinds=tuple(kinds))
    if closed_confidence is not None:
        constants = dataclasses.replace(constants, closed_confidence=closed_confidence)
    long_cyclic = static.long_cyclic
    if long_cyclic_samples is not None:
        long_cyclic = dataclasses.replace(long_cyclic, samples_per_head=long_cyclic_samples)
    if (constants, long_cyclic) == (static.constants, static.long_cyclic):
        return settings
    static = dataclasses.replace(static, constants=constants, long_cyclic=long_cyclic)
    return dataclasses.replace(settings, static=static)


if __name__ == "__main__":
    sys.exit(main())
