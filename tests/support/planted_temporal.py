"""Random temporal KGs with planted rules of known confidence, to test temporal miners.

A miner is only checkable against a truth it cannot see. This generator builds random noise
facts and then plants two TLogic-shaped rules whose exact confidence is known by construction:

* one atom:  r_body(x, y, t)                     => r_head(x, y, t + delta)
* two atoms: r_a(x, z, t1), r_b(z, y, t2), t1 < t2 => r_head2(x, y, t2 + delta)

Each body grounding gets its head with probability `p_one` / `p_two`. Planted relations occur
only in planted facts, every body grounding uses its own fresh entities (so groundings never
combine into extra ones), and `confidence` is the realised fraction: exactly what TLogic's
confidence (rule support / body support, see `temporal_miner`) is over the whole population,
and what its sampled estimate targets. Noise facts use their own relations, over all entities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from rulerag.kg.schema import make_facts
from rulerag.rules.rule import Rule

#: relation ids of the planted rules; noise relations follow
R_BODY, R_HEAD, R_A, R_B, R_HEAD2 = 0, 1, 2, 3, 4
N_PLANTED_RELATIONS = 5


@dataclass(frozen=True)
class PlantedRule:
    """A planted rule (structure only), the chance its head follows a body grounding, and the
    realised exact confidence over the generated facts."""

    rule: Rule
    probability: float
    confidence: float
    body_groundings: int
    head_groundings: int


@dataclass
class PlantedKG:
    """Train facts (canonical frame, split "train") and the rules planted in them."""

    facts: pd.DataFrame
    n_entities: int
    n_relations: int
    planted: tuple[PlantedRule, ...]


def planted_temporal_kg(
    *,
    seed: int = 0,
    n_groundings: int = 300,
    p_one: float = 0.8,
    p_two: float = 0.6,
    delta: int = 3,
    n_times: int = 100,
    n_noise_entities: int = 1000,
    n_noise_relations: int = 4,
    n_noise_facts: int = 3000,
) -> PlantedKG:
    """Build a KG with the two planted rules (see module notes) plus random noise facts.

    Times are steps 0 .. n_times + 3 * delta; body times are uniform in [0, n_times).
    """
    if n_groundings < 1 or delta < 1 or n_times < 1:
        raise ValueError("n_groundings, delta and n_times must be >= 1")
    rng = np.random.default_rng(seed)
    n_planted_entities = 5 * n_groundings
    n_entities = n_planted_entities + n_noise_entities
    ents = rng.permutation(n_planted_entities)
    rows: list[tuple[np.ndarray, ...]] = []

    def add(h: np.ndarray, rel: int | np.ndarray, tl: np.ndarray, tm: np.ndarray) -> None:
        rows.append((h, np.broadcast_to(rel, h.shape), tl, tm))

    # one atom: pairs (x, y) of fresh entities
    x, y = ents[:n_groundings], ents[n_groundings : 2 * n_groundings]
    t = rng.integers(0, n_times, n_groundings)
    add(x, R_BODY, y, t)
    hit_one = rng.random(n_groundings) < p_one
    add(x[hit_one], R_HEAD, y[hit_one], t[hit_one] + delta)

    # two atoms: chains x -> z -> y of fresh entities, t1 < t2
    x2, z2, y2 = (ents[(2 + k) * n_groundings : (3 + k) * n_groundings] for k in range(3))
    t1 = rng.integers(0, n_times, n_groundings)
    t2 = t1 + rng.integers(1, delta + 1, n_groundings)
    add(x2, R_A, z2, t1)
    add(z2, R_B, y2, t2)
    hit_two = rng.random(n_groundings) < p_two
    add(x2[hit_two], R_HEAD2, y2[hit_two], t2[hit_two] + delta)

    # noise over all entities and noise relations
    n_relations = N_PLANTED_RELATIONS + n_noise_relations
    if n_noise_relations and n_noise_facts:
        add(
            rng.integers(0, n_entities, n_noise_facts),
            rng.integers(N_PLANTED_RELATIONS, n_relations, n_noise_facts),
            rng.integers(0, n_entities, n_noise_facts),
            rng.integers(0, n_times + 3 * delta, n_noise_facts),
        )
    h, r, tl, tm = (np.concatenate(parts) for parts in zip(*rows, strict=True))
    facts = make_facts(
        h.tolist(), r.tolist(), tl.tolist(), tm.tolist(), ["train"] * len(h)
    ).drop_duplicates(["head", "relation", "tail", "time"], ignore_index=True)

    planted = (
        PlantedRule(
            Rule.path(R_HEAD, [(R_BODY, False)], temporal=True),
            p_one,
            float(hit_one.mean()),
            n_groundings,
            int(hit_one.sum()),
        ),
        PlantedRule(
            Rule.path(R_HEAD2, [(R_A, False), (R_B, False)], temporal=True),
            p_two,
            float(hit_two.mean()),
            n_groundings,
            int(hit_two.sum()),
        ),
    )
    return PlantedKG(facts, n_entities, n_relations, planted)
