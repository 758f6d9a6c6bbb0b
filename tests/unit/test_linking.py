"""Linking a typed question or a structured query to a small synthetic KG's names: exact
before fuzzy, the longest name, names with regex metacharacters, case and accents, typos, times
per unit, static KGs, and errors that say what to fix."""

from __future__ import annotations

import datetime as dt
import json

import pandas as pd
import pytest

from rulerag.errors import InputError
from rulerag.kg.schema import EPOCH
from rulerag.kg.text import query_text
from rulerag.serving.linking import LinkedQuery, Linker, LinkError, Mention

ENTITIES = [
    "Aam Aadmi Party",  # 0
    "Party",  # 1
    "Citizen (India)",  # 2
    "Indonesia",  # 3
    "Iran",  # 4
    "Iraq",  # 5
    "Barack Obama",  # 6
    "C++ (lang.)",  # 7
    "A.K. Singh",  # 8
    "Police (Indonesia)",  # 9
    "Police (Indonesian)",  # 10
    "Ona",  # 11
    "UBS",  # 12
    "Ali",  # 13
    "Ali",  # 14
    "São Paulo",  # 15
    "Doe",  # 16
    "What? [band] $1.*",  # 17
]
RELATIONS = [
    "Accuse",  # 0
    "Accuse of war crimes",  # 1
    "Make a visit",  # 2
    "Engage in negotiation",  # 3
    "Abduct, hijack, or take hostage",  # 4
    "profession",  # 5
]


def day(iso: str) -> int:
    return (dt.date.fromisoformat(iso) - EPOCH).days


@pytest.fixture(scope="module")
def linker() -> Linker:
    span = (day("2014-01-01"), day("2014-12-31"))
    return Linker(ENTITIES, RELATIONS, time_unit="day", time_range=span)


@pytest.fixture(scope="module")
def static() -> Linker:
    return Linker(ENTITIES, RELATIONS, time_unit=None, time_range=None)


def parts(link: LinkedQuery) -> tuple:
    return (link.subject.id, link.subject.method, link.relation.id, link.relation.method)


# -- questions: exact ----------------------------------------------------------------------


def test_ruleqa_query_links_exactly_and_round_trips(linker: Linker) -> None:
    text = query_text("Aam Aadmi Party", "Accuse", "2014-12-18")
    link = linker.link_question(text)
    assert parts(link) == (0, "exact", 0, "exact")
    assert link.subject == Mention("Aam Aadmi Party", 0, "Aam Aadmi Party", "exact", 100.0)
    assert (link.time, link.time_text) == (day("2014-12-18"), "2014-12-18")
    assert link.query == text


def test_longest_name_wins(linker: Linker) -> None:
    # "Party" and "Indonesia" are names too, inside the longer ones
    assert (
        linker.link_question("Time 2014-03-01 what does Aam Aadmi Party Accuse ?").subject.id == 0
    )
    link = linker.link_question(
        "Time 2014-03-01 what does Police (Indonesia) Accuse of war crimes ?"
    )
    assert (link.subject.id, link.relation.id) == (9, 1)


def test_case_spacing_and_free_wording(linker: Linker) -> None:
    link = linker.link_question("What did the aam aadmi PARTY accuse on 18 December 2014?")
    assert parts(link) == (0, "exact", 0, "exact")
    assert link.subject.text == "aam aadmi PARTY"
    assert link.time_text == "2014-12-18"
    assert linker.link_question("citizen(india) make a visit, December 18, 2014").subject.id == 2


def test_names_with_regex_metacharacters(linker: Linker) -> None:
    link = linker.link_question(
        "Time 2014-05-05 what does C++ (lang.) Abduct, hijack, or take hostage ?"
    )
    assert (link.subject.id, link.relation.id) == (7, 4)
    assert linker.link_question("Time 2014-05-05 what does A.K. Singh Accuse ?").subject.id == 8
    link = linker.link_question("Time 2014-05-05 what does What? [band] $1.* Make a visit ?")
    assert (link.subject.id, link.relation.id) == (17, 2)
    assert linker.link_question("on 2014-05-05 did C ++ (LANG.) accuse?").subject.id == 7


def test_accents_do_not_matter(linker: Linker) -> None:
    link = linker.link_question("what does Sao Paulo Accuse on 2014-02-02?")
    assert (link.subject.id, link.subject.method, link.subject.name) == (15, "exact", "São Paulo")


def test_equal_length_names_take_the_earliest(linker: Linker) -> None:
    assert linker.link_question("2014-02-02 Iraq Accuse Iran ?").subject.id == 5
    assert linker.link_question("2014-02-02 Iran Accuse Iraq ?").subject.id == 4


