"""Linking on the real KGs of the mirror (ingested as the ingest stage does): RuleQA queries
built from real test facts link back to their subject, relation and time, and with one typo in
the subject's name most still do (fuzzy), the rest are refused rather than linked wrongly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.bench_linking import with_typo
from rulerag.kg.registry import DATASETS
from rulerag.kg.schema import format_time
from rulerag.kg.text import query_text
from rulerag.serving.linking import Linker, LinkError
from tests.helpers import ingest_into

pytestmark = pytest.mark.data

SAMPLE = 300


@pytest.fixture(scope="module", params=["icews14", "fb15k237", "nell995", "wiki"])
def real(request, kg_mirror: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp(request.param)
    kg, stats = ingest_into(
        DATASETS[request.param], out, data_dir=kg_mirror, download_dir=out / "dl"
    )
    linker = Linker.from_kg(kg.entities, kg.relations, stats)
    entities = kg.entities.set_index("id")["name"]
    relations = kg.relations.set_index("id")["name"]
    test = kg.facts[kg.facts["split"] == "test"]
    # a typo needs two letters or digits to leave a name ("24", a film, has them)
    named = entities[entities.str.count(r"[^\W_]") >= 2].index
    test = test[test["head"].isin(named)].sample(SAMPLE, random_state=0)
    facts = [
        (int(h), int(r), None if kg.time_unit is None else int(t))
        for h, r, t in zip(test["head"], test["relation"], test["time"], strict=True)
    ]
    return request.param, kg.time_unit, linker, entities, relations, facts


def linked(linker: Linker, question: str) -> tuple | None:
    """(subject ids the link stands for, relation id, time), None when refused."""
    try:
        link = linker.link_question(question)
    except LinkError:
        return None
    return ({link.subject.id, *link.subject.same_name}, link.relation.id, link.time)


def test_ruleqa_queries_link_back_exactly(real) -> None:
    name, unit, linker, entities, relations, facts = real
    for head, relation, time in facts:
        question = query_text(entities[head], relations[relation], format_time(time, unit))
        link = linker.link_question(question)
        assert head in {link.subject.id, *link.subject.same_name}, question
        assert (link.relation.id, link.time) == (relation, time), question
        assert (link.subject.method, link.relation.method) == ("exact", "exact")
        assert link.query == question


def test_one_typo_in_the_subject_is_mostly_fixed_and_rarely_linked_wrongly(real) -> None:
    name, unit, linker, entities, relations, facts = real
    rng = np.random.default_rng(0)
    fixed = refused = wrong = 0
    for head, relation, time in facts:
        typo = with_typo(entities[head], rng)
        got = linked(linker, query_text(typo, relations[relation], format_time(time, unit)))
        if got is None:
            refused += 1
        elif head in got[0] and got[1:] == (relation, time):
            fixed += 1
        else:
            wrong += 1
    n = len(facts)
    print(
        f"\n{name}: one typo in the subject, {n} queries: {fixed / n:.1%} fixed, "
        f"{refused / n:.1%} refused, {wrong / n:.1%} linked to another name"
    )
    # measured with this seed: fixed ICEWS14 92.7 %, FB15k-237 96.0 %, NELL-995 92.7 %, WIKI
    # 95.0 %; linked to another name 0.0, 0.7, 2.0, 0.3 %. The rest is refused: one changed
    # letter in a name under 7 letters scores below 85 ("Irqa" is as far from Iraq as from
    # Iran). Wrong links are typos that land nearer another name ("rockets" -> "rocketc",
    # nearer "rocket"; "World War II" -> "World War mI", nearer "World War I").
    assert fixed / n >= 0.90
    assert wrong / n <= 0.03
