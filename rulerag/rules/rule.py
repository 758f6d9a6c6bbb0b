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

Static rules may bind variables to constants (AnyBURL's rules, `anyburl_miner`): `constants`
maps a variable to an entity id, as sorted (variable, entity) pairs. The head is still
`[Entity1, r, EntityN]`, one of its two ends being a constant:

    r(X, c) <= s(X, d)   head Atom(r, 0, 2), body Atom(s, 0, 1), constants ((1, d), (2, c))
    r(c, X) <= s(X, d)   head Atom(r, 0, 2), body Atom(s, 2, 1), constants ((0, c), (1, d))
    r(X, c) <= s(X, A)   head Atom(r, 0, 2), body Atom(s, 0, 1), constants ((2, c),)
    r(X, c) <=           head Atom(r, 0, 1), no body,            constants ((1, c),)

`kind` names the shape: path, pair, ac1 (a constant in head and body), ac2 (a constant in
the head, the body's other end a free "dangling" variable) or zero (no body).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: every `Rule.kind`, in the order stats.json lists them
RULE_KINDS = ("path", "pair", "ac1", "ac2", "zero")


@dataclass(frozen=True, order=True, slots=True)
class Atom:
    """`relation(subject, object)` over rule variables (0 = Entity1, 1 = Entity2, ...)."""

    relation: int
    subject: int
    object: int

    def text(
        self,
        relation_names: Mapping[int, str] | Sequence[str],
        constants: Mapping[int, str] | None = None,
    ) -> str:
        """`[Entity1, name, Entity2]`; a variable in `constants` is written as that name."""
        name = relation_names[self.relation]
        bound = constants or {}

        def term(v: int) -> str:
            return bound.get(v, f"Entity{v + 1}")

        return f"[{term(self.subject)}, {name}, {term(self.object)}]"


@dataclass(frozen=True, slots=True)
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
    #: (variable, entity id) pairs, sorted: variables bound to a constant entity
    constants: tuple[tuple[int, int], ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def length(self) -> int:
        """Number of body atoms (the paper's default bank keeps length-1 rules)."""
        return len(self.body)

    @property
    def key(self) -> tuple:
        """Structural identity (head, body, temporal, constraints, and the constants when there
        are any: a rule without keeps its four-part key), ignoring statistics."""
        base = (self.head, self.body, self.temporal, self.var_constraints)
        return (*base, self.constants) if self.constants else base

    @property
    def constant_of(self) -> dict[int, int]:
        """Variable -> the entity it is bound to."""
        return dict(self.constants)

    @property
    def kind(self) -> str:
        """path, pair (two atoms on the head's pair), ac1, ac2 or zero (see the module doc)."""
        if not self.body:
            return "zero"
        if self.constants:
            bound = self.constant_of
            in_body = any(v in bound for a in self.body for v in (a.subject, a.object))
            return "ac1" if in_body else "ac2"
        pair = {self.head.subject, self.head.object}
        if len(self.body) > 1 and all({a.subject, a.object} == pair for a in self.body):
            return "pair"
        return "path"

    @property
    def score(self) -> float:
        """The confidence used for ranking: TLogic's confidence, else AMIE's PCA confidence."""
        for value in (self.confidence, self.pca_confidence, self.std_confidence):
            if value is not None:
                return float(value)
        return 0.0

    def _constant_names(
        self, entity_names: Mapping[int, str] | Sequence[str] | None
    ) -> dict[int, str]:
        if not self.constants:
            return {}
        if entity_names is None:
            raise ValueError(f"a rule with constants {self.constants} needs entity names")
        return {v: str(entity_names[e]) for v, e in self.constants}

    def text(
        self,
        relation_names: Mapping[int, str] | Sequence[str],
        entity_names: Mapping[int, str] | Sequence[str] | None = None,
    ) -> str:
        """The paper's text form: `[Entity1, r1, Entity2] leads to [Entity1, r2, Entity2]`;
        constants by their entity names (`entity_names` is needed then), a rule without a
        body as `(always) leads to [Entity1, gender, male]`."""
        names = self._constant_names(entity_names)
        body = ", ".join(atom.text(relation_names, names) for atom in self.body)
        return f"{body or '(always)'} leads to {self.head.text(relation_names, names)}"

    def formal(
        self,
        relation_names: Mapping[int, str] | Sequence[str],
        entity_names: Mapping[int, str] | Sequence[str] | None = None,
    ) -> str:
        """The formal form rule retrieval compares with the natural one (SIAR + R³, Table 4):
        `make_a_visit(X, Y) <- host_a_visit(Y, X)`, variables X (Entity1), Y (the head's
        object), then Z, W, ... for the middle ones; temporal bodies hold in the order written
        and before the head; a constant is its entity name (spaces as underscores)."""
        names = {v: "_".join(n.split()) for v, n in self._constant_names(entity_names).items()}

        def var(index: int) -> str:
            if index in names:
                return names[index]
            if index == self.head.subject:
                return "X"
            if index == self.head.object:
                return "Y"
            middle = sorted(
                {v for a in self.body for v in (a.subject, a.object)}
                - {0, self.head.object}
                - set(names)
            )
            return "ZWVUTS"[middle.index(index) % 6]

        def atom(a: Atom) -> str:
            name = "_".join(str(relation_names[a.relation]).split())
            return f"{name}({var(a.subject)}, {var(a.object)})"

        return f"{atom(self.head)} <- {', '.join(atom(a) for a in self.body)}".rstrip()

    def body_json(self) -> str:
        """The body as compact JSON `[[relation, subject, object], ...]` for Parquet columns."""
        return json.dumps([[a.relation, a.subject, a.object] for a in self.body])

    def constants_json(self) -> str:
        """The constants as compact JSON `[[variable, entity], ...]` for Parquet columns."""
        return json.dumps([list(pair) for pair in self.constants])

    @staticmethod
    def with_constant(
        head_relation: int,
        constant: int,
        *,
        constant_is_subject: bool = False,
        body: tuple[int, bool] | None = None,
        body_constant: int | None = None,
        **stats: Any,
    ) -> Rule:
        """An AnyBURL rule with the head constant `constant`: `r(X, c)` (or `r(c, X)` with
        `constant_is_subject`) <= one body atom `(relation, inverse)` read from X to the entity
        `body_constant` (AC1) or to a free variable (AC2, `body_constant=None`), or no body
        (`body=None`: a zero-body rule). Variables are numbered as the AMIE reader numbers
        terms (the head's subject, then the body's other terms, then the head's object), one
        variable per distinct constant, so a rule read back from its AMIE form is equal."""
        x, c = "X", ("c", constant)
        head_terms = (c, x) if constant_is_subject else (x, c)
        atoms: list[tuple[object, int, object]] = []
        if body is not None:
            relation, inverse = body
            other = ("c", body_constant) if body_constant is not None else "A"
            atoms.append((other, relation, x) if inverse else (x, relation, other))
        elif body_constant is not None:
            raise ValueError("a zero-body rule has no body constant")
        names = [head_terms[0]]
        for s_term, _rel, o_term in atoms:
            names += [t for t in (s_term, o_term) if t not in names and t != head_terms[1]]
        names.append(head_terms[1])
        number = {name: i for i, name in enumerate(names)}
        bound = tuple(sorted((number[t], t[1]) for t in names if isinstance(t, tuple)))
        return Rule(
            head=Atom(head_relation, 0, len(names) - 1),
            body=tuple(Atom(rel, number[s_], number[o_]) for s_, rel, o_ in atoms),
            constants=bound,  # type: ignore[arg-type]
            **stats,
        )

    @staticmethod
    def path(head_relation: int, body: Sequence[tuple[int, bool]], **stats: Any) -> Rule:
        """A path-shaped rule from `(relation, inverse)` pairs, variables numbered along it."""
        atoms = tuple(
            Atom(rel, i + 1, i) if inverse else Atom(rel, i, i + 1)
            for i, (rel, inverse) in enumerate(body)
        )
        return Rule(head=Atom(head_relation, 0, len(body)), body=atoms, **stats)
