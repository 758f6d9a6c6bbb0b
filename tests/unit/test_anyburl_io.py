"""Rules written in AnyBURL's format say what they said: the text, read back by a brute-force
reader of AnyBURL's syntax, holds for exactly the groundings the Rule holds for; and AnyBURL's
files read back into Rules that hold for the groundings their text holds for."""

from __future__ import annotations

import itertools
import random
import re
from pathlib import Path

import pytest

from rulerag.rules.anyburl_io import (
    SAFRAN_KINDS,
    format_anyburl_rule,
    read_anyburl_rules,
    write_anyburl_rules,
)
from rulerag.rules.rule import Atom, Rule

RELATIONS = ["born_in", "lives_in", "works_for"]
ENTITIES = ["/m/a", "/m/b", "/m/c", "/m/d", "/m/e"]
_ATOM = re.compile(r"([^(),\s]+)\(([^(),\s]+),([^(),\s]+)\)")


def _rule_groundings(rule: Rule, facts: set[tuple[int, int, int]]) -> set[tuple[int, int]]:
    """(head subject, head object) over every assignment of the Rule's variables."""
    bound = dict(rule.constants)
    free = sorted({v for a in (rule.head, *rule.body) for v in (a.subject, a.object)} - set(bound))
    out = set()
    for values in itertools.product(range(len(ENTITIES)), repeat=len(free)):
        value = {**bound, **dict(zip(free, values, strict=True))}
        if all((value[a.subject], a.relation, value[a.object]) in facts for a in rule.body):
            out.add((value[rule.head.subject], value[rule.head.object]))
    return out


def _text_groundings(text: str, facts: set[tuple[int, int, int]]) -> set[tuple[int, int]]:
    """The same, from AnyBURL's text alone: capital letters are variables, other terms names."""
    head_text, body_text = text.split(" <= ")
    head = _ATOM.fullmatch(head_text)
    body = _ATOM.findall(body_text)
    assert head is not None
    assert _ATOM.sub("", body_text).replace(", ", "").strip() == ""
    atoms = [head.groups(), *body]
    variables = sorted({t for _, s, o in atoms for t in (s, o) if re.fullmatch(r"[A-Z]", t)})
    out = set()
    for values in itertools.product(range(len(ENTITIES)), repeat=len(variables)):
        value = dict(zip(variables, values, strict=True))
        value.update({name: i for i, name in enumerate(ENTITIES)})
        if all((value[s], RELATIONS.index(r), value[o]) in facts for r, s, o in body):
            out.add((value[head.group(2)], value[head.group(3)]))
    return out


def _random_rules(rng: random.Random) -> list[Rule]:
    rules = []
    for _ in range(60):
        length = rng.randint(1, 3)
        steps = [(rng.randrange(3), rng.random() < 0.5) for _ in range(length)]
        rules.append(Rule.path(rng.randrange(3), steps, support=2, body_support=4))
    for _ in range(60):
        c, d = rng.randrange(5), rng.randrange(5)
        body = (rng.randrange(3), rng.random() < 0.5)
        rules.append(
            Rule.with_constant(
                rng.randrange(3),
                c,
                constant_is_subject=rng.random() < 0.5,
                body=body,
                body_constant=d if rng.random() < 0.6 else None,
                support=2,
                body_support=5,
            )
        )
    return rules


def test_written_rules_hold_for_the_same_groundings() -> None:
    rng = random.Random(7)
    for _ in range(5):
        facts = {
            (rng.randrange(5), rng.randrange(3), rng.randrange(5))
            for _ in range(rng.randint(8, 20))
        }
        for rule in _random_rules(rng):
            text = format_anyburl_rule(rule, RELATIONS, ENTITIES)
            assert _text_groundings(text, facts) == _rule_groundings(rule, facts), text


