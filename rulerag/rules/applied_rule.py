"""Rules as rule application reads them: `AppliedRule`, a rule in TLogic's ids (inverse relations
r + n), and `applied_rules`, a rule list filtered, mirrored and ordered per head relation
(`rulerag.rules.application`'s docstring says why each copy exists)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from rulerag.rules.rule import Rule
from rulerag.rules.rule_table import ConstantRules, RuleTable
from rulerag.rules.settings import ApplySettings
from rulerag.rules.tlogic_io import rule_to_tlogic

__all__ = [
    "AppliedRule",
    "RulesByHead",
    "applied_rules",
]


@dataclass(frozen=True, slots=True)
class AppliedRule:
    """A rule in TLogic's ids: head and body relations (inverse r + n), constraints over the
    positions 0..len(body) of the path, confidence, and the rule it came from. A `pair` rule
    (static only) has every body relation from the query's entity to the candidate."""

    index: int  # position in the input rule list
    head: int
    body: tuple[int, ...]
    constraints: tuple[tuple[int, ...], ...]
    confidence: float
    pair: bool = False
    #: a static rule with constants: the head constant (the candidate it gives) and, for an
    #: ac1 rule, the body's constant (its one body relation leads from the query's entity to
    #: it); ac2 rules have a body relation and no body constant, zero-body rules no body
    constant: int | None = None
    body_constant: int | None = None
    #: a static rule with constants read backwards (`reversed`): it answers only the query
    #: whose entity is its head constant, with every X its body holds for
    reverse: bool = False

    def mirrored(self, n_relations: int) -> AppliedRule:
        """The rule for the inverse head: the body read backwards with each relation
        inverted, constraint positions reversed (for a one-atom rule TLogic learns the same
        rule under the inverse head; for static rules it holds without time order)."""

        def inv(rel: int) -> int:
            return (rel + n_relations) % (2 * n_relations)

        last = len(self.body)
        body = (
            tuple(inv(r) for r in self.body)
            if self.pair
            else tuple(inv(r) for r in reversed(self.body))
        )
        constraints = tuple(sorted(tuple(sorted(last - v for v in g)) for g in self.constraints))
        return AppliedRule(
            self.index, inv(self.head), body, constraints, self.confidence, self.pair
        )

    def reversed(self, n_relations: int) -> AppliedRule:
        """A static rule r(X, c) <= s(X, d | A) for the inverse head: the query (c, r⁻¹, ?),
        i.e. r(?, c), answered with every X the body holds for, as AnyBURL's
        `RuleAcyclic.computeHeadResults` (and SAFRAN's application) fires an X rule whose head
        constant is the query's entity (`r(c, X) <= ...` alike for r(c, ?))."""
        if self.constant is None or not self.body or self.reverse:
            raise ValueError("only a rule with constants and a body is read backwards")
        head = (self.head + n_relations) % (2 * n_relations)
        return replace(self, head=head, reverse=True)


class RulesByHead(dict[int, list[AppliedRule]]):
    """Head relation (TLogic id) -> its rules in application order; rules read from a
    `RuleTable` keep their rules with constants out of these lists, as arrays per head
    (`constant`, in the same order): what `constant_rules` returns either way."""

    def __init__(
        self,
        lists: Mapping[int, list[AppliedRule]],
        constant: Mapping[int, ConstantRules] | None = None,
    ) -> None:
        super().__init__(lists)
        self.constant = dict(constant or {})

    def constant_rules(self, head: int) -> ConstantRules:
        """The head's rules with constants, in application order."""
        listed = [r for r in self.get(head, []) if r.constant is not None]
        columns = self.constant.get(head)
        if columns is None:
            return ConstantRules.of(listed)
        if listed:  # `applied_rules` puts them in one place or the other
            raise ValueError(f"head {head}: rules with constants both as objects and as arrays")
        return columns

    def count(self, head: int) -> int:
        """The head's rules, with constants or without."""
        columns = self.constant.get(head)
        return len(self.get(head, [])) + (0 if columns is None else len(columns))


