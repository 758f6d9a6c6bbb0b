"""The `mine_rules` step: rules from a KG's configured splits, the RuleRAG bank, their figures.

Static KGs go to the AMIE 3-style miner (`static_miner`), temporal ones to the TLogic-style one
(`temporal_miner`); rules mined by the original tools can be imported instead (`amie_io`,
`tlogic_io`). `rulerag.rules.settings.MineRulesSettings` is params.yaml's `mine_rules` section;
each miner takes its own part of it (`StaticMinerSettings`, `TemporalMinerSettings`, in the
same module), which holds its defaults.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rulerag.errors import InputError
from rulerag.io import atomic_open, write_json, write_parquet
from rulerag.kg.schema import KnowledgeGraph
from rulerag.rules.bank import (
    confidence_histogram,
    frame_rules,
    rules_frame,
    select_bank,
    write_rules_text,
)
from rulerag.rules.constant_columns import RuleSet
from rulerag.rules.rule import RULE_KINDS, Rule
from rulerag.rules.settings import MineRulesSettings, RuleImport

__all__ = [
    "MinedRules",
    "describe_rules",
    "import_rules",
    "mine",
    "mine_rule_bank",
    "plot_confidence",
]


@dataclass(frozen=True)
class MinedRules:
    """What `mine_rules` writes: every rule, the bank, their figures and histogram."""

    dataset: str
    rules: pd.DataFrame  # every rule with its statistics (`bank.rules_frame`)
    bank: pd.DataFrame
    stats: dict[str, Any]
    histogram: pd.DataFrame  # rules and bank rules per confidence bin
    #: wall-clock seconds of mining (or import): an MLflow metric and a log line, never in
    #: stats.json, so an identical rerun writes the same bytes
    seconds: float = 0.0

    def metrics(self) -> dict[str, Any]:
        """The figures MLflow records: stats.json's, with the mining time."""
        return {**self.stats, "mining_seconds": round(self.seconds, 2)}

    def write(self, folder: Path, provenance: Mapping[str, Any]) -> None:
        """rules.parquet, bank.parquet (with `provenance`), rules.txt, confidence.csv / .png,
        stats.json into `folder` (a staging folder: `io.staged_outputs`)."""
        write_parquet(folder / "rules.parquet", self.rules, provenance)
        write_parquet(folder / "bank.parquet", self.bank, provenance)
        with atomic_open(folder / "rules.txt") as handle:
            write_rules_text(self.rules, handle)
        with atomic_open(folder / "confidence.csv") as handle:
            self.histogram.to_csv(handle, index=False)
        plot_confidence(
            self.histogram, folder / "confidence.png", f"{self.dataset}: rule confidence"
        )
        write_json(folder / "stats.json", self.stats)


def mine_rule_bank(
    kg: KnowledgeGraph,
    settings: MineRulesSettings,
    dataset: str,
    paper_bank_size: int | None = None,
) -> MinedRules:
    """The `mine_rules` stage: rules from the KG's `settings.splits` (or imported), the
    dataset's bank, and their figures beside the paper's bank size."""
    splits = list(settings.splits)
    facts = kg.facts[kg.facts["split"].isin(splits)]
    imported = settings.import_.get(dataset)
    started = time.perf_counter()
    if imported:
        relation_keys = dict(zip(kg.relations["key"], kg.relations["id"], strict=True))
        entity_keys = dict(zip(kg.entities["key"], kg.entities["id"], strict=True))
        rules = RuleSet(import_rules(imported, relation_keys, len(kg.relations), entity_keys))
    elif facts.empty:
        raise InputError(
            f"mine_rules@{dataset}: the KG has no facts in splits {splits} "
            f"(it has {sorted(kg.lines_read)}); set mine_rules.splits"
        )
    else:
        rules = mine_set(facts, len(kg.entities), len(kg.relations), kg.temporal, settings)
    seconds = time.perf_counter() - started
    relation_names = kg.relations.set_index("id")["name"].to_dict()
    entity_names = kg.entities["name"].tolist() if rules.has_constants else None
    frame = rules_frame(rules, relation_names, entity_names)
    del rules  # the frame holds them now
    bank = select_bank(frame, settings.bank_for(dataset))
    miner = "import" if imported else ("temporal" if kg.temporal else "static")
    if bank.empty:
        raise _empty_bank(dataset, kg, facts, splits, miner, frame, settings)
    stats = describe_rules(dataset, miner, frame, bank, facts, paper_bank_size)
    return MinedRules(dataset, frame, bank, stats, confidence_histogram(frame, bank), seconds)


