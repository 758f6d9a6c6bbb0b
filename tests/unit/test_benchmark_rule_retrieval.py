"""build_benchmark with a rule retriever as its selection (vanilla / SIAR / R³): who is asked,
which shots the LLM sees, that the corpus does not move, and that the retriever's choice is
what F_R, F_G and the test queries carry."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest

from rulerag.benchmark.build import build_benchmark
from rulerag.benchmark.files import benchmark_files
from rulerag.benchmark.settings import (
    BuildBenchmarkSettings,
    RuleSelectionSettings,
    build_benchmark_settings,
)
from rulerag.errors import InputError
from rulerag.params import parse_params, read_params_file
from rulerag.rule_retrieval.library import RuleLibrary
from rulerag.rule_retrieval.llm import CachedLLM
from rulerag.rule_retrieval.search import BM25RuleIndex
from rulerag.rule_retrieval.selector import (
    RetrievalSelector,
    RuleRetrievalSelection,
    benchmark_selector,
)
from tests.support.synthetic_kg import RELATIONS, synthetic_kg
from tests.unit.test_rule_retrieval import ScriptedLLM

PROJECT_PARAMS = Path(__file__).resolve().parents[2] / "params.yaml"


class RecordingSelector:
    """Picks every bank rule in reverse id order; records the queries and shots it got."""

    def __init__(self, rule_ids: Sequence[str], shots: int = 2) -> None:
        self.rule_ids, self.shots = list(rule_ids), shots
        self.calls: list[tuple[list[str], list[tuple[str, str]]]] = []
        self.cost = {"queries": 0}

    def __call__(self, queries: Sequence[str], shots: Sequence[tuple[str, str]]) -> list[list[str]]:
        self.calls.append((list(queries), list(shots)))
        self.cost["queries"] += len(queries)
        return [sorted(self.rule_ids, reverse=True) for _ in queries]


@pytest.fixture(scope="module")
def toy():
    kg, bank = synthetic_kg(True)
    head = build_benchmark(kg, bank, BuildBenchmarkSettings(test_size=30, seed=3))
    selector = RecordingSelector(bank["rule_id"])
    config = BuildBenchmarkSettings(
        test_size=30, seed=3, rule_selection=RuleSelectionSettings(method="siar_r3", top_n=2)
    )
    return kg, bank, head, selector, build_benchmark(kg, bank, config, selector=selector)


def test_only_the_sampled_queries_are_asked_and_they_get_the_selectors_rules(toy) -> None:
    _, bank, head, selector, bench = toy
    asked = [q for queries, _ in selector.calls for q in queries]
    assert len(asked) == len(set(asked))
    assert {q["query"] for q in bench.test + bench.f_g + bench.f_r} <= set(asked)
    assert len(asked) == len(bench.test) + bench.stats["f_r_queries"] + len(bench.f_g)
    expected = sorted(bank["rule_id"], reverse=True)[:2]
    assert all(q["rule_ids"] == expected for q in bench.test + bench.f_g)
    assert {i["rule_id"] for i in bench.f_r} <= set(expected)
    assert bench.stats["selection"] == "siar_r3"


def test_the_corpus_and_the_queries_do_not_depend_on_the_selection(toy) -> None:
    _, _, head, _, bench = toy
    pd.testing.assert_frame_equal(head.corpus, bench.corpus)
    assert [q["qid"] for q in head.test] == [q["qid"] for q in bench.test]
    assert [q["query"] for q in head.f_g] == [q["query"] for q in bench.f_g]


def test_shots_are_f_r_queries_with_a_head_rule_and_never_the_query_itself(toy) -> None:
    _, bank, _, selector, bench = toy
    asked = {q for queries, _ in selector.calls for q in queries}
    f_r_queries = asked - {q["query"] for q in bench.test + bench.f_g}
    head_of = dict(zip(bank["rule_id"], bank["head_relation"], strict=True))
    seen_sets = set()
    for queries, shots in selector.calls:
        assert len(shots) == selector.shots
        seen_sets.add(tuple(shots))
        for shot_query, rule_id in shots:
            assert shot_query in f_r_queries and shot_query not in queries
            assert shot_query.endswith(f" {RELATIONS[head_of[rule_id]]} ?")
    assert len(seen_sets) >= 2  # a drawn shot query was itself asked, with a stand-in shot


def test_a_retrieval_selection_without_a_selector_is_refused() -> None:
    kg, bank = synthetic_kg(False)
    with pytest.raises(ValueError, match="needs a rule selector"):
        build_benchmark(
            kg,
            bank,
            BuildBenchmarkSettings(
                test_size=10, rule_selection=RuleSelectionSettings(method="siar")
            ),
        )


def test_settings_name_the_bad_knob() -> None:
    with pytest.raises(InputError, match="rule_selection"):
        build_benchmark_settings({"rule_selection": {"method": "oracle"}})
    with pytest.raises(InputError, match="candidates"):
        build_benchmark_settings({"rule_selection": {"top_n": 5, "candidates": 3}})


def test_retrieval_selector_runs_siar_and_r3_over_the_bank() -> None:
    """The bank as a library: SI text searches, R³'s list reorders, the top N are kept."""
    library = RuleLibrary(
        ("a", "b", "c"),
        (
            "Make a visit leads to Host a visit",
            "Consult leads to Criticize",
            "Criticize leads to Consult",
        ),
        ("h(X, Y) <- m(Y, X)", "cr(X, Y) <- co(X, Y)", "co(X, Y) <- cr(X, Y)"),
    )
    ranking, induced = "[3] > [1] > [2]", "Consult leads to"
    fake = ScriptedLLM(lambda p: ranking if p.startswith("You are an intelligent") else induced)

    class Pool:
        def __call__(self, purpose: str) -> CachedLLM:
            return self.llm

        llm = CachedLLM(fake, None, progress=False)

    index = BM25RuleIndex(library.natural)
    selection = RuleSelectionSettings(method="siar_r3", top_n=2, candidates=3, query_form="si")
    selector = RetrievalSelector(selection, library, index, Pool())
    (rules,) = selector(["what does A criticize ?"], [("what does B host ?", "a")])
    (candidates,) = index.search([induced], 3)
    assert rules == [library.ids[candidates[2]], library.ids[candidates[0]]]
    si_prompt = fake.prompts[0]
    assert "what does B host ?" in si_prompt and "Make a visit leads to Host a visit" in si_prompt
    assert selector.cost == {"queries": 1, "llm_calls": 2, "r3_repaired": 0, "r3_unparsed": 0}


