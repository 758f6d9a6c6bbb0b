"""Rule retrieval (SIAR + R³) with a scripted fake LLM: what the self-induced rule does to the
search, how R³ reorders and survives malformed answers, the cache, the API path, RuleBench."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rulerag.benchmark.settings import RuleSelectionSettings
from rulerag.generation.settings import ApiSettings
from rulerag.orchestration.project_copy import kg_mirror_dir
from rulerag.rule_retrieval.evaluate import match, recall_at_k
from rulerag.rule_retrieval.library import RuleLibrary
from rulerag.rule_retrieval.llm import CachedLLM, make_generator
from rulerag.rule_retrieval.methods import search_text, select_rules
from rulerag.rule_retrieval.prompts import (
    R3_TEMPLATE_HEAD,
    SI_INSTRUCTION,
    induced_rule,
    parse_ranking,
    r3_prompt,
    si_prompt,
)
from rulerag.rule_retrieval.rulebench import load_set, reasoning_prompt, shots_from
from rulerag.rule_retrieval.search import BM25RuleIndex
from rulerag.rule_retrieval.settings import LLMSettings
from tests.support.fake_openai import FakeOpenAI, fake_rule_llm

LIBRARY = RuleLibrary(
    ids=("r1", "r2", "r3"),
    natural=(
        "If Person X owns Animal Y, then Person X can feed Animal Y.",
        "If Person X works with Electronic Device Y, then Person X needs to use Device Y.",
        "If Country X hosts a visit of Person Y, then Person Y makes a visit to Country X.",
    ),
    formal=(
        "Own(X, Y) => CanFeed(X, Y)",
        "WorksWith(X, Y) => NeedsToUse(X, Y)",
        "HostVisit(X, Y) => MakeVisit(Y, X)",
    ),
)
QUERY = "Alice works with her laptop. Does Alice need to use her laptop?"


class ScriptedLLM:
    """Answers by a function of the prompt; records every prompt it was sent."""

    def __init__(self, answer: Callable[[str], str], name: str = "scripted") -> None:
        self.answer = answer
        self.name = name
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[str]) -> list[str]:
        self.prompts += list(prompts)
        return [self.answer(p) for p in prompts]


def pick(method: Any, *, top_k: int = 10, top_n: int = 20, query_form: Any = "si"):
    """One rule selection for `select_rules` (its former defaults): its `top_k` rules (the
    selection's `top_n`), R³ over the top `top_n` search results (its `candidates`)."""
    return RuleSelectionSettings(
        method=method, top_n=top_k, candidates=top_n, query_form=query_form
    )


def test_the_prompts_are_the_papers() -> None:
    prompt = si_prompt(QUERY, [("Bob owns a cat.", LIBRARY.natural[0])])
    assert prompt.startswith(SI_INSTRUCTION)
    assert f"query: Bob owns a cat. rule: {LIBRARY.natural[0]}" in prompt
    assert prompt.endswith(f"query: {QUERY} rule:")
    ranked = r3_prompt("Who visits France", ["rule a", "rule b"])
    assert ranked.startswith(R3_TEMPLATE_HEAD.format(num=2, query="Who visits France"))
    assert "\n[1] rule a\n[2] rule b\nQuery: Who visits France.\nRank the 2 rules above" in ranked
    assert induced_rule("\n rule: If A then B.\nmore") == "If A then B."
    assert induced_rule("The rule to be applied is: If A then B.") == "If A then B."
    assert induced_rule("Rules of thumb: none") == "Rules of thumb: none"
    smollm2 = "The inferential rule that can be applied to the given query is:\n[A, r, B] leads to"
    assert induced_rule(smollm2) == "[A, r, B] leads to"


def test_the_self_induced_rule_is_the_search_text() -> None:
    """Vanilla BM25 misses the rule; the SI (written in the rules' words) finds it first."""
    index = BM25RuleIndex(LIBRARY.natural)
    llm = CachedLLM(ScriptedLLM(lambda p: "If Person X works with Device Y, then X needs Y."), None)
    vanilla = select_rules(pick("vanilla", top_k=2), ["Zed and Kim?"], LIBRARY, index)
    assert vanilla.search_texts == ["Zed and Kim?"] and vanilla.llm_calls == 0
    for form, expected in (("si", "If Person X works"), ("si_input", "Zed and Kim?")):
        picked = select_rules(
            pick("siar", query_form=form, top_k=2), ["Zed and Kim?"], LIBRARY, index, llm=llm
        )
        assert expected in picked.search_texts[0]
        assert picked.ranked[0][0] == "r2"
    assert search_text("q", "", "si") == "q"  # no induced rule: the query itself


@pytest.mark.parametrize(
    ("answer", "order", "repaired"),
    [
        ("[3] > [1] > [2]", ["r3", "r1", "r2"], False),
        ("[3] > [3] > [9] > [2]", ["r3", "r2", "r1"], True),  # repeated, invented, missing
        ("I cannot rank these.", ["r1", "r2", "r3"], True),
        ("3 > 1", ["r3", "r1", "r2"], True),
    ],
)
def test_r3_reorders_by_the_llms_list_and_survives_malformed_ones(
    answer: str, order: list[str], repaired: bool
) -> None:
    index = BM25RuleIndex(["Person X", "Person X", "Person X"])  # ties: library order
    llm = CachedLLM(ScriptedLLM(lambda p: answer), None)
    picked = select_rules(
        pick("vanilla_r3", top_n=3, top_k=3), ["Person X"], LIBRARY, index, llm=llm
    )
    assert picked.ranked == [order]
    assert picked.r3_repaired == int(repaired)
    assert picked.r3_unparsed == int(answer.startswith("I cannot"))
    ranking = parse_ranking("[3] > [3] > [9] > [2]", 3)
    assert (ranking.listed, ranking.missing, ranking.repeated, ranking.invented) == (2, 1, 1, 1)


def test_the_cache_makes_a_rerun_free(tmp_path: Path) -> None:
    fake = ScriptedLLM(lambda p: "If Person X owns Animal Y, then X can feed Y.")
    index = BM25RuleIndex(LIBRARY.natural)
    queries = ["Bob owns a cat.", "Ann owns a dog.", "Bob owns a cat."]
    first = CachedLLM(fake, tmp_path / "cache.sqlite")
    run1 = select_rules(pick("siar_r3", top_n=3, top_k=2), queries, LIBRARY, index, llm=first)
    assert run1.llm_calls == 4 and len(fake.prompts) == 4  # 2 distinct SI + 2 distinct R3
    first.close()
    again = CachedLLM(fake, tmp_path / "cache.sqlite")
    run2 = select_rules(pick("siar_r3", top_n=3, top_k=2), queries, LIBRARY, index, llm=again)
    assert run2.llm_calls == 0 and len(fake.prompts) == 4
    assert run2.ranked == run1.ranked
    other = CachedLLM(fake, tmp_path / "cache.sqlite", identity="another model")
    assert select_rules(pick("siar"), queries[:1], LIBRARY, index, llm=other).llm_calls == 1


def test_the_api_path_against_a_local_fake_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RULERAG_API_KEY", "sk-local-test")
    with FakeOpenAI([]) as server:
        server.script = [
            (200, {"choices": [{"message": {"content": "If X works with Y, X needs to use Y."}}]}),
            (200, {"choices": [{"message": {"content": "[2] > [1] > [3]"}}]}),
        ]
        api = ApiSettings(base_url=server.url, backoff=0.0, concurrency=1)
        generator = make_generator(LLMSettings(kind="api", model="fake-model"), api)
        llm = CachedLLM(generator, None, progress=False)
        index = BM25RuleIndex(LIBRARY.natural)
        picked = select_rules(pick("siar_r3", top_n=3, top_k=3), [QUERY], LIBRARY, index, llm=llm)
    (candidates,) = index.search(picked.search_texts, 3)
    assert picked.ranked == [[LIBRARY.ids[candidates[i]] for i in (1, 0, 2)]]
    assert len(server.requests) == 2 and picked.llm_calls == 2
    sent = server.requests[0]["body"]["messages"][-1]["content"]
    assert sent.startswith(SI_INSTRUCTION) and server.requests[0]["auth"] == "Bearer sk-local-test"
    assert picked.induced == ["If X works with Y, X needs to use Y."]


def test_recall_and_match() -> None:
    ranked = [["r1", "r2"], ["r3", "r1"], []]
    gold = [{"r2"}, {"r3"}, {"r1"}]
    assert recall_at_k(ranked, gold, [1, 2]) == {1: 1 / 3, 2: 2 / 3}
    assert match(["The answer is  Grandson.", "no"], ["grandson", "yes"]) == 0.5


def test_formal_library_from_a_bank() -> None:
    import pandas as pd

    from rulerag.rules.bank import rules_frame
    from rulerag.rules.rule import Rule

    bank = rules_frame([Rule.path(1, [(0, True)], confidence=0.5)], ["host a visit", "visit"])
    library = RuleLibrary.from_bank(bank, ["host a visit", "visit"])
    assert (
        library.natural[0] == "[Entity2, host a visit, Entity1] leads to [Entity1, visit, Entity2]"
    )
    assert library.formal[0] == "visit(X, Y) <- host_a_visit(Y, X)"
    assert isinstance(bank, pd.DataFrame)


@pytest.mark.data
def test_rulebench_sets_load_with_their_counterfactual_rules() -> None:
    root = kg_mirror_dir().parent / "rulebench"
    if not root.is_dir():
        pytest.skip("no ../shared/rulebench")
    library, questions = load_set(root, "ulogic")
    assert (len(library), len(questions)) == (1046, 830)
    doubled, _ = load_set(root, "ulogic", counterfactual=True)
    assert len(doubled) == 2 * len(library)
    _, train = load_set(root, "ulogic", split="train")
    shots = shots_from(train, load_set(root, "ulogic", split="train")[0], 3)
    assert len(shots) == 3 and all(rule.startswith("If") for _, rule in shots)
    prompt = reasoning_prompt(questions[0], library.text_of()[questions[0].gold[0]])
    assert prompt.startswith("Giving a Context") and "Rule: If Person X works" in prompt


def test_a_broken_question_file_names_the_problem(tmp_path: Path) -> None:
    from rulerag.errors import InputError
    from rulerag.rule_retrieval.rulebench import read_questions

    path = tmp_path / "test_data.json"
    path.write_text(json.dumps([{"input": "q", "output": "a", "rule": ["nope"]}]))
    with pytest.raises(InputError, match="gold rule 'nope' is not in the rule library"):
        read_questions(path, LIBRARY)


def test_the_evaluation_table_reuses_the_induced_rules() -> None:
    """Every method x query form on one retriever; each distinct prompt reaches the LLM once."""
    from rulerag.rule_retrieval.experiment import (
        RuleRetrievalTask,
        flat_metrics,
        results_markdown,
        run_evaluation,
    )
    from rulerag.rule_retrieval.settings import rule_retrieval_settings

    task = RuleRetrievalTask(
        library=LIBRARY,
        qids=("q1", "q2"),
        queries=("Zed works with a laptop.", "Kim owns a cat."),
        gold=(frozenset({"r2"}), frozenset({"r1"})),
        shots=(("Bob owns a dog.", LIBRARY.natural[0]),),
    )
    fake = ScriptedLLM(
        lambda p: "[2] > [1]" if p.startswith("You are an intelligent") else "If X owns Y."
    )
    llms = {"induce": CachedLLM(fake, None), "rank": CachedLLM(fake, None)}
    settings = rule_retrieval_settings(
        {"retrievers": ["bm25"], "top_k": 2, "top_n": 2, "ks": [1, 2], "similarity": False}
    )
    extra = [{"method": "head", "ranked": [["r2"], ["r1"]]}]
    results, picked = run_evaluation(task, settings, llms.__getitem__, extra_rows=extra)
    assert list(results["row"]) == [
        "RuleRAG head relation (oracle)",
        "vanilla retrieval",
        "vanilla retrieval + R³",
        "+ SIAR (w/ SI)",
        "+ SIAR (w/ SI + input)",
        "+ SIAR-R³ (w/ SI)",
        "+ SIAR-R³ (w/ SI + input)",
    ]
    assert results.loc[0, "R@1"] == 100.0
    si_prompts = [p for p in fake.prompts if p.startswith("You are given a Query")]
    assert len(si_prompts) == 2  # induced once per query, reused by all four SIAR rows
    assert len(fake.prompts) == len(set(fake.prompts))
    assert len(picked) == 2 * len(results)
    table = results_markdown(results, "demo", [1, 2])
    assert "| **sparse retrieval (BM25), natural rules** |" in table
    names = flat_metrics(results, [1, 2])
    assert "bm25_natural_siar_si_input.recall_at_2" in names
    assert "natural_head.recall_at_1" in names and "bm25_natural_vanilla.recall_at_1" in names
    # as results.csv reads back (and as MLflow saw it): empty query forms are NaN
    reread = pd.read_csv(io.StringIO(results.to_csv(index=False)))
    assert reread["query_form"].isna().any()
    assert flat_metrics(reread, [1, 2]) == names
    assert not [name for name in names if "nan" in name.split(".")[0].split("_")]


def test_chinese_rules_are_found_with_the_cjk_analyzer(tmp_path: Path) -> None:
    """CAIL2018 is Chinese legal text: no spaces, so the English analysis sees one token per
    sentence and finds nothing; CJK bigrams find the article."""
    from rulerag.rule_retrieval.rulebench import read_questions

    rules = {
        "264": {
            "NL": "盗窃公私财物，数额较大的，处三年以下有期徒刑。",
            "FOL": "盗窃(X) => 徒刑(X)",
        },
        "266": {
            "NL": "诈骗公私财物，数额较大的，处三年以下有期徒刑。",
            "FOL": "诈骗(X) => 徒刑(X)",
        },
        "234": {"NL": "故意伤害他人身体的，处三年以下有期徒刑。", "FOL": "伤害(X) => 徒刑(X)"},
    }
    (tmp_path / "test_rule.json").write_text(json.dumps(rules, ensure_ascii=False))
    cases = [
        ("被告人张某秘密窃取他人财物，盗窃数额较大。", "盗窃罪", "264"),
        ("被告人李某故意伤害被害人身体。", "故意伤害罪", "234"),
    ]
    questions = [{"input": q, "output": a, "rule": [r]} for q, a, r in cases]
    (tmp_path / "test_data.json").write_text(json.dumps(questions, ensure_ascii=False))
    library = RuleLibrary.from_rulebench(tmp_path / "test_rule.json")
    asked = read_questions(tmp_path / "test_data.json", library)
    cjk = BM25RuleIndex(library.natural, analyzer="cjk")
    ranked = cjk.search([q.query for q in asked], 1)
    assert [library.ids[r[0]] for r in ranked] == ["264", "234"]
    english = BM25RuleIndex(library.natural, analyzer="english")
    assert english.search([q.query for q in asked], 1) == [[], []]


def test_claims_are_paired_on_the_same_queries() -> None:
    """Hand-made selections: SIAR recalls q1-q4 where vanilla recalls only q5; McNemar 4 vs 1."""
    import pandas as pd

    from rulerag.rule_retrieval.claims import claims_markdown, rule_claims

    qids = [f"q{i}" for i in range(1, 7)]
    gold = [frozenset({"g"})] * 6
    rows = []
    for qid in qids:
        siar_hit, vanilla_hit = qid in {"q1", "q2", "q3", "q4"}, qid == "q5"
        for method, form, hit in (("siar", "si_input", siar_hit), ("vanilla", "", vanilla_hit)):
            rules = ["x", "g"] if hit else ["x", "y"]
            rows.append(("bm25", "natural", method, form, qid, rules))
        rows.append(("-", "natural", "similarity", "", qid, []))
    picked = pd.DataFrame(
        rows, columns=["retriever", "rule_form", "method", "query_form", "qid", "rule_ids"]
    )
    claims = rule_claims(picked, qids, gold, k=2).set_index("claim")
    siar = claims.loc["SIAR (w/ SI + input) above vanilla retrieval"]
    assert (siar["R@2 better"], siar["R@2 worse"]) == (round(400 / 6, 2), round(100 / 6, 2))
    assert (siar["only better"], siar["only worse"]) == (4, 1)
    assert siar["p"] == 0.375 and siar["verdict"] == "same direction"  # 2 * P(X <= 1 | 5, .5)
    similarity = claims.loc["vanilla retrieval above RuleRAG similarity (θ, N)"]
    assert (similarity["only better"], similarity["only worse"]) == (1, 0)
    assert "SIAR (w/ SI) above" not in " ".join(claims.index)  # no w/ SI row: no claim
    assert (
        rule_claims(picked, qids, gold, k=1)
        .set_index("claim")
        .loc["SIAR (w/ SI + input) above vanilla retrieval", "R@1 better"]
        == 0.0
    )
    assert "| bm25 (natural) | SIAR (w/ SI + input) above vanilla retrieval |" in claims_markdown(
        claims.reset_index(), 2
    )


def test_the_self_induced_rule_may_span_lines_and_the_ranking_may_not() -> None:
    """A local model decodes SI to its budget (the rule may follow a label line) and R³'s
    one-line ranking to the first line break; the cache keeps the two apart."""
    from rulerag.rule_retrieval.llm import LLMPool

    class LocalLike:
        name = "local-like"
        max_new_tokens, stop_at_newline = 0, True

        def __init__(self) -> None:
            self.seen: list[tuple[int, bool]] = []

        def generate(self, prompts: Sequence[str]) -> list[str]:
            self.seen.append((self.max_new_tokens, self.stop_at_newline))
            return ["x"] * len(prompts)

    pool = LLMPool(LLMSettings(max_new_tokens=64, rank_max_new_tokens=32), None,
                   model_cache=None, api=None)  # fmt: skip
    pool._generator = fake = LocalLike()
    pool("induce").complete(["p"])
    pool("rank").complete(["p"])
    assert fake.seen == [(64, False), (32, True)]
    assert pool("induce").identity != pool("rank").identity


def test_bm25_rule_search_survives_a_term_the_stemmer_empties() -> None:
    """CLUTRR's `[Clarence]'s` gives the token `s`, which Porter stems to "": no crash, and
    the kinship words still find their rule."""
    library = ("If B is the father of A, then A is the son of B.", "If B is the wife of A.")
    index = BM25RuleIndex(library)
    (rows,) = index.search(["[Clarence]'s son, [Emily]'s father"], 2)
    assert rows[0] == 0


def test_the_stage_entry_evaluates_on_the_benchmark_through_the_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`evaluate_rule_retrieval` on a synthetic dataset's files with an API LLM (the typed
    `generation.api`) against the stage's former sequence: the task, RuleRAG's own rows, the
    evaluation, the claims; the cache in data/<dataset>/cache/ makes a rerun free."""
    from rulerag.benchmark.files import read_benchmark_files
    from rulerag.benchmark.settings import build_benchmark_settings
    from rulerag.layout import DataLayout
    from rulerag.rule_retrieval.claims import rule_claims
    from rulerag.rule_retrieval.ruleqa import evaluate_rule_retrieval, reference_rows, ruleqa_task
    from rulerag.rule_retrieval.settings import rule_retrieval_settings
    from tests.support.synthetic_kg import write_synthetic_dataset

    monkeypatch.setenv("RULERAG_API_KEY", "sk-local-test")
    layout = DataLayout.of(tmp_path / "data", "toy")
    write_synthetic_dataset(layout, True)
    benchmark = build_benchmark_settings({"test_size": 30})
    read_benchmark_files(benchmark, layout).write(layout.benchmark, {})
    settings = rule_retrieval_settings(
        {"queries": 6, "methods": ["vanilla", "siar_r3"], "retrievers": ["bm25"],
         "query_forms": ["si"], "ks": [1, 2], "top_k": 2, "top_n": 2, "shots": 2,
         "similarity": False, "llm": {"kind": "api", "model": "fake"}}
    )  # fmt: skip
    with FakeOpenAI([], reply=fake_rule_llm) as server:
        api = ApiSettings(base_url=server.url, backoff=0.0, concurrency=1)
        selection = benchmark.rule_selection
        evaluation = evaluate_rule_retrieval(settings, selection, api, layout, None)
        sent = len(server.requests)
        again = evaluate_rule_retrieval(settings, selection, api, layout, None)
        assert len(server.requests) == sent  # every answer came from the cache
    assert layout.rule_llm_cache.is_file()
    assert sent == evaluation.metrics["llm_calls"] == 12  # 6 queries: an SI and an R³ prompt
    assert again.metrics["llm_calls"] == 0
    pd.testing.assert_frame_equal(again.selections, evaluation.selections)

    task, bank, test = ruleqa_task(layout, 6, 2, settings.seed)
    assert evaluation.metrics["queries"] == len(test) == 6
    assert evaluation.metrics["llm"] == "api:fake"
    assert list(evaluation.results["row"]) == [
        "RuleRAG head relation (oracle)", "vanilla retrieval", "+ SIAR-R³ (w/ SI)"
    ]  # fmt: skip
    (head,) = reference_rows(task, bank, test, settings.top_k, None)
    chosen = evaluation.selections.groupby("method", sort=False)["rule_ids"].agg(list)
    assert chosen["head"] == head["ranked"]
    assert evaluation.results.loc[0, "R@1"] == 100.0  # the oracle
    claims = rule_claims(evaluation.selections, task.qids, task.gold, 2)
    pd.testing.assert_frame_equal(evaluation.claims, claims)

    out = tmp_path / "out"
    out.mkdir()
    evaluation.write(out)
    assert (out / "results.md").read_text(encoding="utf-8") == evaluation.markdown()
    assert evaluation.markdown().startswith(
        "# toy: rule retrieval, Recall@k (%) of the gold rules, 6 test queries"
    )
    assert pd.read_csv(out / "results.csv")["row"].tolist() == list(evaluation.results["row"])
    rows = json.loads((out / "metrics.json").read_text())["rows"]
    assert [(r["row"], r["R@2"]) for r in rows] == list(
        zip(evaluation.results["row"], evaluation.results["R@2"], strict=True)
    )
    assert len(pd.read_parquet(out / "selections.parquet")) == 3 * 6
    assert (out / "recall.png").stat().st_size > 0 and (out / "claims.csv").is_file()


# -- RuleBench-format libraries (issue 28, part 7) ---------------------------------------------

TOY_RULES = {
    "a": {"NL": "If Person X owns Animal Y, then Person X can feed Animal Y."},
    "b": {"NL": "If Person X works with Device Y, then Person X needs to use Device Y."},
    "c": {"NL": "If Country X hosts Person Y, then Person Y visits Country X."},
    "d": {"NL": "If Person X owns Animal Y, then Person X can feed Animal Y."},  # a's text
}
TOY_QUESTIONS = [
    {"input": "Kim owns a cat. Can Kim feed the cat?", "output": "True", "rule": ["a"]},
    {"input": "Zed works with a laptop. Must Zed use it?", "output": "True", "rule": ["b"]},
    {"input": "France hosts Ann. Does Ann visit France?", "output": "True", "rule": ["c"]},
    {"input": "Bob owns a dog. Can Bob feed the dog?", "output": "True", "rule": ["d"]},
    {"input": "Eve works with a drill. Must Eve use it?", "output": "True", "rule": ["b"]},
]


def write_set(folder: Path, files: dict[str, object], encoding: str = "utf-8") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        (folder / name).write_text(text, encoding=encoding)
    return folder


def test_a_set_whose_train_rules_are_empty_evaluates_with_held_out_test_shots(
    tmp_path: Path,
) -> None:
    """RuleBench ships sets whose `train_rule.json` is `{}`: the evaluation ran into an
    InputError before any method. Now SIAR's shots come from the test questions, never one
    whose rule (by id or by text) is the query's gold rule, and the task says so."""
    from rulerag.rule_retrieval.experiment import run_evaluation
    from rulerag.rule_retrieval.rulebench import rulebench_task
    from rulerag.rule_retrieval.settings import rule_retrieval_settings

    write_set(
        tmp_path / "toy",
        {
            "test_rule.json": TOY_RULES,
            "test_data.json": TOY_QUESTIONS,
            "train_rule.json": {},
            "train_data.json": [{"input": "q", "output": "a", "rule": ["7"]}],
        },
    )
    task, questions = rulebench_task(tmp_path, "toy", None, 2, 12, False)
    assert task.shots == () and task.query_shots is not None
    assert any("train_rule.json is empty" in note for note in task.notes)
    text = task.library.text_of()
    for question, shots in zip(questions, task.query_shots, strict=True):
        assert len(shots) == 2
        gold_texts = {text[g] for g in question.gold}
        assert all(rule not in gold_texts and query != question.query for query, rule in shots)

    fake = ScriptedLLM(lambda p: "If X owns Y.")
    settings = rule_retrieval_settings(
        {"retrievers": ["bm25"], "methods": ["vanilla", "siar"], "query_forms": ["si"],
         "top_k": 2, "top_n": 2, "ks": [1, 2], "similarity": False}
    )  # fmt: skip
    llm = CachedLLM(fake, None)
    results, _ = run_evaluation(task, settings, lambda purpose: llm)
    assert list(results["method"]) == ["vanilla", "siar"]
    assert len(fake.prompts) == len(questions)
    for question, prompt in zip(questions, fake.prompts, strict=True):
        shown = prompt.split("\n")[2:-1]  # the demonstrations' lines
        assert shown and not any(text[g] in line for g in question.gold for line in shown)

    # no method self-induces (shots 0): no other split is read, a broken one included
    (tmp_path / "toy" / "train_data.json").write_text("not json")
    vanilla, _ = rulebench_task(tmp_path, "toy", None, 0, 12, False)
    assert vanilla.shots == () and vanilla.query_shots is None


