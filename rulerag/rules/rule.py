"""The Rule type both miners produce and every later stage reads.

A rule is a Horn clause over variables numbered 0, 1, 2, ... and written `Entity1`, `Entity2`,
... in text. The head is always `[Entity1, r, EntityN]` (variables 0 and n-1); body atoms name
their own subject and object variables, so using a relation backwards is explicit:
`[Entity2, r1, Entity1] leads to [Entity1, r2, Entity2]` has the body atom
`Atom(r1, subject=1, object=0)`. Path-shaped bodies number variables along the path, which
gives the paper's text form; AMIE's other closed shape (two body atoms on the head's own pair,
`r1(x, y) & r2(x, y) => r(x, y)`) fits the same type.

Temporal rules (TLogic) add an order on time: body atoms hold at times t1 <= t2 <= ... <= tk,
all strictly before the head's time; `var_constraints` lists groups of variables that must be
bound to the same entity (TLogic's walks can revisit an entity).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, order=True)
class Atom:
    """`relation(subject, object)` over rule variables (0 = Entity1, 1 = Entity2, ...)."""

    relation: int
    subject: int
    object: int

    def text(self, relation_names: Mapping[int, str] | Sequence[str]) -> str:
        name = relation_names[self.relation]
        return f"[Entity{self.subject + 1}, {name}, Entity{self.object + 1}]"


@dataclass(frozen=True)
class Rule:
    """A mined rule: structure plus the statistics its miner computed.

    Statistics follow the miners' own definitions (AMIE: support, head coverage, standard and
    PCA confidence; TLogic: rule support / body support = confidence). Fields a miner does not
    compute stay None.
    """

    head: Atom
    body: tuple[Atom, ...]
    temporal: bool = False
    var_constraints: tuple[tuple[int, ...], ...] = ()
    support: float | None = None
    body_support: float | None = None
    pca_body_support: float | None = None
    head_coverage: float | None = None
    std_confidence: float | None = None
    pca_confidence: float | None = None
    confidence: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def length(self) -> int:
        """Number of body atoms (the paper's default bank keeps length-1 rules)."""
        return len(self.body)

    @property
    def key(self) -> tuple:
        """Structural identity (head, body, temporal, constraints), ignoring statistics."""
        return (self.head, self.body, self.temporal, self.var_constraints)

    @property
    def score(self) -> float:
        """The confidence used for ranking: TLogic's confidence, else AMIE's PCA confidence."""
        for value in (self.confidence, self.pca_confidence, self.std_confidence):
            if value is not None:
                return float(value)
        return 0.0

    def text(self, relation_names: Mapping[int, str] | Sequence[str]) -> str:
        """The paper's text form: `[Entity1, r1, Entity2] leads to [Entity1, r2, Entity2]`."""
        body = ", ".join(atom.text(relation_names) for atom in self.body)
        return f"{body} leads to {self.head.text(relation_names)}"

    def formal(self, relation_names: Mapping[int, str] | Sequence[str]) -> str:
        """The formal form rule retrieval compares with the natural one (SIAR + R³, Table 4):
        `make_a_visit(X, Y) <- host_a_visit(Y, X)`, variables X (Entity1), Y (the head's
        object), then Z, W, ... for the middle ones; temporal bodies hold in the order written
        and before the head."""

        def var(index: int) -> str:
            if index == self.head.subject:
                return "X"
            if index == self.head.object:
                return "Y"
            middle = sorted(
                {v for a in self.body for v in (a.subject, a.object)} - {0, self.head.object}
            )
            return "ZWVUTS"[middle.index(index) % 6]

        def atom(a: Atom) -> str:
            name = "_".join(str(relation_names[a.relation]).split())
            return f"{name}({var(a.subject)}, {var(a.object)})"

        return f"{atom(self.head)} <- {', '.join(atom(a) for a in self.body)}"

    def body_json(self) -> str:
        """The body as compact JSON `[[relation, subject, object], ...]` for Parquet columns."""
        return json.dumps([[a.relation, a.subject, a.object] for a in self.body])

    @staticmethod
    def path(head_relation: int, body: Sequence[tuple[int, bool]], **stats: Any) -> Rule:
        """A path-shaped rule from `(relation, inverse)` pairs, variables numbered along it."""
        atoms = tuple(
            Atom(rel, i + 1, i) if inverse else Atom(rel, i, i + 1)
            for i, (rel, inverse) in enumerate(body)
        )
        return Rule(head=Atom(head_relation, 0, len(body)), body=atoms, **stats)
