"""Write static rules as AnyBURL writes them, so AnyBURL's and SAFRAN's application can read them.

AnyBURL (`de.unima.ki.anyburl`) and SAFRAN (`OpenBioLink/SAFRAN`, its `RuleReader`) read one rule
per line, four tab-separated fields: the body groundings ("predicted"), the body groundings the
head holds for ("correctly predicted"), the confidence, and the rule:

    1028<TAB>573<TAB>0.557393<TAB>r(X,Y) <= s(X,A), t(A,B), u(B,Y)
    35<TAB>34<TAB>0.971429<TAB>r(X,c) <= s(X,d)
    12<TAB>12<TAB>1.0<TAB>r(c,Y) <= s(Y,A)

Terms: the head's subject variable is `X`, its object variable `Y`, the other variables `A`, `B`,
... in the order the body reaches them; a constant is its entity name. The body starts at the
head's variable (`X`, or `Y` when the head's subject is a constant) and each atom continues
where the last one ended, which is how SAFRAN's reader follows a body: our static miners number
a body that way (`rulerag.rules.rule`). Neither tool uses the file's confidence for ranking:
SAFRAN recomputes it as correct / (predicted + UNSEEN_NEGATIVE_EXAMPLES), so a rule's AnyBURL
confidence (`anyburl_miner`) is what those two counts give there, without AnyBURL's weights for
ac2 rules (SAFRAN has none).

Not every rule has this form: AMIE's two atoms on the head's own pair (`pair` rules) would be read
as a path, and SAFRAN does not read zero-body rules (AnyBURL writes them as `r(X,c) <= ` with an
empty body); temporal rules have no AnyBURL form at all. `write_anyburl_rules` skips the kinds it
is told to skip and refuses any other rule it cannot write, naming it.

`read_anyburl_rules` reads such a file, AnyBURL's own output included, back into Rules on a KG's
ids, so that rules AnyBURL learned can be applied by `forecasting` beside ours. It gives each
rule AnyBURL's applied confidence (correct / (predicted + pc), times AnyBURL's weight for AC2
and zero-body rules, as `anyburl_miner` scores its own). Two things AnyBURL writes have no Rule
form and are skipped, counted by reason: rules with its reflexive token (`me_myself_i`, learned
with `REWRITE_REFLEXIV`: the constant stands for "the query's own entity") and rules with a
constant and more than one body atom (`MAX_LENGTH_ACYCLIC` > 1, off by default).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from rulerag.rules.rule import Atom, Rule

__all__ = ["SAFRAN_KINDS", "format_anyburl_rule", "read_anyburl_rules", "write_anyburl_rules"]

#: the rule kinds SAFRAN's reader and `applymax` handle (cyclic, AC1, AC2)
SAFRAN_KINDS = ("path", "ac1", "ac2")
#: characters AnyBURL's and SAFRAN's readers split rules on, so no name may hold them
_SEPARATORS = re.compile(r"[\s(),]")
_VARIABLES = "ABCDEFGHIJKLMNOPQRSTUVW"
#: AnyBURL's stand-in for "the same entity as the other end" (`Settings.REWRITE_REFLEXIV_TOKEN`)
REFLEXIVE_TOKEN = "me_myself_i"
_ATOM = re.compile(r"([^\s(),]+)\(([^\s(),]+),([^\s(),]+)\)")


def _name(value: object, what: str) -> str:
    name = str(value)
    if not name or _SEPARATORS.search(name) or re.fullmatch(r"[A-Z]", name) or "<=" in name:
        raise ValueError(
            f"{what} {name!r} cannot be written in AnyBURL's format (empty, whitespace, one "
            "of '(),', '<=', or a single capital letter, which AnyBURL reads as a variable)"
        )
    return name


def format_anyburl_rule(
    rule: Rule,
    relation_names: Mapping[int, str] | Sequence[str],
    entity_names: Mapping[int, str] | Sequence[str] | None = None,
) -> str:
    """One static rule in AnyBURL's syntax (`r(X,Y) <= s(X,A), t(A,Y)`); constants as their
    `entity_names` (needed then). ValueError for a rule without that form: temporal, a `pair`
    rule, or a body that does not start at the head's variable and continue atom by atom."""
    if rule.temporal or rule.var_constraints:
        raise ValueError(f"{rule.kind} rule: AnyBURL's format holds static rules only")
    if rule.kind == "pair":
        raise ValueError("a pair rule (two atoms on the head's own pair) has no AnyBURL form")
    if rule.constants and entity_names is None:
        raise ValueError(f"a rule with constants {rule.constants} needs entity_names")
    bound = {v: _name(entity_names[e], "entity name") for v, e in rule.constants}  # type: ignore[index]
    last = rule.head.object
    names: dict[int, str] = {}
    letters = iter(_VARIABLES)

    def term(v: int) -> str:
        if v in bound:
            return bound[v]
        if v == rule.head.subject:
            return "X"
        if v == last:
            return "Y"
        if v not in names:
            names[v] = next(letters)
        return names[v]

    def atom(a: Atom) -> str:
        relation = _name(relation_names[a.relation], "relation name")
        return f"{relation}({term(a.subject)},{term(a.object)})"

    start = rule.head.subject if rule.head.subject not in bound else last
    if _path_end(rule.body, start) is None:
        raise ValueError(
            f"{rule.kind} rule with head {rule.head}: its body {rule.body} does not run "
            "from the head's variable atom by atom, as AnyBURL's format needs"
        )
    head = atom(rule.head)
    body = ", ".join(atom(a) for a in rule.body)
    return f"{head} <= {body}" if body else f"{head} <= "


def _count(value: float | None, what: str, rule: Rule) -> int:
    if value is None or value != value or value < 0 or not float(value).is_integer():
        raise ValueError(f"{rule.kind} rule {rule.head}: {what} {value!r} is not a count")
    return int(value)