def test_a_rule_string_is_one_rule_id(tmp_path: Path) -> None:
    """`"rule": "179"` named rules 1, 7 and 9 (a string iterated); it is rule 179, as a
    number is; a list names several; anything else is refused, naming the question."""
    from rulerag.errors import InputError
    from rulerag.rule_retrieval.rulebench import read_questions

    library = RuleLibrary.from_rulebench(
        write_set(
            tmp_path, {"test_rule.json": {i: {"NL": f"rule {i}"} for i in ("1", "7", "9", "179")}}
        )
        / "test_rule.json"
    )
    path = tmp_path / "test_data.json"
    write_set(tmp_path, {path.name: [{"input": "q", "rule": "179"}]})
    assert [q.gold for q in read_questions(path, library)] == [("179",)]  # not 1, 7, 9
    cases = [("179", ("179",)), (179, ("179",)), (["179", 7], ("179", "7")), (None, ())]
    write_set(tmp_path, {path.name: [{"input": "q", "rule": rule} for rule, _ in cases]})
    assert [q.gold for q in read_questions(path, library)] == [gold for _, gold in cases]
    for bad in ({"id": "179"}, [["179"]], 1.5, True):
        write_set(tmp_path, {path.name: [{"input": "q", "rule": bad}]})
        with pytest.raises(InputError, match=r"test_data.json: question 0: 'rule' must be"):
            read_questions(path, library)