def _empty_bank(
    dataset: str,
    kg: KnowledgeGraph,
    facts: pd.DataFrame,
    splits: list[str],
    miner: str,
    frame: pd.DataFrame,
    settings: MineRulesSettings,
) -> InputError:
    """Why the bank came out empty, and which params.yaml keys to lower.

    An empty bank used to be published as "0 rules": build_benchmark then failed in a pandas
    merge, far from the cause. With no rule mined, the miner's thresholds are named (a random
    graph, a single-relation chain or a KG whose entities never recur gives no rule at any
    threshold, so the KG is named too); with rules mined but none kept, the bank's are.
    """
    per_relation = facts["relation"].value_counts()
    where = (
        f"mine_rules@{dataset}: the rule bank is empty, so there is nothing to build a "
        f"benchmark from (KG {dataset}, splits {splits}: {len(facts):,} facts, "
        f"{len(per_relation)} of its {len(kg.relations)} relations with facts"
    )
    if frame.empty and miner == "static":
        static = settings.static
        largest = int(per_relation.max()) if len(per_relation) else 0
        return InputError(
            f"{where}; the static miner found no rule): its thresholds may be too strict for "
            f"this KG: lower mine_rules.static.min_initial_support ({static.min_initial_support}"
            f"; head relations with fewer facts are skipped, and the largest has {largest:,}), "
            f"min_head_coverage ({static.min_head_coverage}), min_pca_confidence "
            f"({static.min_pca_confidence}) or min_support ({static.min_support}); a KG "
            "without repeated patterns (a random graph, a single-relation chain, entities "
            "that never recur) gives no rule at any threshold"
        )
    if frame.empty:  # the temporal miner (an import without rules fails in import_rules)
        temporal = settings.temporal
        return InputError(
            f"{where}; the temporal miner found no rule): its thresholds may be too strict for "
            f"this KG: lower mine_rules.temporal.min_rule_support ({temporal.min_rule_support}"
            f"), min_body_support ({temporal.min_body_support}) or min_confidence "
            f"({temporal.min_confidence}), or raise walks_per_relation "
            f"({temporal.walks_per_relation}) or lengths ({list(temporal.lengths)}); a KG "
            "without repeated patterns (a random graph, a single-relation chain, entities "
            "that never recur) gives no rule at any threshold"
        )
    bank = settings.bank_for(dataset)
    keys = "mine_rules.bank" + (
        f" with mine_rules.bank_by_dataset.{dataset}" if dataset in settings.bank_by_dataset else ""
    )
    lengths = {int(k): int(v) for k, v in frame["length"].value_counts().sort_index().items()}
    constants = int((frame["constants"] != "[]").sum()) if "constants" in frame.columns else 0
    return InputError(
        f"{where}; {len(frame):,} rules were {'imported' if miner == 'import' else 'mined'}, "
        f"by body length {lengths}, {constants:,} of them with constants, which never enter "
        f"the bank): none passes {keys}: lengths {list(bank.lengths)}, min_confidence "
        f"{bank.min_confidence}, min_support {bank.min_support}; add the mined lengths or "
        "lower the thresholds"
    )


def mine(
    facts: pd.DataFrame,
    n_entities: int,
    n_relations: int,
    temporal: bool,
    settings: MineRulesSettings,
) -> list[Rule]:
    """Run the miner that fits the KG (temporal or static) with its settings: a `Rule` each."""
    if temporal:
        from rulerag.rules.temporal_miner import mine_temporal

        return mine_temporal(facts, n_entities, n_relations, settings.temporal, seed=settings.seed)
    from rulerag.rules.static_miner import mine_static

    return mine_static(facts, n_entities, n_relations, settings.static, seed=settings.seed)