def applied_rules(
    rules: Sequence[Rule], n_relations: int, settings: ApplySettings = ApplySettings()
) -> RulesByHead:
    """Head relation (TLogic id) -> its rules in application order (confidence descending,
    stable), filtered as `filter_rules`; one-atom rules (every static rule) mirrored under the
    inverse head. From a `RuleTable`, its rules with constants go to `RulesByHead.constant`
    as arrays, never built into objects (`rule_table`'s docstring says why)."""
    settings.applicable()
    n = n_relations
    by_head: dict[int, list[AppliedRule]] = {}
    seen: set[tuple] = set()
    table = rules if isinstance(rules, RuleTable) else None
    numbered: Iterable[tuple[int, Rule]] = (
        zip(table.closed.tolist(), table.rules(table.closed), strict=True)
        if table is not None
        else enumerate(rules)
    )
    for index, rule in numbered:
        if rule.temporal != settings.temporal:
            continue
        if rule.length not in settings.lengths and (rule.length or not rule.constants):
            continue
        confidence = float(rule.confidence or 0.0) if settings.temporal else rule.score
        if confidence < settings.min_confidence:
            continue
        if settings.temporal and (rule.body_support or 0.0) < settings.min_body_support:
            continue
        applied = _as_applied(rule, index, confidence, n)
        if applied is None:
            continue
        copies = [applied]
        if (rule.length == 1 or not settings.temporal) and applied.constant is None:
            copies.append(applied.mirrored(n))
        elif not settings.temporal and applied.body:
            copies.append(applied.reversed(n))
        for copy in copies:
            key = (
                copy.head, copy.body, copy.constraints, copy.pair, copy.constant,
                copy.body_constant, copy.reverse,
            )  # fmt: skip
            if key in seen:
                continue
            seen.add(key)
            by_head.setdefault(copy.head, []).append(copy)
    for head in by_head:
        by_head[head].sort(key=lambda r: -r.confidence)  # stable: ties keep the input order
    constant = _constant_columns(table, n, settings) if table is not None else {}
    return RulesByHead(by_head, constant)


def _constant_columns(
    table: RuleTable, n: int, settings: ApplySettings
) -> dict[int, ConstantRules]:
    """`applied_rules` for a table's rules with constants, on arrays: the same filters,
    shapes (`_constant_applied`), backward reading, duplicates dropped and order as the loop
    over objects gives them."""
    c = table.constant_columns()
    for rule, index in zip(table.rules(c["odd"]), c["odd"].tolist(), strict=True):
        if _as_applied(rule, index, 0.0, n) is not None:  # only shapes it refuses are odd
            raise ValueError(f"rule {index} ({rule}): a shape the rule table cannot hold")
    if not len(c["position"]):
        return {}
    keep = (c["temporal"] == settings.temporal) & (
        np.isin(c["length"], settings.lengths) | (c["length"] == 0)
    )
    if settings.temporal:
        confidence = np.nan_to_num(c["confidence"], nan=0.0)
        keep &= np.nan_to_num(c["body_support"], nan=0.0) >= settings.min_body_support
    else:  # Rule.score: the first given of confidence, PCA and standard confidence
        confidence = np.zeros(len(keep))
        for name in ("std_confidence", "pca_confidence", "confidence"):
            confidence = np.where(np.isnan(c[name]), confidence, c[name])
    keep &= confidence >= settings.min_confidence
    v1, e1, v2, e2 = c["v1"], c["e1"], c["v2"], c["e2"]
    a_rel, a_sub, a_obj = c["body_rel"], c["body_sub"], c["body_obj"]
    last = np.maximum.reduce([np.ones_like(v1), a_sub, a_obj, v1, v2])  # the head's object

    def entity(variable: np.ndarray) -> np.ndarray:
        """The entity a variable is bound to (-1: free)."""
        return np.where(v1 == variable, e1, np.where(v2 == variable, e2, -1))

    def bound(variable: np.ndarray) -> np.ndarray:
        return (v1 == variable) | (v2 == variable)

    first = bound(np.zeros_like(v1))
    keep &= first != bound(last)  # one head end a constant
    head = np.where(first, c["head_relation"] + n, c["head_relation"])
    x = np.where(first, last, 0)
    constant = np.where(first, entity(np.zeros_like(v1)), entity(last))
    has_body = a_rel >= 0
    keep &= ~has_body | (((a_sub == x) | (a_obj == x)) & (a_sub != a_obj))
    forwards = a_sub == x
    body = np.where(has_body, np.where(forwards, a_rel, a_rel + n), -1)
    other = np.where(forwards, a_obj, a_sub)
    keep &= ~has_body | bound(other) | ((other != 0) & (other != last))
    body_constant = np.where(has_body, entity(other), -1)  # -1: A, a free variable
    # every kept rule forwards, then (static, with a body) backwards under the inverse head
    back = keep & has_body & (not settings.temporal)
    rows = np.concatenate([np.flatnonzero(keep), np.flatnonzero(back)])
    copy = np.repeat([0, 1], [int(keep.sum()), int(back.sum())])
    order = 2 * c["position"][rows] + copy
    rows, copy, order = (a[np.argsort(order, kind="stable")] for a in (rows, copy, order))
    columns = {
        "head": np.where(copy == 1, (head[rows] + n) % (2 * n), head[rows]),
        "body": body[rows],
        "constant": constant[rows],
        "body_constant": body_constant[rows],
        "reverse": copy == 1,
    }
    # a rule seen again (the same shape, from another row) keeps its first place (`order`):
    # sorted by shape, then order, the first of each shape's run
    shape = list(columns.values())
    by_shape = np.lexsort((order, *reversed(shape)))
    again = np.zeros(len(by_shape), bool)  # the shape of the row before it
    again[1:] = True
    for values in shape:
        ordered = values[by_shape]
        again[1:] &= ordered[1:] == ordered[:-1]
    firsts = by_shape[~again]
    del by_shape, again, shape
    columns = {k: v[firsts] for k, v in columns.items()}
    rows, order = rows[firsts], order[firsts]
    conf = confidence[rows]
    ranked = np.lexsort((order, -conf, columns["head"]))  # per head, stable by confidence
    heads = columns["head"][ranked]
    cuts = np.flatnonzero(heads[1:] != heads[:-1]) + 1
    out: dict[int, ConstantRules] = {}
    for part in np.split(ranked, cuts):
        out[int(columns["head"][part[0]])] = ConstantRules(
            c["position"][rows[part]],
            columns["constant"][part],
            columns["body"][part],
            columns["body_constant"][part],
            conf[part],
            columns["reverse"][part],
        )
    return out


