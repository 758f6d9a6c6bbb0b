"""RuleQA benchmark construction on small synthetic KGs: text forms, no leakage, oracle
documents, popularity balancing, rule selection, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rulerag.benchmark.build import (
    build_benchmark,
    stratified_sample,
    table1,
)
from rulerag.benchmark.files import benchmark_files, read_benchmark_files
from rulerag.benchmark.robustness import ROBUST_PREFIX, degenerate_queries
from rulerag.benchmark.settings import BuildBenchmarkSettings, build_benchmark_settings
from rulerag.io import read_jsonl, read_provenance
from rulerag.kg.text import document_text, query_text
from rulerag.layout import DataLayout
from rulerag.rules.selection import select_by_head, select_by_similarity
from tests.support.synthetic_kg import RELATIONS, synthetic_kg, write_synthetic_dataset


def test_text_forms_match_the_paper() -> None:
    assert (
        document_text("Abdullah Abdullah", "Make a visit", "Afghanistan", "2014-06-23")
        == "Time 2014-06-23 Abdullah Abdullah Make a visit Afghanistan."
    )
    assert (
        query_text("Abdullah Abdullah", "Make a visit", "2014-12-01")
        == "Time 2014-12-01 what does Abdullah Abdullah Make a visit ?"
    )
    assert document_text("Barack Obama", "profession", "lawyer", None) == (
        "Barack Obama profession lawyer."
    )
    assert query_text("Barack Obama", "profession", None) == "what does Barack Obama profession ?"


@pytest.fixture(params=[True, False], ids=["temporal", "static"])
def built(request):
    kg, bank = synthetic_kg(request.param)
    config = BuildBenchmarkSettings(test_size=60, seed=3, max_oracle_docs=4)
    return kg, bank, build_benchmark(kg, bank, config)


def _key(q: dict) -> tuple:
    return (q["head"], q["relation"], q["time"])


def test_no_test_link_in_corpus(built) -> None:
    kg, _, bench = built
    test_links = kg.facts[kg.facts["split"] == "test"][["head", "relation", "tail", "time"]]
    overlap = bench.corpus.merge(test_links, on=["head", "relation", "tail", "time"])
    assert overlap.empty
    assert set(bench.corpus["split"]) == {"train"}


def test_query_sets_are_disjoint(built) -> None:
    _, _, bench = built
    q = {_key(x) for x in bench.test}
    fr = {_key(x) for x in bench.f_r}
    fg = {_key(x) for x in bench.f_g}
    assert q and fr and fg
    assert not q & fr and not q & fg and not fr & fg


def test_oracle_documents_exist_precede_and_match_the_rule(built) -> None:
    kg, bank, bench = built
    corpus = bench.corpus.set_index("id")
    atoms = {r: json.loads(b)[0] for r, b in zip(bank["rule_id"], bank["body"], strict=True)}
    for item in bench.f_r:
        assert item["oracle_doc_ids"]
        relation, subject, _ = atoms[item["rule_id"]]
        for doc_id in item["oracle_doc_ids"]:
            doc = corpus.loc[doc_id]
            assert doc["relation"] == relation
            side = "head" if subject == 0 else "tail"
            assert doc[side] == item["head"]
            if kg.temporal:
                assert doc["time"] < item["time"]


def test_answer_bearing_oracles_come_first(built) -> None:
    _, _, bench = built
    corpus = bench.corpus.set_index("id")
    for item in bench.f_r:
        others = [
            {corpus.loc[d, "head"], corpus.loc[d, "tail"]} - {item["head"]}
            for d in item["oracle_doc_ids"]
        ]
        flags = [bool(o & set(item["answer_ids"])) for o in others]
        assert flags == sorted(flags, reverse=True)


def test_gold_answers_are_entity_names_and_complete(built) -> None:
    kg, _, bench = built
    names = set(kg.entities["name"])
    facts = kg.facts
    for q in bench.test + bench.f_g:
        assert q["answers"] and set(q["answers"]) <= names
        same = facts[(facts["head"] == q["head"]) & (facts["relation"] == q["relation"])]
        if q["time"] is not None:
            same = same[same["time"] == q["time"]]
        assert sorted(q["answer_ids"]) == sorted(set(same["tail"]))


def test_queries_only_for_relations_with_rules(built) -> None:
    _, bank, bench = built
    ruled = set(bank["head_relation"])
    assert bench.test
    assert all(q["relation"] in ruled and q["rule_ids"] for q in bench.test)


def test_query_text_forms(built) -> None:
    kg, _, bench = built
    q = bench.test[0]
    if kg.temporal:
        assert (
            q["query"] == f"Time {q['time_text']} what does {q['head_name']} {q['relation_name']} ?"
        )
    else:
        assert q["query"] == f"what does {q['head_name']} {q['relation_name']} ?"


def test_same_seed_same_bytes_other_seed_differs() -> None:
    kg, bank = synthetic_kg(True)

    def dump(seed: int) -> str:
        bench = build_benchmark(kg, bank, BuildBenchmarkSettings(test_size=40, seed=seed))
        return json.dumps([bench.test, bench.f_r, bench.f_g]) + bench.corpus.to_json()

    assert dump(5) == dump(5)
    assert dump(5) != dump(6)


def test_long_tail_stratum_follows_the_weights() -> None:
    rng = np.random.default_rng(0)
    candidates = pd.DataFrame(
        {
            "head": np.arange(900),
            "relation": 0,
            "time": pd.array([None] * 900, dtype="Int64"),
            "popularity": rng.integers(0, 1000, 900),
        }
    )
    sample = stratified_sample(candidates, 200, (2.0, 1.0, 1.0), np.random.default_rng(1))
    counts = sample["stratum"].value_counts().to_dict()
    assert counts == {0: 100, 1: 50, 2: 50}
    # the long-tail stratum really holds the least popular candidates
    lows = sample[sample["stratum"] == 0]["popularity"].max()
    assert lows <= sample[sample["stratum"] == 2]["popularity"].min()


def test_short_stratum_gives_its_quota_to_the_others() -> None:
    candidates = pd.DataFrame(
        {"head": np.arange(30), "relation": 0, "time": pd.array([None] * 30, dtype="Int64"),
         "popularity": np.arange(30)}
    )  # fmt: skip
    sample = stratified_sample(candidates, 25, (10.0, 1.0, 1.0), np.random.default_rng(0))
    assert len(sample) == 25
    assert (sample["stratum"] == 0).sum() == 10


def test_select_by_head_and_by_similarity() -> None:
    _, bank = synthetic_kg(False)
    assert select_by_head([1, 0, 3], bank, top_n=1) == [
        [bank[bank["head_relation"] == 1].iloc[0]["rule_id"]],
        [bank[bank["head_relation"] == 0].iloc[0]["rule_id"]],
        [],
    ]

    def encode(texts):  # bag of relation words: similar when they share relation names
        return np.array([[t.count(r) for r in RELATIONS] for t in texts], dtype=float)

    chosen = select_by_similarity(
        ["what does X Host a visit ?", "what does X Criticize ?"], bank, encode, 3, 0.5
    )
    assert chosen[1] == []  # no rule is about Criticize: an empty list, not an error
    assert chosen[0] and all(r in set(bank["rule_id"]) for r in chosen[0])


def test_finetune_from_train_moves_links_out_of_the_corpus() -> None:
    kg, bank = synthetic_kg(False)

    def f_keys(bench) -> set:
        return {(q["head"], q["relation"]) for q in bench.f_g + bench.f_r}

    plain = build_benchmark(kg, bank, BuildBenchmarkSettings(test_size=40))
    bench = build_benchmark(kg, bank, BuildBenchmarkSettings(test_size=40, finetune_from_train=8))
    assert bench.stats["finetune_queries_from_train"] == 8
    moved = f_keys(bench) - f_keys(plain)
    assert moved
    docs = set(zip(bench.corpus["head"], bench.corpus["relation"], strict=True))
    assert not moved & docs, "a moved query's links must leave the corpus"
    assert {_key(q) for q in bench.test}.isdisjoint({_key(q) for q in bench.f_g + bench.f_r})


@pytest.mark.parametrize("temporal", [True, False], ids=["temporal", "static"])
def test_the_stage_entry_writes_what_the_stage_wrote_before(tmp_path: Path, temporal: bool) -> None:
    """`benchmark_files` and its `write` against the stage's former sequence, spelled out:
    build, degenerate the test queries, stats.json's figures, the seven writes."""
    layout = DataLayout.of(tmp_path / "data", "toy")
    kg, bank = write_synthetic_dataset(layout, temporal)
    section = {"seed": 3, "test_size": 40, "corpus": {"filter": "rule_neighbourhood"}}
    settings = build_benchmark_settings(section)
    built = read_benchmark_files(settings, layout)
    built.write(layout.benchmark, {"params": section})

    config = settings.for_dataset("toy", {})  # toy: no Table 1 row
    bench = build_benchmark(kg, bank, config)
    entities = kg.entities.set_index("id")["name"].to_dict()
    relations = kg.relations.set_index("id")["name"].to_dict()
    robust, counts = degenerate_queries(bench.test, bank, bench.corpus, entities, relations)
    stats = {"dataset": "toy", **bench.stats, "seed": 3, "robust": counts}
    assert built.settings == config
    assert read_jsonl(layout.corpus) == bench.corpus[["id", "contents"]].to_dict("records")
    pd.testing.assert_frame_equal(pd.read_parquet(layout.corpus_table), bench.corpus)
    assert read_provenance(layout.corpus_table) == {"params": section}
    for name, records in (("test", bench.test), ("f_r", bench.f_r), ("f_g", bench.f_g)):
        assert read_jsonl(layout.queries(name)) == json.loads(json.dumps(records))
    assert read_jsonl(layout.queries("robust")) == json.loads(json.dumps(robust))
    assert json.loads((layout.benchmark / "stats.json").read_text()) == json.loads(
        json.dumps(stats)
    )
    assert "paper" not in built.stats and "selection_cost" not in built.stats
    assert built.table1() == table1(stats, {})
    assert robust and all(q["qid"].startswith(ROBUST_PREFIX) for q in robust)