def mine_set(
    facts: pd.DataFrame,
    n_entities: int,
    n_relations: int,
    temporal: bool,
    settings: MineRulesSettings,
) -> RuleSet:
    """`mine`'s rules as the stage keeps them: AnyBURL's rules with constants as columns."""
    if temporal:
        return RuleSet(mine(facts, n_entities, n_relations, temporal, settings))
    from rulerag.rules.static_miner import mine_static_set

    return mine_static_set(facts, n_entities, n_relations, settings.static, seed=settings.seed)


def import_rules(
    spec: RuleImport,
    relation_keys: Mapping[str, int],
    n_relations: int,
    entity_keys: Mapping[str, int] | None = None,
) -> list[Rule]:
    """Rules mined elsewhere: AMIE 3's TSV output, TLogic's rules JSON or AnyBURL's rule file
    (its constants named by `entity_keys`).

    A file that is not what its format says fails naming the file (and the line, for AMIE and
    AnyBURL), never as an empty bank: a file from which no rule can be read is an error too.
    """
    path = Path(spec.path).expanduser()
    what = {
        "amie": "an AMIE 3 rule table",
        "tlogic": "a TLogic rules JSON",
        "anyburl": "an AnyBURL rule file",
    }[spec.format]
    try:
        if spec.format == "amie":
            from rulerag.rules.amie_io import read_amie_tsv

            rules = read_amie_tsv(path, relation_keys, skip_unsupported=spec.skip_unsupported)
        elif spec.format == "anyburl":
            rules = _import_anyburl(spec, path, relation_keys, entity_keys or {})
        else:
            from rulerag.rules.tlogic_io import read_tlogic_json

            rules = read_tlogic_json(path, n_relations)
    except InputError:
        raise
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read {what}: {err}") from None
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
        raise InputError(f"{path}: not {what} ({type(err).__name__}: {err})") from None
    if not rules:
        raise InputError(
            f"{path}: no rule could be read from it (mine_rules.import expects {what}); "
            "an empty bank would replace the one built before"
        )
    return rules


def _import_anyburl(
    spec: RuleImport, path: Path, relation_keys: Mapping[str, int], entity_keys: Mapping[str, int]
) -> list[Rule]:
    from rulerag.rules.anyburl_io import read_anyburl_rules

    rules, counts = read_anyburl_rules(path, relation_keys, entity_keys)
    skipped = {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("skipped:")}
    if skipped and not spec.skip_unsupported:
        raise InputError(
            f"{path}: {skipped} AnyBURL rules have no place in the Rule type (its reflexive "
            "token, or a constant and several body atoms); set mine_rules.import.<dataset>."
            "skip_unsupported: true to drop them"
        )
    return rules


def describe_rules(
    dataset: str,
    miner: str,
    frame: pd.DataFrame,
    bank: pd.DataFrame,
    facts: pd.DataFrame,
    paper_bank_size: int | None = None,
) -> dict[str, Any]:
    """stats.json of `mine_rules`: rules and bank by length, relations the bank covers; the
    same for the same KG and settings (the mining time is `MinedRules.seconds`). The static
    miner's also counts rules by kind (path, pair, ac1, ac2, zero), and so does any other
    whose rules have constants (the temporal miner's `mine_rules.temporal.constants`); a
    temporal miner's without them does not, so its stats.json keeps its bytes."""
    with_facts = int(facts["relation"].nunique())
    counted = miner == "static" or "kind" in frame.columns
    by_kind = {"rules_by_kind": rule_kinds(frame)} if counted else {}
    return {
        "dataset": dataset,
        "miner": miner,
        "rules": len(frame),
        "rules_by_length": {
            str(k): int(v) for k, v in frame["length"].value_counts().sort_index().items()
        },
        **by_kind,
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
        "paper_bank_size": paper_bank_size,
    }


def rule_kinds(frame: pd.DataFrame) -> dict[str, int]:
    """Rules per kind (every kind named, 0 when absent): the frame's `kind` column, or for a
    frame without constants path and pair told apart by the body's variables."""
    if "kind" in frame.columns:
        kinds = frame["kind"]
    else:
        kinds = pd.Series([r.kind for r in frame_rules(frame)], dtype=object)
    counts = kinds.value_counts()
    return {kind: int(counts.get(kind, 0)) for kind in RULE_KINDS}


def plot_confidence(hist: pd.DataFrame, path: Path, title: str) -> None:
    """confidence.png: mined and bank rules per confidence bin (`bank.confidence_histogram`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
