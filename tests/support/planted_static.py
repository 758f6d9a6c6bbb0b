"""Random static KGs with planted rules of known confidence, to test the static miner.

A miner is right when what it finds is what was put there: each planted rule gets fresh
relations whose facts are generated so that its standard and PCA confidence both equal the
planted confidence in expectation, whatever the miner's choice of PCA side.

How a rule `B => h(x, y)` with confidence p is planted on n body instances:

- the body holds for exactly n pairs (x_i, y_i) with distinct x_i (one-atom bodies: one fact
  each; paths `a(x, z) & b(z, y)`: distinct z_i as well, so each x_i reaches exactly y_i);
- the head gets, for each i, h(x_i, y_i) with probability p, else h(x_i, y'_i) with a random
  y'_i != y_i: a counterexample under the partial-completeness assumption (x_i has some h-fact).

So every x_i has exactly one h-fact, h's subject side is the functional one (functionality 1),
the body size and PCA body size are both n, and the support is Binomial(n, p): the measured
confidence is p within `tolerance(...)`. Noise relations add uniform random facts that share the
entities but no relation with the planted rules, so random rules among them stay far below
usual support thresholds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from rulerag.rules.rule import Atom, Rule

Shape = Literal["single", "inverse", "path"]


@dataclass(frozen=True)
class PlantSpec:
    """What to plant: `single` r1(x, y) => h(x, y), `inverse` r1(y, x) => h(x, y), or `path`
    r1(x, z) & r2(z, y) => h(x, y), holding with `confidence` on `n_body` body instances."""

    shape: Shape
    confidence: float
    n_body: int = 500


@dataclass(frozen=True)
class PlantedRule:
    """A planted rule (structure only, statistics None) and its expected confidence."""

    rule: Rule
    confidence: float
    n_body: int

    def tolerance(self, z: float = 4.0) -> float:
        """Sampling tolerance of the measured confidence: z binomial standard deviations."""
        p = self.confidence
        return z * math.sqrt(max(p * (1 - p), 1e-12) / self.n_body)


@dataclass
class PlantedKG:
    """Facts (head, relation, tail; all training facts), sizes, names and the planted rules."""

    facts: pd.DataFrame
    n_entities: int
    n_relations: int
    relation_names: list[str]
    planted: list[PlantedRule] = field(default_factory=list)


DEFAULT_SPECS: tuple[PlantSpec, ...] = (
    PlantSpec("single", 0.8),
    PlantSpec("inverse", 0.7),
    PlantSpec("path", 0.6),
    PlantSpec("single", 0.04, n_body=3000),  # support ~120 but PCA confidence below 0.1
)


def make_planted_kg(
    specs: Sequence[PlantSpec] = DEFAULT_SPECS,
    *,
    n_entities: int = 8000,
    n_noise_relations: int = 5,
    noise_facts: int = 1000,
    seed: int = 0,
) -> PlantedKG:
    """A random static KG: `n_noise_relations` relations of `noise_facts` uniform random facts
    each, plus one group of fresh relations per planted rule (see the module docstring)."""
    rng = np.random.default_rng(seed)
    heads: list[np.ndarray] = []
    rels: list[np.ndarray] = []
    tails: list[np.ndarray] = []
    names: list[str] = []

    def add(relation: int, h: np.ndarray, t: np.ndarray) -> None:
        heads.append(h)
        rels.append(np.full(len(h), relation))
        tails.append(t)

    for i in range(n_noise_relations):
        names.append(f"noise {i}")
        add(i, rng.integers(0, n_entities, noise_facts), rng.integers(0, n_entities, noise_facts))

    planted = []
    for k, spec in enumerate(specs):
        if not 0.0 <= spec.confidence <= 1.0:
            raise ValueError(f"confidence must be in [0, 1], got {spec.confidence}")
        n = spec.n_body
        need = 2 * n if spec.shape == "path" else n
        if need > n_entities:
            raise ValueError(f"{spec} needs {need} distinct entities, have {n_entities}")
        distinct = rng.choice(n_entities, size=need, replace=False)
        xs = distinct[:n]
        ys = rng.integers(0, n_entities, n)
        base = len(names)
        if spec.shape == "path":
            zs = distinct[n:]
            names += [f"planted {k} first", f"planted {k} second", f"planted {k} head"]
            add(base, xs, zs)
            add(base + 1, zs, ys)
            head_rel = base + 2
            rule = Rule.path(head_rel, [(base, False), (base + 1, False)])
        else:
            inverse = spec.shape == "inverse"
            names += [f"planted {k} body", f"planted {k} head"]
            if inverse:  # body fact r1(y, x)
                add(base, ys, xs)
            else:
                add(base, xs, ys)
            head_rel = base + 1
            rule = Rule(
                head=Atom(head_rel, 0, 1), body=(Atom(base, 1, 0) if inverse else Atom(base, 0, 1),)
            )
        hold = rng.random(n) < spec.confidence
        wrong = (ys + rng.integers(1, n_entities, n)) % n_entities  # never equal to ys
        add(head_rel, xs, np.where(hold, ys, wrong))
        planted.append(PlantedRule(rule, spec.confidence, n))

    facts = pd.DataFrame(
        {
            "head": np.concatenate(heads).astype(np.int64),
            "relation": np.concatenate(rels).astype(np.int64),
            "tail": np.concatenate(tails).astype(np.int64),
        }
    )
    return PlantedKG(facts, n_entities, len(names), names, planted)
