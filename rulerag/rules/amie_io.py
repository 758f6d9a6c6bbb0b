"""Read and write AMIE 3's TSV rule output, so users can bring rules mined by the original tool.

AMIE prints a log preamble, then a header line

    Rule<TAB>Head Coverage<TAB>Std Confidence<TAB>PCA Confidence<TAB>Positive Examples<TAB>
    Body size<TAB>PCA Body size<TAB>Functional variable[<TAB>Std. Lower Bound<TAB>...]

then one rule per line, atoms written `subject  relation  object` separated by two spaces
(`?e  <livesIn>  ?b  ?a  <isMarriedTo>  ?e   => ?a  <livesIn>  ?b`), or with `-datalog`
`livesIn(?e,?b) isMarriedTo(?a,?e)  => livesIn(?a,?b)`, then a few closing log lines. Columns are
found by their header names, so `-ostd` output (no standard confidence) reads too.

AMIE's variables are renamed onto ours: the head's subject is variable 0 (`Entity1`), the head's
object the last variable; a path-shaped body is ordered and numbered along the path from the
head's subject (exactly what the static miner produces), any other body keeps its variables in
order of first appearance and its atoms sorted. Relation names are looked up as written, then
without / with AMIE's angle brackets (`<livesIn>` <-> `livesIn`). Rules with constants (AMIE's
`-const`, AnyBURL's AC1 / AC2 / zero-body rules) are read when `entity_ids` maps the constants'
names (AMIE writes a constant as the plain entity name in its atom, `?a  gender  male`); a
constant then becomes a variable bound to that entity (`Rule.constants`), numbered like any
other term, and a rule without body atoms (`   => ?a  gender  male`, which AMIE never writes but
our export does for AnyBURL's zero-body rules) is read when its head has a constant. Without
`entity_ids`, or with a head that is not two distinct terms, a rule has no `Rule` form: an
error names the line, or `skip_unsupported=True` skips it. The "Functional variable" column is
kept as `extra["functional_variable"]` ("subject" or "object").
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from rulerag.errors import InputError
from rulerag.rules.rule import Atom, Rule

HEADER = (
    "Rule",
    "Head Coverage",
    "Std Confidence",
    "PCA Confidence",
    "Positive Examples",
    "Body size",
    "PCA Body size",
    "Functional variable",
)
_FIELDS = {
    "Head Coverage": "head_coverage",
    "Std Confidence": "std_confidence",
    "PCA Confidence": "pca_confidence",
    "Positive Examples": "support",
    "Body size": "body_support",
    "PCA Body size": "pca_body_support",
}
_DATALOG_ATOM = re.compile(r"([^\s(]+)\(\s*([^,\s]+)\s*,\s*([^)\s]+)\s*\)")
_MIDDLE_VARS = "efghijklmnopqrstuvwxyz"


class AmieFormatError(InputError):
    """An AMIE rule file cannot be read; names the file and the (1-based) line."""

    def __init__(self, path: Path | str, line: int, message: str) -> None:
        self.path, self.line, self.reason = Path(path), line, message
        super().__init__(f"{path}, line {line}: {message}")


class _Unsupported(Exception):
    """A well-formed AMIE rule that the Rule type cannot represent (constants, ...)."""


def _number(text: str) -> float | None:
    """AMIE's numbers (Java DecimalFormat: `0.5`, `.5`, `1`, `∞`); None when absent or NaN.

    Anything else raises ValueError: a statistic that is not a number (a shifted column, a
    locale's `0,5`) or is negative (AMIE's supports and ratios never are) is a broken line,
    and reading it as "no value" would rank the rule silently wrong.
    """
    text = text.strip()
    if text in ("", "\ufffd"):
        return None
    if text == "∞":
        return math.inf
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not a number (AMIE writes 0.5, .5, 1 or ∞)") from None
    if value < 0:
        raise ValueError(f"{text[:40]!r} is negative (AMIE's supports and ratios never are)")
    return None if math.isnan(value) else value


def _split_atoms(part: str) -> list[tuple[str, str, str]]:
    """`?a  r  ?b  ?b  s  ?c` or `r(?a,?b) s(?b,?c)` into (subject, relation, object) triples."""
    part = part.strip()
    if not part:
        return []
    datalog = _DATALOG_ATOM.findall(part)
    if datalog and _DATALOG_ATOM.sub("", part).strip() == "":
        return [(s, r, o) for r, s, o in datalog]
    tokens = re.split(r"\s{2,}|\t", part)
    if len(tokens) % 3:
        tokens = part.split()  # single-space separated output from other tools
    if len(tokens) % 3:
        raise ValueError(f"cannot split {part!r} into subject-relation-object atoms")
    return [(tokens[i], tokens[i + 1], tokens[i + 2]) for i in range(0, len(tokens), 3)]


def _relation_id(name: str, relation_ids: Mapping[str, int]) -> int | None:
    for candidate in (name, name[1:-1] if name[:1] == "<" and name[-1:] == ">" else None):
        if candidate is not None and candidate in relation_ids:
            return int(relation_ids[candidate])
    bracketed = f"<{name}>"
    return int(relation_ids[bracketed]) if bracketed in relation_ids else None


def _as_path(
    head: tuple[str, str, str], body: list[tuple[str, str, str]]
) -> tuple[list[tuple[str, str, str]], list[str]] | None:
    """The body atoms in order along a simple path from the head's subject to its object, and
    the variables visited; None when the body is not such a path."""
    current, target = head[0], head[2]
    visited, order, used = [current], [], set()
    while current != target:
        touching = [i for i, a in enumerate(body) if i not in used and current in (a[0], a[2])]
        if len(touching) != 1:
            return None
        atom = body[touching[0]]
        current = atom[2] if atom[0] == current else atom[0]
        if current in visited:
            return None
        used.add(touching[0])
        order.append(atom)
        visited.append(current)
    return (order, visited) if len(used) == len(body) else None


def _parse_rule(
    text: str,
    relation_ids: Mapping[str, int],
    path: Path,
    line: int,
    entity_ids: Mapping[str, int] | None = None,
) -> Rule:
    if text.count("=>") != 1:
        raise AmieFormatError(path, line, f"expected one '=>' in rule {text!r}")
    body_text, head_text = text.split("=>")
    try:
        body = _split_atoms(body_text)
        heads = _split_atoms(head_text)
    except ValueError as err:
        raise AmieFormatError(path, line, str(err)) from None
    head_constant = len(heads) == 1 and not all(t.startswith("?") for t in heads[0][::2])
    if len(heads) != 1 or not (body or head_constant):
        raise AmieFormatError(path, line, f"expected a body and one head atom in {text!r}")
    head = heads[0]
    ids = {}
    for _s, rel, _o in [head, *body]:
        rid = _relation_id(rel, relation_ids)
        if rid is None:
            raise AmieFormatError(path, line, f"unknown relation {rel!r} (not in relation_ids)")
        ids[rel] = rid
    constants: dict[str, int] = {}
    for s, _rel, o in [head, *body]:
        for term in (s, o):
            if term.startswith("?"):
                continue
            if entity_ids is None:
                raise _Unsupported(
                    f"constant {term!r}: rules with constants need entity_ids to be read"
                )
            if term not in entity_ids:
                raise AmieFormatError(path, line, f"unknown entity {term!r} (not in entity_ids)")
            constants[term] = int(entity_ids[term])
    if head[0] == head[2]:
        raise _Unsupported(f"head {head} does not have two distinct variables")

    walk = _as_path(head, body)
    if walk is not None:
        ordered, names = walk
    else:
        ordered, names = body, [head[0]]
        for s, _rel, o in body:
            names += [t for t in (s, o) if t not in names and t != head[2]]
        names.append(head[2])
    number = {name: i for i, name in enumerate(names)}
    atoms = tuple(Atom(ids[r], number[s], number[o]) for s, r, o in ordered)
    if walk is None:
        atoms = tuple(sorted(atoms))
    bound = tuple(sorted((number[name], entity) for name, entity in constants.items()))
    return Rule(head=Atom(ids[head[1]], 0, len(names) - 1), body=atoms, constants=bound)


def read_amie_tsv(
    path: Path | str,
    relation_ids: Mapping[str, int],
    *,
    skip_unsupported: bool = False,
    entity_ids: Mapping[str, int] | None = None,
) -> list[Rule]:
    """Rules from an AMIE 3 output file (log lines around the table are skipped).

    `relation_ids` maps the relation names as AMIE printed them (i.e. as they were in the TSV
    given to AMIE) to our relation ids. Unknown relations always raise `AmieFormatError` naming
    the line; rules the Rule type cannot hold raise too unless `skip_unsupported` (then they are
    skipped with one warning giving their count). `entity_ids` maps constants' names to entity
    ids; without it a rule with a constant cannot be held.
    """
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    header = next(
        (
            i
            for i, line in enumerate(lines)
            if line.split("\t")[0].strip() == "Rule" and "\t" in line
        ),
        None,
    )
    if header is None:  # a bare table without AMIE's header: AMIE's default columns
        cols = {name: i for i, name in enumerate(HEADER)}
        rows = list(enumerate(lines, start=1))
    else:
        cols = {name.strip(): i for i, name in enumerate(lines[header].split("\t"))}
        rows = list(enumerate(lines[header + 1 :], start=header + 2))
    rules: list[Rule] = []
    skipped = 0
    for line_no, line in rows:
        fields = line.split("\t")
        if "=>" not in fields[0]:
            if fields[0].lstrip().startswith("?"):  # AMIE's log lines never start with a variable
                raise AmieFormatError(path, line_no, f"a rule without '=>': {fields[0][:80]!r}")
            continue  # AMIE's closing log lines ("Mining done in ...")
        try:
            rule = _parse_rule(fields[0], relation_ids, path, line_no, entity_ids)
        except _Unsupported as why:
            if not skip_unsupported:
                raise AmieFormatError(path, line_no, str(why)) from None
            skipped += 1
            continue
        stats: dict[str, float | None] = {}
        for column, attr in _FIELDS.items():
            i = cols.get(column)
            try:
                stats[attr] = _number(fields[i]) if i is not None and i < len(fields) else None
            except ValueError as err:
                raise AmieFormatError(path, line_no, f"column {column!r}: {err}") from None
        extra = {}
        i = cols.get("Functional variable")
        if i is not None and i < len(fields) and fields[i].strip():
            subject = _head_subject_name(fields[0])
            extra["functional_variable"] = "subject" if fields[i].strip() == subject else "object"
        rules.append(_with(rule, stats, extra))
    if skipped:
        warnings.warn(
            f"{path}: skipped {skipped} AMIE rules that have no Rule form (constants)",
            stacklevel=2,
        )
    return rules


def _head_subject_name(text: str) -> str:
    head = _split_atoms(text.split("=>")[1])
    return head[0][0]


def _with(rule: Rule, stats: Mapping[str, float | None], extra: Mapping[str, str]) -> Rule:
    return Rule(
        head=rule.head, body=rule.body, constants=rule.constants, extra=dict(extra), **stats
    )


def _format_ratio(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    text = f"{value:.9f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _format_count(value: float | None) -> str:
    if value is None:
        return ""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _check_name(name: str) -> str:
    if (
        not name
        or name != name.strip()
        or re.search(r"\s{2,}|[\t\r\n]", name)
        or name.startswith("?")
        or "=>" in name
    ):
        raise ValueError(
            f"relation name {name!r} cannot be written in AMIE's format (empty, leading or "
            "trailing whitespace, runs of whitespace, tabs, a leading '?' or '=>')"
        )
    return name


def _variable(index: int, last: int) -> str:
    if index == 0:
        return "?a"
    if index == last:
        return "?b"
    middle = index - 1
    letter = _MIDDLE_VARS[middle % len(_MIDDLE_VARS)]
    suffix = middle // len(_MIDDLE_VARS)
    return f"?{letter}{suffix or ''}"


def format_amie_rule(
    rule: Rule,
    relation_names: Mapping[int, str] | Sequence[str],
    entity_names: Mapping[int, str] | Sequence[str] | None = None,
) -> str:
    """One rule as AMIE writes it: `?a  r1  ?e  ?e  r2  ?b   => ?a  r  ?b`; a constant as its
    entity name (`entity_names`, needed then): `?a  s  d   => ?a  r  c`."""
    if rule.temporal or rule.var_constraints:
        raise ValueError("AMIE's format holds static rules only")
    last = rule.head.object
    if rule.constants and entity_names is None:
        raise ValueError(f"a rule with constants {rule.constants} needs entity_names")
    bound = {v: _check_name(str(entity_names[e])) for v, e in rule.constants}  # type: ignore[index]

    def term(v: int) -> str:
        return bound.get(v) or _variable(v, last)

    def atom(a: Atom) -> str:
        rel = _check_name(str(relation_names[a.relation]))
        return f"{term(a.subject)}  {rel}  {term(a.object)}"

    body = "  ".join(atom(a) for a in rule.body)
    return f"{body}   => {atom(rule.head)}"


def write_amie_tsv(
    rules: Iterable[Rule],
    path: Path | str,
    relation_names: Mapping[int, str] | Sequence[str],
    entity_names: Mapping[int, str] | Sequence[str] | None = None,
) -> None:
    """Write rules as AMIE 3's output table (header plus one line per rule), atomically.

    Relation names are written as given: pass the names the other tool should see (e.g. the
    KG's keys or bracketed names); so are constants' `entity_names` (unique ones, e.g. the
    KG's keys, so the file reads back). Ratios use up to 9 decimals like AMIE, with a leading
    zero.
    """
    path = Path(path)
    lines = ["\t".join(HEADER)]
    for rule in rules:
        side = (rule.extra or {}).get("functional_variable", "subject")
        functional = "?a" if side == "subject" else "?b"
        lines.append(
            "\t".join(
                [
                    format_amie_rule(rule, relation_names, entity_names),
                    _format_ratio(rule.head_coverage),
                    _format_ratio(rule.std_confidence),
                    _format_ratio(rule.pca_confidence),
                    _format_count(rule.support),
                    _format_count(rule.body_support),
                    _format_count(rule.pca_body_support),
                    functional,
                ]
            )
        )
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, path)