def test_a_rule_id_listed_twice(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """JSON keeps the last of a repeated id silently, so a gold id could name another rule
    than the author meant: two different rules under one id are refused (file and id); the
    same rule twice (RuleBench's ulogic-cf lists all its ids so) is kept once, with a
    warning."""
    from rulerag.errors import InputError

    path = tmp_path / "test_rule.json"
    path.write_text('{"1": {"NL": "If A then B."}, "2": {"NL": "If C then D."}, "1": {"NL": "X"}}')
    with pytest.raises(InputError, match=r"test_rule.json: rule id '1' is listed twice"):
        RuleLibrary.from_rulebench(path)
    path.write_text('{"1": {"NL": "If A then B."}, "2": {"NL": "C"}, "1": {"NL": "If A then B."}}')
    with caplog.at_level("WARNING"):
        library = RuleLibrary.from_rulebench(path)
    assert library.ids == ("1", "2") and library.natural[0] == "If A then B."
    assert "test_rule.json: 1 rule ids listed twice with the same rule, kept once" in caplog.text


def test_rulebench_files_with_a_byte_order_mark_load(tmp_path: Path) -> None:
    """Files saved by Windows tools start with a UTF-8 BOM; json refused them."""
    write_set(
        tmp_path / "toy",
        {"test_rule.json": TOY_RULES, "test_data.json": TOY_QUESTIONS},
        encoding="utf-8-sig",
    )
    library, questions = load_set(tmp_path, "toy")
    assert (len(library), len(questions)) == (4, 5)
    assert library.ids[0] == "a" and questions[0].gold == ("a",)


CHINESE_RULES = {
    "264": {"NL": "盗窃公私财物，数额较大的，处三年以下有期徒刑。", "FOL": "盗窃(X) => 徒刑(X)"},
    "266": {"NL": "诈骗公私财物，数额较大的，处三年以下有期徒刑。", "FOL": "诈骗(X) => 徒刑(X)"},
    "234": {"NL": "故意伤害他人身体的，处三年以下有期徒刑。", "FOL": "伤害(X) => 徒刑(X)"},
}
CHINESE_QUESTIONS = [
    {"input": "被告人张某秘密窃取他人财物，盗窃数额较大。", "output": "盗窃罪", "rule": ["264"]},
    {"input": "被告人李某故意伤害被害人身体。", "output": "故意伤害罪", "rule": ["234"]},
]


def test_the_default_analyzer_follows_the_librarys_script(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`auto` (the default) searches a Chinese library with CJK bigrams and an English one
    with Pyserini's analysis, and says which ran; `english` set over Chinese rules is kept but
    warned about (whole sentences as terms: Recall 0)."""
    from rulerag.rule_retrieval.experiment import run_evaluation
    from rulerag.rule_retrieval.rulebench import rulebench_task
    from rulerag.rule_retrieval.settings import rule_retrieval_settings

    write_set(
        tmp_path / "cail", {"test_rule.json": CHINESE_RULES, "test_data.json": CHINESE_QUESTIONS}
    )
    task, _ = rulebench_task(tmp_path, "cail", None, 0, 12, False)
    values = {"retrievers": ["bm25"], "methods": ["vanilla"], "similarity": False}
    results, _ = run_evaluation(task, rule_retrieval_settings(values), None)
    assert results.loc[0, "R@1"] == 100.0  # the default analysis found both articles

    from rulerag.rule_retrieval.experiment import library_analysis

    auto = library_analysis("auto", task.library)
    assert auto.name == "cjk" and auto.cjk_share > 0.9
    assert auto.describe().startswith("cjk (auto: ")
    with caplog.at_level("WARNING"):
        english = rule_retrieval_settings({**values, "analyzer": "english"})
        results, _ = run_evaluation(task, english, None)
    assert results.loc[0, "R@10"] == 0.0
    assert "rule_retrieval.analyzer is english but" in caplog.text
    assert library_analysis("auto", LIBRARY).name == "english"
    assert BM25RuleIndex(task.library.natural, analyzer="auto").analysis == "cjk"


def test_the_bench_sets_the_analyzer() -> None:
    """benchmarks/bench_rule_retrieval.py had no way to choose the analysis."""
    from benchmarks.bench_rule_retrieval import bench_settings, parse_args

    assert bench_settings(parse_args([])).analyzer == "auto"
    assert bench_settings(parse_args(["--analyzer", "cjk"])).analyzer == "cjk"
    with pytest.raises(SystemExit):
        parse_args(["--analyzer", "french"])


def test_ruleqa_results_are_byte_identical_under_the_auto_analyzer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RuleQA's rules are English: `auto` picks Pyserini's analysis, so every file
    `rule_retrieval_eval` writes is byte for byte what `english` (the former default)
    writes, each from a cold LLM cache (the seconds a row took, a timing, set to 0)."""
    from rulerag.benchmark.files import read_benchmark_files
    from rulerag.benchmark.settings import build_benchmark_settings
    from rulerag.layout import DataLayout
    from rulerag.rule_retrieval.ruleqa import evaluate_rule_retrieval
    from rulerag.rule_retrieval.settings import rule_retrieval_settings
    from tests.support.synthetic_kg import write_synthetic_dataset

    monkeypatch.setenv("RULERAG_API_KEY", "sk-local-test")
    layout = DataLayout.of(tmp_path / "data", "toy")
    write_synthetic_dataset(layout, True)
    benchmark = build_benchmark_settings({"test_size": 30})
    read_benchmark_files(benchmark, layout).write(layout.benchmark, {})
    values = {
        "queries": 6, "methods": ["vanilla", "siar"], "retrievers": ["bm25"],
        "query_forms": ["si_input"], "ks": [1, 2], "top_k": 2, "top_n": 2, "shots": 2,
        "similarity": False, "llm": {"kind": "api", "model": "fake"},
    }  # fmt: skip
    written = {}
    with FakeOpenAI([], reply=fake_rule_llm) as server:
        api = ApiSettings(base_url=server.url, backoff=0.0, concurrency=1)
        for analyzer in ("english", "auto"):
            layout.rule_llm_cache.unlink(missing_ok=True)
            settings = rule_retrieval_settings({**values, "analyzer": analyzer})
            evaluation = evaluate_rule_retrieval(
                settings, benchmark.rule_selection, api, layout, None
            )
            assert evaluation.analysis is not None and evaluation.analysis.name == "english"
            assert evaluation.metrics["llm_calls"] == 6
            evaluation.results["seconds"] = 0.0
            for row in evaluation.metrics["rows"]:
                row["seconds"] = 0.0
            out = tmp_path / analyzer
            out.mkdir()
            evaluation.write(out)
            written[analyzer] = {f.name: f.read_bytes() for f in sorted(out.iterdir())}
    assert evaluation.analysis.requested == "auto"
    assert set(written["auto"]) >= {"results.csv", "results.md", "metrics.json"}
    assert written["auto"] == written["english"]