def test_a_registry_kg_gets_its_paper_row_and_test_size() -> None:
    """`test_size: paper` is the paper's |Q| for a KG the registry has (nell995: 815)."""
    kg, bank = synthetic_kg(False, n_entities=400, n_facts=12000)
    built = benchmark_files(kg, bank, build_benchmark_settings({}), "nell995")
    assert built.settings.test_size == 815
    assert built.stats["paper"] == built.paper and built.paper["test"] == 815
    assert "paper" in built.table1()


def test_a_retrieval_selection_needs_a_selector_source() -> None:
    kg, bank = synthetic_kg(False)
    settings = build_benchmark_settings({"rule_selection": {"method": "vanilla"}})
    with pytest.raises(ValueError, match="needs a rule selector source"):
        benchmark_files(kg, bank, settings, "toy")


def test_build_benchmark_takes_the_sections_settings_for_one_dataset() -> None:
    """No mirror of the section: build_benchmark takes `BuildBenchmarkSettings`, with what is
    given by dataset picked for one (`for_dataset`), and refuses them before that."""
    section = {
        "test_size": "paper",
        "corpus": {"filter": {"default": "none", "toy": "query_entities"}},
        "finetune_from_train": {"default": 0, "toy": 8},
    }
    settings = build_benchmark_settings(section)
    kg, bank = synthetic_kg(False)
    with pytest.raises(ValueError, match=r"settings for one dataset: settings\.for_dataset"):
        build_benchmark(kg, bank, settings)
    toy = settings.for_dataset("toy", {"test": 30})
    assert (toy.corpus.filter, toy.test_size, toy.finetune_from_train) == ("query_entities", 30, 8)
    other = settings.for_dataset("other")
    assert (other.corpus.filter, other.test_size, other.finetune_from_train) == ("none", None, 0)
    assert build_benchmark(kg, bank, toy).stats["corpus_filter"] == "query_entities"