def _as_applied(rule: Rule, index: int, confidence: float, n: int) -> AppliedRule | None:
    """The rule in TLogic's ids: a path, or (static) two or more atoms on the head's pair, or
    (static) an AnyBURL rule with a head constant; None for another shape."""
    if rule.constants:
        return _constant_applied(rule, index, confidence, n)
    try:
        head, body, groups = rule_to_tlogic(rule, n)
    except ValueError:
        pair = (rule.head.subject, rule.head.object)
        on_pair = all({a.subject, a.object} == set(pair) for a in rule.body)
        if rule.temporal or rule.length < 2 or not on_pair or pair[0] == pair[1]:
            return None
        body = [a.relation if a.subject == pair[0] else a.relation + n for a in rule.body]
        return AppliedRule(index, rule.head.relation, tuple(body), (), confidence, pair=True)
    constraints = tuple(tuple(g) for g in groups)
    return AppliedRule(index, head, tuple(body), constraints, confidence)


def _constant_applied(rule: Rule, index: int, confidence: float, n: int) -> AppliedRule | None:
    """An AnyBURL rule r(X, c) <= [s(X, d) | s(X, A)] (head r) or r(c, X) <= ... (head r + n,
    the subject query's), read from X, static or temporal (`temporal_constants`: the same
    shapes with the body before the head); None for another shape."""
    bound = rule.constant_of
    head = rule.head
    if rule.length > 1 or (head.subject in bound) == (head.object in bound):
        return None
    if head.subject in bound:
        relation, x, constant = head.relation + n, head.object, bound[head.subject]
    else:
        relation, x, constant = head.relation, head.subject, bound[head.object]
    if not rule.body:
        return AppliedRule(index, relation, (), (), confidence, constant=constant)
    (atom,) = rule.body
    if x not in (atom.subject, atom.object) or atom.subject == atom.object:
        return None
    body, other = (
        (atom.relation, atom.object) if atom.subject == x else (atom.relation + n, atom.subject)
    )
    if other not in bound and other in (head.subject, head.object):
        return None
    return AppliedRule(
        index, relation, (body,), (), confidence, constant=constant, body_constant=bound.get(other)
    )