def test_shapes_as_anyburl_writes_them() -> None:
    path = Rule.path(0, [(1, False), (2, True)])
    assert format_anyburl_rule(path, RELATIONS) == "born_in(X,Y) <= lives_in(X,A), works_for(Y,A)"
    ac1 = Rule.with_constant(0, 2, body=(1, True), body_constant=3)
    assert format_anyburl_rule(ac1, RELATIONS, ENTITIES) == "born_in(X,/m/c) <= lives_in(/m/d,X)"
    subject = Rule.with_constant(0, 2, constant_is_subject=True, body=(1, False))
    assert format_anyburl_rule(subject, RELATIONS, ENTITIES) == "born_in(/m/c,Y) <= lives_in(Y,A)"
    same = Rule.with_constant(0, 2, body=(1, False), body_constant=2)
    assert format_anyburl_rule(same, RELATIONS, ENTITIES) == "born_in(X,/m/c) <= lives_in(X,/m/c)"
    zero = Rule.with_constant(0, 2)
    assert format_anyburl_rule(zero, RELATIONS, ENTITIES) == "born_in(X,/m/c) <= "


def test_what_has_no_anyburl_form_is_refused() -> None:
    pair = Rule(head=Atom(0, 0, 1), body=(Atom(1, 0, 1), Atom(2, 0, 1)))
    assert pair.kind == "pair"
    with pytest.raises(ValueError, match="pair rule"):
        format_anyburl_rule(pair, RELATIONS)
    with pytest.raises(ValueError, match="static rules only"):
        format_anyburl_rule(Rule.path(0, [(1, False)], temporal=True), RELATIONS)
    with pytest.raises(ValueError, match="needs entity_names"):
        format_anyburl_rule(Rule.with_constant(0, 2, body=(1, False)), RELATIONS)
    for bad in (["born in", "x", "y"], ["A", "x", "y"], ["f(x)", "x", "y"]):
        with pytest.raises(ValueError, match="relation name"):
            format_anyburl_rule(Rule.path(0, [(1, False)]), bad)
    scattered = Rule(head=Atom(0, 0, 2), body=(Atom(1, 1, 2), Atom(2, 0, 1)))
    with pytest.raises(ValueError, match="atom by atom"):
        format_anyburl_rule(scattered, RELATIONS)


def test_file_with_counts_and_kinds(tmp_path: Path) -> None:
    rules = [
        Rule.path(0, [(1, False), (2, True)], support=573, body_support=1028),
        Rule.with_constant(0, 2, body=(1, False), body_constant=3, support=34, body_support=35),
        Rule.with_constant(0, 2, support=5, body_support=100),
        Rule(head=Atom(0, 0, 1), body=(Atom(1, 0, 1), Atom(2, 0, 1)), support=3, body_support=9),
    ]
    out = tmp_path / "rules.txt"
    counts = write_anyburl_rules(rules, out, RELATIONS, ENTITIES)
    assert counts == {"path": 1, "ac1": 1, "skipped:zero": 1, "skipped:pair": 1}
    assert set(SAFRAN_KINDS) == {"path", "ac1", "ac2"}
    assert out.read_text().splitlines() == [
        "1028\t573\t0.557393\tborn_in(X,Y) <= lives_in(X,A), works_for(Y,A)",
        "35\t34\t0.971429\tborn_in(X,/m/c) <= lives_in(X,/m/d)",
    ]
    with pytest.raises(ValueError, match="body_support"):
        write_anyburl_rules([Rule.path(0, [(1, False)], support=3)], out, RELATIONS)
    assert out.read_text().count("\n") == 2  # a refused file leaves the last one whole


RELATION_IDS = {name: i for i, name in enumerate(RELATIONS)}
ENTITY_IDS = {name: i for i, name in enumerate(ENTITIES)}