def test_an_llm_method_without_an_llm_is_refused() -> None:
    library = RuleLibrary(("a",), ("x leads to y",), ("y(X, Y) <- x(X, Y)",))
    with pytest.raises(ValueError, match="needs an LLM"):
        RetrievalSelector(
            RuleSelectionSettings(method="siar"), library, BM25RuleIndex(library.natural), None
        )


def _project_params(**selection: object):
    """The project's params.yaml as `Params`, with `build_benchmark.rule_selection` changed."""
    values = read_params_file(PROJECT_PARAMS)
    values["build_benchmark"]["rule_selection"].update(selection)
    return parse_params(values, str(PROJECT_PARAMS))


def test_the_selector_is_built_from_typed_settings_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """params.yaml -> Params -> rule_selection / rule_retrieval / generation.api -> the
    selector: once the sections are read, no settings loader is visited again."""
    params = _project_params(method="vanilla", retriever="bm25", top_n=2)
    selection, rule_retrieval = params.build_benchmark.rule_selection, params.rule_retrieval
    api = params.generation.api
    assert isinstance(selection, RuleSelectionSettings)

    def no_loader(*args: object, **kwargs: object) -> None:
        raise AssertionError("the selector went back to a settings loader")

    import rulerag.benchmark.settings
    import rulerag.generation.settings
    import rulerag.rule_retrieval.settings
    import rulerag.settings

    for module, name in (
        (rulerag.benchmark.settings, "build_benchmark_settings"),
        (rulerag.rule_retrieval.settings, "rule_retrieval_settings"),
        (rulerag.generation.settings, "generation_settings"),
        (rulerag.settings, "load_settings"),
    ):
        monkeypatch.setattr(module, name, no_loader)
    _, bank = synthetic_kg(True)
    relations = pd.DataFrame({"id": range(len(RELATIONS)), "name": RELATIONS})
    selector = benchmark_selector(
        selection, rule_retrieval, api, bank, relations, cache_path=None, model_cache=None
    )
    assert (selector.method, selector.selection, selector.llms) == ("vanilla", selection, None)
    assert selector.shots == rule_retrieval.shots
    query = "Time 2014-06-30 what does Entity 3 Host a visit ?"
    (expected,) = selector.index.search([query], selection.candidates)
    (picked,) = selector([query], [])
    assert picked == [selector.library.ids[i] for i in expected][:2]
    assert selector.cost["queries"] == 1 and selector.cost["llm_calls"] == 0
    source = RuleRetrievalSelection(rule_retrieval, api)
    assert source(selection, bank, relations)([query], []) == [picked]


def test_the_benchmark_asks_its_selector_source_with_the_typed_rule_selection() -> None:
    kg, bank = synthetic_kg(True)
    asked: list[RuleSelectionSettings] = []
    recording = RecordingSelector(bank["rule_id"])

    def source(selection: RuleSelectionSettings, bank_: pd.DataFrame, relations: pd.DataFrame):
        asked.append(selection)
        assert bank_ is bank and relations is kg.relations
        return recording

    section = {"test_size": 20, "rule_selection": {"method": "siar", "top_n": 2}}
    settings = build_benchmark_settings(section)
    built = benchmark_files(kg, bank, settings, "toy", selectors=source)
    assert asked == [settings.rule_selection]
    assert built.stats["selection_cost"] == recording.cost and recording.cost["queries"] > 0
    assert all(
        q["rule_ids"] == sorted(bank["rule_id"], reverse=True)[:2] for q in built.benchmark.test
    )
