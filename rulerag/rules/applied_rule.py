"""Rules as rule application reads them: `AppliedRule`, a rule in TLogic's ids (inverse relations
r + n), and `applied_rules`, a rule list filtered, mirrored and ordered per head relation
(`rulerag.rules.application`'s docstring says why each copy exists)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from rulerag.rules.rule import Rule
from rulerag.rules.settings import ApplySettings
from rulerag.rules.tlogic_io import rule_to_tlogic

__all__ = [
    "AppliedRule",
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


def applied_rules(
    rules: Sequence[Rule], n_relations: int, settings: ApplySettings = ApplySettings()
) -> dict[int, list[AppliedRule]]:
    """Head relation (TLogic id) -> its rules in application order (confidence descending,
    stable), filtered as `filter_rules`; one-atom rules (every static rule) mirrored under the
    inverse head."""
    settings.applicable()
    n = n_relations
    by_head: dict[int, list[AppliedRule]] = {}
    seen: set[tuple] = set()
    for index, rule in enumerate(rules):
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
    return by_head


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