def test_a_shared_name_takes_the_lowest_id_and_lists_the_others(linker: Linker) -> None:
    subject = linker.link_question("what does Ali Accuse on 2014-02-02").subject
    assert (subject.id, subject.same_name) == (13, (14,))


def test_question_words_are_not_names(linker: Linker) -> None:
    # "Doe" is one letter from "does" but only a short name's exact words link it
    link = linker.link_question("Time 2014-02-02 what does Iran Accuse ?")
    assert link.subject.id == 4
    assert linker.link_question("Time 2014-02-02 what does Doe Accuse ?").subject.id == 16


# -- questions: fuzzy ----------------------------------------------------------------------


def test_a_typo_is_fixed_and_says_so(linker: Linker) -> None:
    link = linker.link_question("Time 2014-12-18 what does Aam Aadmu Party Accuse ?")
    assert parts(link) == (0, "fuzzy", 0, "exact")
    assert link.subject.text == "Aam Aadmu Party"
    assert 85 <= link.subject.score < 100
    assert link.query == query_text("Aam Aadmi Party", "Accuse", "2014-12-18")
    link = linker.link_question("Time 2014-12-18 what does Iran Acuse of war crimes ?")
    assert parts(link) == (4, "exact", 1, "fuzzy")


def test_exact_beats_a_fuzzy_match_of_the_same_words(linker: Linker) -> None:
    link = linker.link_question("Time 2014-12-18 what does Police (Indonesian) Accuse ?")
    assert (link.subject.id, link.subject.method) == (10, "exact")
    link = linker.link_question("Time 2014-12-18 what does Police (Indonesia) Accuse today ?")
    assert (link.subject.id, link.subject.method) == (9, "exact")
    link = linker.link_question("Time 2014-12-18 what does Police (Indonesiaa) Accuse ?")
    assert (link.subject.id, link.subject.method) == (9, "fuzzy")


def test_a_typo_around_a_shorter_name_links_the_longer_one(linker: Linker) -> None:
    # "Indonesia" is found exactly, but the person typed "Police (Indonesia)" with a typo
    link = linker.link_question("Time 2014-12-18 what does Polize (Indonesia) Make a visit ?")
    assert (link.subject.id, link.subject.method) == (9, "fuzzy")
    assert link.subject.text == "Polize (Indonesia)"
    # the typo'd relation holds "Accuse" exactly
    link = linker.link_question("Time 2014-12-18 what does Iran Accuse of war crimez ?")
    assert (link.relation.id, link.relation.method) == (1, "fuzzy")


def test_an_exact_subject_beats_a_fuzzy_word_elsewhere(linker: Linker) -> None:
    # "Indonesai" is a typo of a name, but Iran is named exactly
    link = linker.link_question("Time 2014-12-18 what does Iran Accuse near Indonesai ?")
    assert (link.subject.id, link.subject.method) == (4, "exact")


def test_short_names_link_only_exactly(linker: Linker) -> None:
    # one inserted letter scores 86 against a 3-letter name: never fuzzy
    for junk in ("Onaa", "UBSs", "Irann"):
        with pytest.raises(LinkError, match="no entity"):
            linker.link_question(f"Time 2014-12-18 what does {junk} Accuse ?")
    # and no name matches inside a word ("Ona" in "Donald", "UBS" in "subsidy")
    with pytest.raises(LinkError, match="no entity"):
        linker.link_question("Time 2014-12-18 what does Donald subsidy Accuse ?")


def test_a_junk_question_is_refused_not_linked(linker: Linker) -> None:
    for junk in (
        "Time 2014-12-18 what is the weather like ?",
        "2014-12-18 what does it all mean?",
        "on 2014-12-18 hello",
    ):
        with pytest.raises(LinkError, match="no entity of the KG found"):
            linker.link_question(junk)


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_an_empty_question(linker: Linker, text: str) -> None:
    with pytest.raises(LinkError, match="the question is empty"):
        linker.link_question(text)


@pytest.mark.parametrize("junk", [None, 3, b"Iran Accuse", ["Iran"]])
def test_a_question_that_is_not_text(linker: Linker, junk) -> None:
    with pytest.raises(LinkError, match="must be text"):
        linker.link_question(junk)


def test_no_entity_suggests_close_names(linker: Linker) -> None:
    with pytest.raises(LinkError) as caught:
        linker.link_question("Time 2014-12-18 what does Am Admy Pt Accuse ?")
    message = str(caught.value)
    assert "no entity of the KG found" in message and "spelling" in message
    assert "closest names: 'Aam Aadmi Party'" in message
    assert "\n" not in message
    assert isinstance(caught.value, InputError)


