"""A random KG with rules to find, written as `ingest` and `mine_rules` leave a dataset.

Relation 1 ("Host a visit") mirrors relation 0 ("Make a visit") often, so the bank's rules
between them hold and RuleQA has queries with oracle documents; subjects are skewed so the
popularity strata differ. Shared by the benchmark, rule-retrieval and rule-application unit
tests and the rule stages' test, which all need a dataset whose files look like a mined one
without running ingest and mine_rules."""

from __future__ import annotations

import numpy as np

from rulerag.io import write_json, write_parquet
from rulerag.kg.schema import KnowledgeGraph, make_facts, make_vocab
from rulerag.layout import DataLayout
from rulerag.rules.bank import rules_frame
from rulerag.rules.rule import Rule

RELATIONS = ["Make a visit", "Host a visit", "Consult", "Criticize"]


def synthetic_kg(temporal: bool, seed: int = 0, n_entities: int = 60, n_facts: int = 3000):
    """Random links; relation 1 ("Host a visit") mirrors relation 0 often, so rules exist."""
    rng = np.random.default_rng(seed)
    # skewed subjects so popularity strata differ
    heads = np.minimum(rng.zipf(1.6, n_facts) - 1, n_entities - 1)
    tails = rng.integers(0, n_entities, n_facts)
    rels = rng.choice([0, 2, 3], n_facts)
    times = rng.integers(16000, 16300, n_facts) if temporal else np.zeros(n_facts, dtype=int)
    rows = list(zip(heads, rels, tails, times, strict=True))
    mirrored = [(t, 1, h, tm + 3) for h, r, t, tm in rows if r == 0 and rng.random() < 0.7]
    rows = rows + mirrored
    order = rng.permutation(len(rows))
    rows = [rows[i] for i in order]
    splits = rng.choice(["train", "valid", "test"], len(rows), p=[0.7, 0.15, 0.15])
    facts = make_facts(
        [int(r[0]) for r in rows],
        [int(r[1]) for r in rows],
        [int(r[2]) for r in rows],
        [int(r[3]) if temporal else None for r in rows],
        [str(s) for s in splits],
    )
    facts = facts.drop_duplicates().reset_index(drop=True)
    entities = make_vocab(
        list(range(n_entities)), [f"Entity {i}" for i in range(n_entities)],
        [f"e{i}" for i in range(n_entities)],
    )  # fmt: skip
    relations = make_vocab(list(range(4)), RELATIONS, [f"r{i}" for i in range(4)])
    kg = KnowledgeGraph(facts, entities, relations, "day" if temporal else None)
    kg.lines_read = {s: int((facts["split"] == s).sum()) for s in ("train", "valid", "test")}
    bank = rules_frame(
        [
            Rule.path(1, [(0, True)], temporal=temporal, confidence=0.7, support=50),
            Rule.path(0, [(1, True)], temporal=temporal, confidence=0.6, support=40),
            Rule.path(1, [(2, False)], temporal=temporal, confidence=0.1, support=5),
        ],
        RELATIONS,
    )
    return kg, bank


def write_synthetic_dataset(layout: DataLayout, temporal: bool = True, seed: int = 0):
    """`synthetic_kg` as ingest and mine_rules would leave it under `layout`: kg/ (the time
    unit in the Parquet provenance and stats.json) and rules/ (its bank as every mined rule
    and as the bank). Returns (kg, bank)."""
    kg, bank = synthetic_kg(temporal, seed)
    provenance = {"stage": "ingest", "time_unit": kg.time_unit}
    layout.kg.mkdir(parents=True)
    write_parquet(layout.facts, kg.facts, provenance)
    write_parquet(layout.entities, kg.entities, provenance)
    write_parquet(layout.relations, kg.relations, provenance)
    write_json(layout.kg_stats, {"dataset": layout.dataset, "time_unit": kg.time_unit})
    layout.rules_dir.mkdir(parents=True)
    write_parquet(layout.rules, bank, {"stage": "mine_rules"})
    write_parquet(layout.rule_bank, bank, {"stage": "mine_rules"})
    return kg, bank