def write_anyburl_rules(
    rules: Iterable[Rule],
    path: Path | str,
    relation_names: Mapping[int, str] | Sequence[str],
    entity_names: Mapping[int, str] | Sequence[str] | None = None,
    *,
    kinds: Sequence[str] = SAFRAN_KINDS,
) -> Counter[str]:
    """Write the rules of `kinds` as AnyBURL's rule file (atomically); returns how many rules of
    each kind were written and, under `skipped:<kind>`, left out for their kind.

    Each needs its counts: `body_support` (predicted) and `support` (correct); the confidence
    column is support / body_support. Names are written as given: pass the KG's keys, the names
    the other tool reads in the triples files."""
    path = Path(path)
    wanted = set(kinds)
    counts: Counter[str] = Counter()
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            for rule in rules:
                if rule.kind not in wanted:
                    counts[f"skipped:{rule.kind}"] += 1
                    continue
                predicted = _count(rule.body_support, "body_support", rule)
                correct = _count(rule.support, "support", rule)
                confidence = correct / predicted if predicted else 0.0
                text = format_anyburl_rule(rule, relation_names, entity_names)
                handle.write(f"{predicted}\t{correct}\t{confidence:.6f}\t{text}\n")
                counts[rule.kind] += 1
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    return counts


def _parse_atoms(text: str) -> list[tuple[str, str, str]] | None:
    """`r(a,b), s(b,c)` -> [(r, a, b), (s, b, c)]; None when the text is not such a list."""
    atoms = _ATOM.findall(text)
    rest = _ATOM.sub("", text).replace(",", " ").strip()
    return None if rest else atoms


def read_anyburl_rules(
    path: Path | str,
    relation_ids: Mapping[str, int],
    entity_ids: Mapping[str, int],
    *,
    unseen_negatives: int = 5,
    ac2_weight: float = 0.1,
    zero_weight: float = 0.01,
) -> tuple[list[Rule], Counter[str]]:
    """The rules of an AnyBURL rule file as Rules on the KG's ids, and how many of each kind
    were read (`skipped:<reason>` for those without a Rule form, see the module doc).

    Variables are numbered as `Rule.with_constant` and the AMIE reader number them (the head's
    subject, the body's other terms in order, the head's object last), so a rule this module
    wrote reads back equal. `support` is the file's "correct", `body_support` its
    "predicted", `std_confidence` their ratio, `confidence` AnyBURL's applied confidence.
    ValueError, naming the file and line, for a line that is not an AnyBURL rule, a name the
    KG does not have, or a cyclic body that is not a path from the head's subject to its
    object."""
    path = Path(path)
    rules: list[Rule] = []
    counts: Counter[str] = Counter()
    weight = {"ac2": ac2_weight, "zero": zero_weight}
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue

            def bad(why: str, number: int = number, line: str = line) -> ValueError:
                return ValueError(f"{path}, line {number}: {why}: {line.rstrip()[:200]!r}")

            fields = line.rstrip("\n").split("\t")
            if len(fields) != 4 or " <= " not in fields[3] + " ":
                raise bad("not `predicted<TAB>correct<TAB>confidence<TAB>head <= body`")
            try:
                predicted, correct = int(fields[0]), int(fields[1])
            except ValueError:
                raise bad("the counts are not integers") from None
            head_text, _, body_text = fields[3].partition(" <=")
            head = _parse_atoms(head_text.strip())
            body = _parse_atoms(body_text.strip())
            if head is None or body is None or len(head) != 1 or predicted < correct:
                raise bad("not one head atom <= atoms, with correct <= predicted")
            atoms = head + body
            if any(REFLEXIVE_TOKEN in (s, o) for _, s, o in atoms):
                counts["skipped:reflexive"] += 1
                continue
            _, subject, obj = head[0]
            terms = [subject]
            for term in (t for _, s, o in body for t in (s, o)):
                if term != obj and term not in terms:
                    terms.append(term)
            if obj in terms:
                raise bad("the head's two ends are the same term")
            terms.append(obj)
            number_of = {term: i for i, term in enumerate(terms)}
            try:
                constants = tuple(
                    sorted((number_of[t], entity_ids[t]) for t in terms if not _is_variable(t))
                )
                relation = [relation_ids[r] for r, _, _ in atoms]
            except KeyError as missing:
                raise bad(f"{missing} is not a name of this KG") from None
            if constants and len(body) > 1:
                counts["skipped:long_acyclic"] += 1
                continue
            rule = Rule(
                head=Atom(relation[0], 0, len(terms) - 1),
                body=tuple(
                    Atom(rel, number_of[s], number_of[o])
                    for rel, (_, s, o) in zip(relation[1:], body, strict=True)
                ),
                constants=constants,
                support=float(correct),
                body_support=float(predicted),
                std_confidence=correct / predicted if predicted else None,
            )
            applied = weight.get(rule.kind, 1.0) * correct / (predicted + unseen_negatives)
            rule = dataclasses.replace(rule, confidence=applied)
            if rule.kind == "path" and _path_end(rule.body, 0) != rule.head.object:
                raise bad("a cyclic body that is not a path from X to Y")
            rules.append(rule)
            counts[rule.kind] += 1
    return rules, counts


def _is_variable(term: str) -> bool:
    return re.fullmatch(r"[A-Z]", term) is not None


def _path_end(body: Sequence[Atom], start: int) -> int | None:
    """Where a body read atom by atom from the variable `start` ends, each atom continuing
    from the last one's other end (AnyBURL's body order); None when an atom does not."""
    at = start
    for a in body:
        if at not in (a.subject, a.object):
            return None
        at = a.object if a.subject == at else a.subject
    return at