def test_no_relation_lists_relations_near_it(linker: Linker) -> None:
    with pytest.raises(LinkError) as caught:
        linker.link_question("Time 2014-12-18 what does Iran visit ?")
    message = str(caught.value)
    assert "no relation of the KG found" in message and "besides the entity 'Iran'" in message
    assert "closest relations: 'Make a visit'" in message
    with pytest.raises(LinkError, match="relations look like 'Accuse'"):
        linker.link_question("Time 2014-12-18 what does Iran xyzzy ?")


def test_time_errors_say_what_to_write(linker: Linker) -> None:
    covers = "the KG covers 2014-01-01..2014-12-31"
    with pytest.raises(LinkError, match=f"add a date like 2014-12-31; {covers}"):
        linker.link_question("what does Iran Accuse ?")
    with pytest.raises(LinkError, match=f"2015-01-01 is outside the KG's times: {covers}"):
        linker.link_question("Time 2015-01-01 what does Iran Accuse ?")
    with pytest.raises(LinkError, match="'2014-02-30' is not a valid time: write a date like"):
        linker.link_question("Time 2014-02-30 what does Iran Accuse ?")
    with pytest.raises(LinkError, match="several times .*: keep one"):
        linker.link_question("2014-02-03 or 2014-02-04: what does Iran Accuse ?")


def test_a_repeated_time_marker_wins_over_a_bare_one(linker: Linker) -> None:
    link = linker.link_question("what did Iran Accuse on 2014-02-04, reported 2014-02-06 ?")
    assert link.time_text == "2014-02-04"


# -- times per unit ------------------------------------------------------------------------


def test_parse_time_day(linker: Linker) -> None:
    expected = day("2014-12-18")
    for text in (
        "2014-12-18",
        " 2014-12-18 ",
        "18 December 2014",
        "December 18, 2014",
        "Dec. 18 2014",
        "18th of December 2014",
        expected,
    ):
        assert linker.parse_time(text) == expected
    for bad in ("2014-12", "18/12/2014", "yesterday", "2014", "16422"):
        with pytest.raises(
            LinkError, match="cannot read .* as a time: write a date like 2014-12-31"
        ):
            linker.parse_time(bad)
    with pytest.raises(LinkError, match="no time given: add a date like"):
        linker.parse_time(None)
    with pytest.raises(LinkError, match="outside the KG's times"):
        linker.parse_time(expected + 30)
    for junk in (True, 2014.5, [2014]):
        with pytest.raises(LinkError, match="the time must be text"):
            linker.parse_time(junk)


def test_times_in_years_and_steps() -> None:
    years = Linker(ENTITIES, RELATIONS, time_unit="year", time_range=(1990, 2017))
    assert years.parse_time("2014") == years.parse_time(2014) == 2014
    link = years.link_question(query_text("Iran", "Accuse", "2001"))
    assert (link.time, link.time_text, link.subject.id) == (2001, "2001", 4)
    assert years.link_question("what did Iran accuse in 1999?").time == 1999
    with pytest.raises(LinkError, match="add a year like 2017; the KG covers 1990..2017"):
        years.link_question("what does Iran Accuse ?")
    with pytest.raises(LinkError, match="1980 is outside the KG's times: the KG covers 1990"):
        years.link_question("Time 1980 what does Iran Accuse ?")

    steps = Linker(ENTITIES, RELATIONS, time_unit="index", time_range=(211, 231))
    assert steps.parse_time("step 215") == steps.parse_time("215") == steps.parse_time(215) == 215
    link = steps.link_question(query_text("Iran", "Make a visit", "step 220"))
    assert (link.time, link.time_text, link.relation.id) == (220, "step 220", 2)
    with pytest.raises(LinkError, match="add a step like step 231"):
        steps.link_question("what does Iran Accuse in 2014?")


def test_a_static_kg_has_no_times(static: Linker) -> None:
    link = static.link_question(query_text("Barack Obama", "profession", None))
    assert (link.subject.id, link.relation.id, link.time, link.time_text) == (6, 5, None, None)
    assert link.query == "what does Barack Obama profession ?"
    assert static.parse_time(None) is None
    with pytest.raises(LinkError, match="this KG has no times: remove 'Time 2014-12-18'"):
        static.link_question("Time 2014-12-18 what does Barack Obama profession ?")
    with pytest.raises(LinkError, match="this KG has no times: remove '2014-12-18'"):
        static.link_question("what was Barack Obama's profession on 2014-12-18")
    with pytest.raises(LinkError, match="this KG has no times: leave the time out"):
        static.link_structured("Barack Obama", "profession", "2014-12-18")


# -- structured queries --------------------------------------------------------------------


