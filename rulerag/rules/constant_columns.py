"""Rules with constants as arrays, from the miner to the rules frame.

AnyBURL's rules with constants come by the million (6.9 million on FB15k-237), and each is the
same few shapes with other entities: `r(X, c) <= s(X, d)`, `r(X, c) <= s(X, A)`, `r(X, c) <=`.
A `Rule` object per rule cost the `mine_rules` stage most of its memory (a `Rule` with its
atoms, constants and statistics is most of a kilobyte). `ConstantRuleColumns` keeps them as one
array per field instead, builds a `Rule` only when asked (`rules`), and gives the rules frame its
columns directly (`frame_columns`), from one template rule per shape whose text, JSON and id
payload are filled with each rule's entities, so the frame is the one `bank.rules_frame` makes
from the `Rule` objects, byte for byte.

`RuleSet` is what a miner hands the `mine_rules` stage: the rules that stay objects (closed and
long cyclic ones, thousands) and the columns.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np

from rulerag.rules.rule import Rule

#: stand-ins for the head constant and the body constant while a shape's strings are made
_C, _D = -1, -2
_NAME = {_C: "\x00c\x00", _D: "\x00d\x00"}
_ID = {_C: -1_000_000_001, _D: -1_000_000_002}  # integers no rule structure holds


@dataclass(frozen=True)
class ConstantRuleColumns:
    """Rules with a constant in the head, one array entry per rule (`Rule.with_constant` says
    how each is laid out): head relation `relation`, the constant `const` as the head's object
    (as its subject where `inverse`), the body atom's code `code` (2 * relation + 1 when read
    backwards from X; -1: no body), its constant `d` (-1: none, a dangling variable), and the
    statistics. `temporal` marks TLogic's rules, which carry support, body support and
    confidence only (no standard confidence); every rule carries `unseen_negatives` in
    `extra`, as the miners set it."""

    relation: np.ndarray
    inverse: np.ndarray
    const: np.ndarray
    code: np.ndarray
    d: np.ndarray
    support: np.ndarray
    body: np.ndarray
    confidence: np.ndarray
    temporal: bool = False
    unseen_negatives: int = 0

    @classmethod
    def of(
        cls,
        r: int,
        inverse: bool,
        const: np.ndarray,
        support: np.ndarray,
        body: np.ndarray,
        confidence: np.ndarray,
        pc: int,
        code: np.ndarray | None = None,
        d: np.ndarray | None = None,
        *,
        temporal: bool = False,
    ) -> ConstantRuleColumns:
        """The rules of head relation `r` (constant as the subject with `inverse`) with the
        constants `const`, body codes `code` (none: zero-body rules) and body constants `d`
        (none: dangling, or no body)."""
        n = len(const)
        none = np.full(n, -1, dtype=np.int64)
        return cls(
            relation=np.full(n, r, dtype=np.int64),
            inverse=np.full(n, bool(inverse)),
            const=np.asarray(const, dtype=np.int64),
            code=none if code is None else np.asarray(code, dtype=np.int64),
            d=none if d is None else np.asarray(d, dtype=np.int64),
            support=np.asarray(support, dtype=np.float64),
            body=np.asarray(body, dtype=np.float64),
            confidence=np.asarray(confidence, dtype=np.float64),
            temporal=temporal,
            unseen_negatives=pc,
        )

    @classmethod
    def concat(cls, parts: Sequence[ConstantRuleColumns]) -> ConstantRuleColumns:
        """One set of columns from several, in order (all of one `temporal` and `pc`)."""
        if not parts:
            return cls.of(0, False, *([np.empty(0)] * 4), 0)
        kinds = {(p.temporal, p.unseen_negatives) for p in parts}
        if len(kinds) > 1:
            raise ValueError(f"columns of different kinds cannot be joined: {sorted(kinds)}")
        arrays = {
            f.name: np.concatenate([getattr(p, f.name) for p in parts])
            for f in fields(cls)
            if f.name not in ("temporal", "unseen_negatives")
        }
        return cls(**arrays, temporal=parts[0].temporal, unseen_negatives=parts[0].unseen_negatives)

    def __len__(self) -> int:
        return len(self.const)

    def _shapes(self) -> tuple[np.ndarray, list[Rule]]:
        """Each rule's shape number and the shapes' template rules."""
        dangling = self.d < 0
        same = ~dangling & (self.d == self.const)
        codes = int(self.code.max(initial=-1)) + 2  # -1 (no body) and every code
        key = (self.relation * 2 + self.inverse) * codes + self.code + 1
        key = key * 4 + same * 2 + dangling
        unique, shape = np.unique(key, return_inverse=True)
        rest, flags = np.divmod(unique, 4)
        head, code = np.divmod(rest, codes)
        templates = [
            _template(h >> 1, bool(h & 1), c - 1, bool(f >> 1), bool(f & 1))
            for h, c, f in zip(head.tolist(), code.tolist(), flags.tolist(), strict=True)
        ]
        return shape.reshape(-1), templates

    def rules(self) -> list[Rule]:
        """A `Rule` per entry, in order, as `Rule.with_constant` makes it with the statistics."""
        extra = {"unseen_negatives": self.unseen_negatives}
        shape, templates = self._shapes()
        out = []
        for k, c, dd, s, b, std, f in zip(
            shape.tolist(),
            self.const.tolist(),
            self.d.tolist(),
            self.support.tolist(),
            self.body.tolist(),
            self.std_confidence().tolist(),
            self.confidence.tolist(),
            strict=True,
        ):
            template = templates[k]
            value = {_C: c, _D: dd}
            out.append(
                Rule(
                    head=template.head,
                    body=template.body,
                    constants=tuple(sorted((v, value[e]) for v, e in template.constants)),
                    temporal=self.temporal,
                    support=s,
                    body_support=b,
                    std_confidence=None if std != std else std,  # NaN: none
                    confidence=f,
                    extra=extra,
                )
            )
        return out

    def std_confidence(self) -> np.ndarray:
        """support / body groundings (NaN where there are none, and for temporal rules)."""
        if self.temporal:
            return np.full(len(self), np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.body != 0, self.support / self.body, np.nan)

    def frame_columns(
        self,
        relation_names: Sequence[str] | Mapping[int, str],
        entity_names: Sequence[str] | Mapping[int, str],
    ) -> Iterator[tuple[str, Callable[[np.ndarray], list | np.ndarray]]]:
        """(column, maker) per column of a rules frame (`bank.rules_frame`'s), in order: the
        maker gives the column's values of the entries at the positions it is given (a chunk
        at a time, in the frame's order), each string as the `Rule` would write it."""
        shape, templates = self._shapes()

        def per_shape(make: Callable[[Rule], object]) -> Callable[[np.ndarray], list]:
            values = [make(t) for t in templates]
            return lambda at: [values[k] for k in shape[at].tolist()]

        def rows(at: np.ndarray) -> Iterator[tuple[int, int, int]]:
            """(shape, head constant, body constant or -1) per rule asked for."""
            yield from zip(
                shape[at].tolist(), self.const[at].tolist(), self.d[at].tolist(), strict=True
            )

        def filled(
            make: Callable[[Rule], str], stand_in: Mapping[int, str], name: Callable[[int], str]
        ) -> Callable[[np.ndarray], list[str]]:
            formats = [_format(make(t), stand_in) for t in templates]
            return lambda at: [
                formats[k].format(name(c), name(dd) if dd >= 0 else "") for k, c, dd in rows(at)
            ]

        def rule_ids(at: np.ndarray) -> list[str]:
            formats = [_format(_id_payload(t, self.temporal), _ID_TEXT) for t in templates]
            sha1 = hashlib.sha1
            return [
                "R" + sha1(formats[k].format(c, dd).encode()).hexdigest()[:12]
                for k, c, dd in rows(at)
            ]

        def array(values: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
            return lambda at: values[at]

        nan = np.full(len(self), np.nan)
        yield "rule_id", rule_ids
        yield "head_relation", array(self.relation)
        yield "head_relation_name", per_shape(lambda t: relation_names[t.head.relation])
        yield "length", per_shape(lambda t: t.length)
        yield "body", per_shape(Rule.body_json)
        yield "body_relations", per_shape(lambda t: json.dumps([a.relation for a in t.body]))
        yield "temporal", lambda at: [self.temporal] * len(at)
        yield "var_constraints", lambda at: ["[]"] * len(at)
        yield "score", array(self.confidence)
        yield "support", array(self.support)
        yield "body_support", array(self.body)
        yield "pca_body_support", array(nan)
        yield "head_coverage", array(nan)
        yield "std_confidence", array(self.std_confidence())
        yield "pca_confidence", array(nan)
        yield "confidence", array(self.confidence)
        yield (
            "text",
            filled(lambda t: t.text(relation_names, _NAME), _NAME, lambda e: str(entity_names[e])),
        )
        yield "constants", filled(_constants_json, _ID_TEXT, str)
        yield "kind", per_shape(lambda t: t.kind)


_ID_TEXT = {e: str(i) for e, i in _ID.items()}


@functools.cache
def _template(r: int, inverse: bool, code: int, same: bool, dangling: bool) -> Rule:
    """The rule of this shape (`ConstantRuleColumns`' fields) with the stand-ins `_C` / `_D`
    for its constants."""
    return Rule.with_constant(
        r,
        _C,
        constant_is_subject=inverse,
        body=None if code < 0 else (code >> 1, bool(code & 1)),
        body_constant=None if dangling else (_C if same else _D),
    )


def _constants_json(template: Rule) -> str:
    """`Rule.constants_json` of the template, its constants as the `_ID` stand-ins."""
    return json.dumps([[v, _ID[e]] for v, e in template.constants])


def _id_payload(template: Rule, temporal: bool) -> str:
    """`bank.rule_id`'s payload for the template made `temporal`, its constants as the `_ID`
    stand-ins."""
    parts: list = [
        [template.head.relation, template.head.subject, template.head.object],
        [[a.relation, a.subject, a.object] for a in template.body],
        temporal,
        [list(g) for g in template.var_constraints],
        [[v, _ID[e]] for v, e in template.constants],
    ]
    return json.dumps(parts)


def _format(text: str, stand_in: Mapping[int, str]) -> str:
    """`text` as a `str.format` string: the head constant's stand-in as {0}, the body
    constant's as {1}, every other brace doubled."""
    text = text.replace("{", "{{").replace("}", "}}")
    return text.replace(stand_in[_C], "{0}").replace(stand_in[_D], "{1}")


@dataclass
class RuleSet:
    """What a miner found: rules as objects (closed and long cyclic ones: thousands) and the
    rules with constants as columns (millions), which `bank.rules_frame` writes without a
    `Rule` each. Iterating gives every rule as a `Rule`, the objects first."""

    objects: list[Rule]
    constants: ConstantRuleColumns | None = None

    def __len__(self) -> int:
        return len(self.objects) + (len(self.constants) if self.constants is not None else 0)

    def __iter__(self) -> Iterator[Rule]:
        yield from self.objects
        if self.constants is not None:
            yield from self.constants.rules()

    @property
    def has_constants(self) -> bool:
        """Whether any rule binds a constant (the rules' text then names entities)."""
        if self.constants is not None and len(self.constants):
            return True
        return any(rule.constants for rule in self.objects)