def test_written_rules_read_back_equal(tmp_path: Path) -> None:
    rng = random.Random(11)
    rules = _random_rules(rng) + [
        Rule.with_constant(
            rng.randrange(3),
            rng.randrange(5),
            constant_is_subject=bool(i % 2),
            support=3,
            body_support=40,
        )
        for i in range(10)
    ]
    rules = [r for r in {r.key: r for r in rules}.values()]  # one rule per structure
    out = tmp_path / "rules.txt"
    written = write_anyburl_rules(
        rules, out, RELATIONS, ENTITIES, kinds=("path", "ac1", "ac2", "zero")
    )
    read, counts = read_anyburl_rules(out, RELATION_IDS, ENTITY_IDS)
    assert counts == {k: v for k, v in written.items() if ":" not in k}
    assert [r.key for r in read] == [r.key for r in rules]
    weight = {"path": 1.0, "ac1": 1.0, "ac2": 0.1, "zero": 0.01}
    for rule, original in zip(read, rules, strict=True):
        assert (rule.support, rule.body_support) == (original.support, original.body_support)
        assert rule.confidence == pytest.approx(
            weight[rule.kind] * rule.support / (rule.body_support + 5)
        )


def test_read_rules_hold_for_the_groundings_of_their_text(tmp_path: Path) -> None:
    """Lines as AnyBURL writes them, shapes our writer never makes included (the body read from
    the constant's side, the head's own relation in the body, a path against its atoms)."""
    lines = [
        "born_in(/m/a,Y) <= born_in(/m/b,Y)",
        "born_in(/m/a,Y) <= lives_in(Y,/m/a)",
        "works_for(X,/m/c) <= lives_in(A,X)",
        "born_in(X,Y) <= lives_in(Y,X)",
        "born_in(X,Y) <= works_for(A,X), born_in(B,A), lives_in(Y,B)",
        "lives_in(X,Y) <= lives_in(A,X), lives_in(A,Y)",
    ]
    out = tmp_path / "anyburl.txt"
    out.write_text("".join(f"9\t3\t0.3\t{line}\n" for line in lines))
    read, _ = read_anyburl_rules(out, RELATION_IDS, ENTITY_IDS)
    rng = random.Random(3)
    for _ in range(20):
        facts = {(rng.randrange(5), rng.randrange(3), rng.randrange(5)) for _ in range(14)}
        for line, rule in zip(lines, read, strict=True):
            assert _rule_groundings(rule, facts) == _text_groundings(line, facts), line


def test_what_anyburl_writes_beyond_rules_is_counted_or_refused(tmp_path: Path) -> None:
    out = tmp_path / "anyburl.txt"
    out.write_text(
        "526\t121\t0.23\tborn_in(/m/a,Y) <= lives_in(Y,me_myself_i)\n"
        "10\t2\t0.2\tborn_in(X,/m/a) <= lives_in(X,A), works_for(A,/m/b)\n"
        "5880\t324\t0.05\tworks_for(/m/c,Y) <= \n"
        "\n"
    )
    read, counts = read_anyburl_rules(out, RELATION_IDS, ENTITY_IDS, zero_weight=1.0)
    assert counts == {"skipped:reflexive": 1, "skipped:long_acyclic": 1, "zero": 1}
    assert read[0].confidence == pytest.approx(324 / 5885)
    for text, why in (
        ("9\t3\tborn_in(X,Y) <= lives_in(X,Y)", "not `predicted"),
        ("x\t3\t0.3\tborn_in(X,Y) <= lives_in(X,Y)", "not integers"),
        ("9\t3\t0.3\tborn_in(X,Y) <= lives_in(X,Y) junk", "one head atom"),
        ("3\t9\t0.3\tborn_in(X,Y) <= lives_in(X,Y)", "correct <= predicted"),
        ("9\t3\t0.3\tborn_in(X,Y) <= moved_to(X,Y)", "'moved_to' is not a name"),
        ("9\t3\t0.3\tborn_in(X,/m/z) <= lives_in(X,A)", "'/m/z' is not a name"),
        ("9\t3\t0.3\tborn_in(X,Y) <= lives_in(X,A), works_for(B,Y)", "not a path"),
        ("9\t3\t0.3\tborn_in(X,X) <= lives_in(X,A)", "same term"),
    ):
        out.write_text("9\t3\t0.3\tborn_in(X,Y) <= lives_in(X,Y)\n" + text + "\n")
        with pytest.raises(ValueError, match=f"{out.name}, line 2: .*{why}"):
            read_anyburl_rules(out, RELATION_IDS, ENTITY_IDS)
