"""TLogic's rules JSON, read and written, so rules mined by the original tool can be used here
and ours can be applied by TLogic's `apply.py`.

TLogic (`mycode/rule_learning.py`) saves `{head_rel_id: [{"head_rel", "body_rels",
"var_constraints", "conf", "rule_supp", "body_supp"}, ...]}`. Its ids add inverse relations:
`grapher.py` numbers the inverse of relation `r` as `r + n_relations`, so a file cannot be
decoded without knowing `n_relations` (the size of the dataset's `relation2id.json`).

TLogic's variables: a rule of length l has variables X0 ... Xl; the head is `head_rel(X0, Xl)`,
body atom i is `body_rels[i](Xi, Xi+1)` at time Ti with T0 <= T1 <= ... < T_head, and
`var_constraints` lists groups of variable indices bound to the same entity.

Our `Rule` has no inverse relation ids, so:

* an inverse body relation `b + n` becomes `Atom(b, subject=i+1, object=i)`;
* a rule whose head is an inverse relation `r + n` (TLogic learns rules for every relation in
  its edge list, inverses included) is the rule `r(Xl, X0) <- ...`; its variables are renamed
  `Xi -> X(l-i)` so that the head is `[Entity1, r, EntityN]` like every other rule. Its body
  then walks from EntityN back to Entity1 in time order (for l >= 2 this is a different rule
  from any forward one: the earliest body fact touches the head's object, not its subject).
* For l = 1 the two renderings coincide: TLogic's `r(X0,X1) <- b^-1(X0,X1)` and
  `r^-1(X0,X1) <- b(X0,X1)` are the same rule (same groundings, same exact confidence).
  Reading keeps the first one met, scanning head ids in ascending order, so the forward-head
  copy wins; writing emits both copies (with the same statistics), so TLogic's `apply.py` can
  use the rule for subject and object queries alike.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rulerag.errors import InputError
from rulerag.rules.rule import Atom, Rule


class TLogicFormatError(InputError):
    """A TLogic rules JSON that cannot be read: names the file and the rule (TLogic writes the
    whole file on one line, so a rule is found by its head key and position, not a line)."""

    def __init__(self, path: Path | str, message: str, line: int | None = None) -> None:
        self.path, self.line, self.reason = Path(path), line, message
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")


def rule_from_tlogic(
    head_rel: int,
    body_rels: Sequence[int],
    var_constraints: Sequence[Sequence[int]],
    n_relations: int,
    *,
    conf: float | None = None,
    rule_supp: float | None = None,
    body_supp: float | None = None,
) -> Rule:
    """Turn one TLogic rule (TLogic ids, inverses as `r + n_relations`) into a temporal Rule."""
    n = n_relations
    length = len(body_rels)
    if length == 0:
        raise ValueError("a TLogic rule needs at least one body relation")
    for rel in (head_rel, *body_rels):
        if not 0 <= int(rel) < 2 * n:
            raise ValueError(f"relation id {rel} is outside [0, 2 * n_relations = {2 * n})")
    inverse_head = head_rel >= n

    def var(i: int) -> int:
        return length - i if inverse_head else i

    atoms = []
    for i, rel in enumerate(int(b) for b in body_rels):
        subj, obj = (i + 1, i) if rel >= n else (i, i + 1)
        atoms.append(Atom(rel % n, var(subj), var(obj)))
    groups = tuple(sorted(tuple(sorted(var(int(v)) for v in g)) for g in var_constraints))
    return Rule(
        head=Atom(int(head_rel) % n, 0, length),
        body=tuple(atoms),
        temporal=True,
        var_constraints=groups,
        support=None if rule_supp is None else float(rule_supp),
        body_support=None if body_supp is None else float(body_supp),
        confidence=None if conf is None else float(conf),
    )


def rule_to_tlogic(rule: Rule, n_relations: int) -> tuple[int, list[int], list[list[int]]]:
    """`(head_rel, body_rels, var_constraints)` in TLogic's ids for a path-shaped rule.

    Raises ValueError for shapes TLogic cannot express (e.g. AMIE's two atoms on the head pair).
    """
    n = n_relations
    length = rule.length
    if rule.constants:
        raise ValueError(f"TLogic's rules have no constants: {rule}")
    if length == 0 or rule.head.subject != 0 or rule.head.object != length:
        raise ValueError(f"not a TLogic path rule (head must be [Entity1, r, EntityN]): {rule}")

    def follows(mapping: Sequence[int]) -> bool:
        return all(
            {a.subject, a.object} == {mapping[i], mapping[i + 1]} for i, a in enumerate(rule.body)
        )

    forward = list(range(length + 1))
    backward = forward[::-1]
    if follows(forward):
        var, head_rel = forward, rule.head.relation
    elif follows(backward):
        var, head_rel = backward, rule.head.relation + n
    else:
        raise ValueError(f"body is not a path from Entity1 to EntityN in time order: {rule}")
    body_rels = [
        a.relation if a.subject == var[i] else a.relation + n for i, a in enumerate(rule.body)
    ]
    # var[i] is our variable for TLogic's Xi; var is its own inverse (identity or reversal)
    groups = sorted(sorted(var[v] for v in g) for g in rule.var_constraints)
    return head_rel, body_rels, groups


def sort_temporal_rules(rules: Iterable[Rule]) -> list[Rule]:
    """The order both the miner and the reader return: head relation, confidence descending,
    then length and structure (constants last, () for TLogic's own rules), so equal inputs
    give byte-identical outputs."""

    def key(rule: Rule) -> tuple:
        body = tuple((a.relation, a.subject, a.object) for a in rule.body)
        return (
            rule.head.relation, -rule.score, rule.length, body, rule.var_constraints,
            rule.constants,
        )  # fmt: skip

    return sorted(rules, key=key)


def read_tlogic_json(path: str | os.PathLike[str], n_relations: int) -> list[Rule]:
    """Rules from a TLogic `*_rules.json` file (as `learn.py` writes it).

    `n_relations` is the number of relations without inverses (TLogic's `relation2id.json`).
    Duplicates (the two renderings of a one-atom rule, see the module notes) are merged keeping
    the forward-head one.

    Every entry is checked strictly (types, ids, ranges) and a bad one raises
    `TLogicFormatError` naming it: a string `"12"` for `body_rels`, a float id or `conf: true`
    would otherwise become a different rule, silently.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        message = f"not a TLogic rules JSON (not JSON: {err.msg}, column {err.colno})"
        raise TLogicFormatError(path, message, err.lineno) from None
    if not isinstance(data, dict):
        raise TLogicFormatError(
            path, "not a TLogic rules JSON (expected an object {head relation id: [rules]})"
        )
    for head_key, items in data.items():
        if not (head_key.isascii() and head_key.isdecimal()) or not isinstance(items, list):
            raise TLogicFormatError(
                path, f"head {head_key!r}: expected a relation id mapped to a list of rules"
            )
    seen: dict[tuple, Rule] = {}
    for head_key in sorted(data, key=int):
        for index, item in enumerate(data[head_key], start=1):
            try:
                rule = _rule_entry(item, int(head_key), n_relations)
            except ValueError as err:
                raise TLogicFormatError(path, f"head {head_key}, rule {index}: {err}") from None
            seen.setdefault(rule.key, rule)
    return sort_temporal_rules(seen.values())


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rule_entry(item: object, head: int, n_relations: int) -> Rule:
    """One entry of a TLogic rules JSON as a Rule; ValueError says what is wrong with it."""
    if not isinstance(item, dict):
        raise ValueError(f"expected an object with head_rel and body_rels, got {item!r:.80}")
    head_rel, body = item.get("head_rel"), item.get("body_rels")
    if not _is_int(head_rel) or head_rel != head:
        raise ValueError(f"head_rel {head_rel!r:.40} is not the head id {head} it is listed under")
    if not isinstance(body, list) or not body or not all(_is_int(b) for b in body):
        raise ValueError(f"body_rels {body!r:.80} is not a non-empty list of relation ids")
    groups = item.get("var_constraints", [])
    if not isinstance(groups, list) or not all(
        isinstance(g, list) and all(_is_int(v) and 0 <= v <= len(body) for v in g) for g in groups
    ):
        raise ValueError(
            f"var_constraints {groups!r:.80} is not a list of lists of variable indices "
            f"0..{len(body)}"
        )
    stats: dict[str, float | None] = {}
    for key, top, want in (
        ("conf", 1.0, "a number in [0, 1]"),
        ("rule_supp", math.inf, "a count (>= 0)"),
        ("body_supp", math.inf, "a count (>= 0)"),
    ):
        value = item.get(key)
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (0 <= value <= top and math.isfinite(value))
        ):
            raise ValueError(f"{key} {value!r:.40} is not {want}")
        stats[key] = value
    return rule_from_tlogic(
        head_rel,
        body,
        groups,
        n_relations,
        conf=stats["conf"],
        rule_supp=stats["rule_supp"],
        body_supp=stats["body_supp"],
    )


def _tlogic_number(value: float | None) -> float | int | None:
    """TLogic writes supports as ints and confidences as floats; keep that where it fits."""
    if value is None:
        return None
    return int(value) if float(value).is_integer() else float(value)


def write_tlogic_json(
    rules: Iterable[Rule],
    path: str | os.PathLike[str],
    n_relations: int,
    *,
    mirror_length1: bool = True,
) -> None:
    """Write rules as TLogic's rules JSON (heads sorted, rules by confidence descending).

    With `mirror_length1` every one-atom rule is also written under the inverse head
    (`r + n_relations`, body relation inverted), as TLogic itself learns it, so that
    TLogic's `apply.py` finds it for queries in both directions. The file is written to a
    temporary name and renamed, so a crash never leaves half a file.
    """
    n = n_relations
    out: dict[int, list[dict[str, Any]]] = {}
    keys: set[tuple] = set()

    def add(head_rel: int, body_rels: list[int], groups: list[list[int]], rule: Rule) -> None:
        key = (head_rel, tuple(body_rels), tuple(map(tuple, groups)))
        if key in keys:
            return
        keys.add(key)
        out.setdefault(head_rel, []).append(
            {
                "head_rel": head_rel,
                "body_rels": body_rels,
                "var_constraints": groups,
                "conf": rule.confidence,
                "rule_supp": _tlogic_number(rule.support),
                "body_supp": _tlogic_number(rule.body_support),
            }
        )

    for rule in rules:
        head_rel, body_rels, groups = rule_to_tlogic(rule, n)
        add(head_rel, body_rels, groups, rule)
        if mirror_length1 and rule.length == 1:
            add((head_rel + n) % (2 * n), [(body_rels[0] + n) % (2 * n)], groups, rule)
    ordered = {
        str(h): sorted(out[h], key=lambda r: -(r["conf"] or 0.0)) for h in sorted(out)
    }  # stable sort: ties keep the input order, as TLogic's sort_rules_dict does
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fout:
            json.dump(ordered, fout)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