def test_structured_by_id_and_by_name(linker: Linker) -> None:
    link = linker.link_structured(0, 0, "2014-12-18")
    assert link.subject == Mention("", 0, "Aam Aadmi Party", "id", 100.0)
    assert link.query == "Time 2014-12-18 what does Aam Aadmi Party Accuse ?"
    link = linker.link_structured(" aam aadmi party ", "make a VISIT", day("2014-03-03"))
    assert parts(link) == (0, "exact", 2, "exact")
    assert link.subject.text == "aam aadmi party"
    link = linker.link_structured("Aam Admi Party", "Acuse", "3 March 2014")
    assert parts(link) == (0, "fuzzy", 0, "fuzzy")
    # a short name links fuzzily when it is the whole input
    assert linker.link_structured("Irn", 0, "2014-03-03").subject.id == 4


def test_structured_errors(linker: Linker) -> None:
    with pytest.raises(
        LinkError, match=r"entity id 18 is out of range: this KG's entity ids run 0..17"
    ):
        linker.link_structured(18, 0, "2014-03-03")
    with pytest.raises(LinkError, match=r"relation id -1 is out of range"):
        linker.link_structured(0, -1, "2014-03-03")
    for junk in (None, 1.0, True, ("Iran",)):
        with pytest.raises(LinkError, match="the entity must be a name .text. or an id .int."):
            linker.link_structured(junk, 0, "2014-03-03")
    with pytest.raises(LinkError, match="the relation is empty: give a relation name"):
        linker.link_structured(0, "  ", "2014-03-03")
    with pytest.raises(
        LinkError, match="no entity of the KG is named 'Aam Party': closest: 'Aam Aadmi Party'"
    ):
        linker.link_structured("Aam Party", 0, "2014-03-03")
    with pytest.raises(
        LinkError, match="no relation of the KG is named 'zzz': no relation name is close"
    ):
        linker.link_structured(0, "zzz", "2014-03-03")
    with pytest.raises(LinkError, match="no time given: add a date like 2014-12-31"):
        linker.link_structured(0, 0, None)


# -- building and output -------------------------------------------------------------------


def test_as_dict_is_plain_json(linker: Linker) -> None:
    link = linker.link_question("Time 2014-12-18 what does Ali Accuse ?")
    out = json.loads(json.dumps(link.as_dict()))
    assert out["subject"] == {
        "text": "Ali",
        "id": 13,
        "name": "Ali",
        "method": "exact",
        "score": 100.0,
        "same_name": [14],
    }
    assert (out["time"], out["time_text"], out["query"]) == (link.time, "2014-12-18", link.query)


def test_from_kg_reads_ingest_outputs() -> None:
    entities = pd.DataFrame({"id": [1, 0], "name": ["Iraq", "Iran"], "key": ["b", "a"]})
    relations = pd.DataFrame({"id": [0], "name": ["Accuse"], "key": ["Accuse"]})
    stats = {"time_unit": "day", "time_range": {"first": "2014-01-01", "last": "2014-12-31"}}
    linker = Linker.from_kg(entities, relations, stats)
    link = linker.link_question("Time 2014-06-01 what does Iraq Accuse ?")
    assert (link.subject.id, link.time) == (1, day("2014-06-01"))
    years = Linker.from_kg(
        entities, relations, {"time_unit": "year", "time_range": {"first": "1786", "last": "2017"}}
    )
    assert years.time_range == (1786, 2017)
    steps = Linker.from_kg(
        entities,
        relations,
        {"time_unit": "index", "time_range": {"first": "step 0", "last": "step 20"}},
    )
    assert steps.time_range == (0, 20)
    assert (
        Linker.from_kg(entities, relations, {"time_unit": None, "time_range": None}).time_range
        is None
    )
    with pytest.raises(ValueError, match="ids must run 0..1"):
        Linker.from_kg(entities.assign(id=[0, 2]), relations, stats)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"time_unit": "day", "time_range": None}, "needs both"),
        ({"time_unit": "week", "time_range": (0, 1)}, "time_unit must be one of"),
        ({"time_unit": None, "time_range": None, "threshold": 0}, "threshold"),
        ({"time_unit": "year", "time_range": (2017, 1990)}, "first <= last"),
    ],
)
def test_bad_construction_is_a_bug_not_input(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Linker(ENTITIES, RELATIONS, **kwargs)
    with pytest.raises(ValueError, match="non-empty sequence"):
        Linker([], RELATIONS, time_unit=None, time_range=None)


def test_links_are_deterministic() -> None:
    span = (day("2014-01-01"), day("2014-12-31"))
    first, second = (Linker(ENTITIES, RELATIONS, time_unit="day", time_range=span) for _ in "ab")
    text = "Time 2014-12-18 what does Polize (Indonesia) Make a visit ?"
    assert first.link_question(text) == second.link_question(text) == first.link_question(text)
