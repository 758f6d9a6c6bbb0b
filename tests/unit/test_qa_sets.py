"""Ordinary QA sets with RuleQA's rules (the anonymous version's Table 3): reading the four
sets' field layouts, similarity rule matching with θ and N, the refused rows, and the stage on
a small fixture with the offline MiniLM and SmolLM2."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pipeline_steps.common import PROJECT_DIR
from rulerag.errors import InputError
from rulerag.generation.config import generation_settings
from rulerag.qa.build import build_qa_benchmark, union_bank
from rulerag.qa.reader import QAQuestion, read_qa_set, read_questions
from rulerag.qa.settings import check_qa_rows
from tests.helpers import StageProject, require_minilm

#: one question in each distribution's layout (NQ-open, PopQA, HotpotQA, ASQA, DPR / FiD)
QUESTIONS = [
    {"question": "who did iran consult in 2014", "answer": ["Oman", "the Sultan of Oman"]},
    {
        "id": 7,
        "question": "what is the capital of france",
        "possible_answers": '["Paris", "paris"]',
    },
    {
        "_id": "h1",
        "question": "which country did china accuse",
        "answer": "Japan",
        "context": [["China", ["China accused Japan of provocation.", "It said so twice."]]],
    },
    {
        "sample_id": "a1",
        "ambiguous_question": "who did the president of iran meet",
        "qa_pairs": [{"short_answers": ["Putin"]}, {"short_answers": ["Xi Jinping", "Xi"]}],
    },
    {
        "qid": "d1",
        "question": "whom did kerry criticize",
        "answers": ["Russia"],
        "ctxs": [{"title": "Kerry", "text": "Kerry criticized Russia over Crimea."}],
    },
]

RULES = pd.DataFrame(
    {
        "rule_id": ["r1", "r2", "r3"],
        "text": [
            "[Entity1, Consult, Entity2] leads to [Entity1, Consult, Entity2]",
            "[Entity1, Accuse, Entity2] leads to [Entity1, Criticize or denounce, Entity2]",
            "[Entity1, Make a visit, Entity2] leads to [Entity1, Meet, Entity2]",
        ],
        "score": [0.5, 0.4, 0.3],
    }
)


def write_set(folder: Path, questions: Sequence[dict], corpus: Sequence[dict] | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "questions.jsonl").write_text(
        "".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8"
    )
    if corpus is not None:
        (folder / "corpus.jsonl").write_text(
            "".join(json.dumps(d) + "\n" for d in corpus), encoding="utf-8"
        )
    return folder


def test_the_four_layouts_are_read(tmp_path: Path) -> None:
    questions, documents, source = read_qa_set(write_set(tmp_path / "mixed", QUESTIONS, None))
    assert source == "contexts"
    assert [q.qid for q in questions] == ["q1", "7", "h1", "a1", "d1"]
    assert questions[0].answers == ("Oman", "the Sultan of Oman")
    assert questions[1].answers == ("Paris", "paris")
    assert questions[2].contexts == (
        "China: China accused Japan of provocation. It said so twice.",
    )
    assert questions[3].question == "who did the president of iran meet"
    assert questions[3].answers == ("Putin", "Xi Jinping", "Xi")
    assert documents == [
        ("ctx-0", "China: China accused Japan of provocation. It said so twice."),
        ("ctx-1", "Kerry: Kerry criticized Russia over Crimea."),
    ]
    corpus = [
        {"id": "p1", "title": "Oman", "text": "Iran consulted Oman."},
        {"id": "p2", "contents": "x"},
    ]
    _, documents, source = read_qa_set(write_set(tmp_path / "with_corpus", QUESTIONS, corpus))
    assert source == "corpus.jsonl" and documents == [
        ("p1", "Oman: Iran consulted Oman."),
        ("p2", "x"),
    ]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"question": "q"}, r"mixed/questions.jsonl:2: no answers"),
        ({"answer": "a"}, r":2: no question"),
        ({"question": "q", "possible_answers": "[oops"}, r":2: field 'possible_answers'"),
        ({"question": "q", "answer": []}, r":2: the answers must be a non-empty"),
        ({"question": "q", "answer": "a", "ctxs": [5]}, r":2: ctxs\[0\] is not a text"),
        ({"id": "q1", "question": "q", "answer": "a"}, r":2: id 'q1' repeats"),
    ],
)
def test_bad_questions_name_file_line_and_field(tmp_path: Path, record: dict, message: str):
    folder = write_set(
        tmp_path / "mixed", [{"id": "q1", "question": "q", "answer": "a"}, record], None
    )
    with pytest.raises(InputError, match=message):
        read_questions(folder / "questions.jsonl")


def test_a_set_without_corpus_or_contexts_is_refused(tmp_path: Path) -> None:
    folder = write_set(tmp_path / "bare", [{"question": "q", "answer": "a"}], None)
    with pytest.raises(InputError, match="no corpus.jsonl and no question carries contexts"):
        read_qa_set(folder)
    (folder / "questions.jsonl").write_text('{"question": "q", "answer": "a"}\nnot json\n')
    with pytest.raises(InputError, match=r"questions.jsonl:2: not JSON"):
        read_qa_set(folder)


def bag_of_words(texts: Sequence[str]) -> np.ndarray:
    """A deterministic stand-in for Sentence-BERT: word counts over a fixed vocabulary."""
    vocab = ["consult", "accuse", "criticize", "meet", "visit", "capital", "iran", "china"]
    rows = []
    for text in texts:
        words = re.findall(r"[a-z]+", text.lower())
        rows.append([sum(w.startswith(v) for w in words) for v in vocab])
    return np.asarray(rows, dtype=np.float32)


def test_rules_join_only_above_the_threshold_and_at_most_n() -> None:
    bank = union_bank({"icews14": RULES, "other": RULES.iloc[:1]})
    assert list(bank["rule_id"]) == ["icews14:r1", "icews14:r2", "icews14:r3"]  # repeats dropped
    questions = [
        QAQuestion("a", "who did iran consult", ("Oman",)),
        QAQuestion("b", "whom did china accuse and criticize", ("Japan",)),
        QAQuestion("c", "what is the capital of france", ("Paris",)),
    ]
    built = build_qa_benchmark(questions, [("d", "doc")], bank, bag_of_words, threshold=0.5)
    assert [r["rule_ids"] for r in built.test] == [["icews14:r1"], ["icews14:r2"], []]
    assert built.stats["questions_with_rules"] == 2 and built.stats["share_with_rules"] == 0.6667
    loose = build_qa_benchmark(questions, [("d", "doc")], bank, bag_of_words, threshold=-1, top_n=2)
    assert all(len(r["rule_ids"]) == 2 for r in loose.test)  # N caps what θ lets through
    assert built.test[0] == {
        "qid": "a",
        "query": "who did iran consult",
        "answers": ["Oman"],
        "time": None,
        "rule_ids": ["icews14:r1"],
    }


def test_rows_that_need_training_or_rule_candidates_are_refused() -> None:
    params = yaml.safe_load((PROJECT_DIR / "params.yaml").read_text(encoding="utf-8"))
    grid = generation_settings(params["generation"]).grid
    check_qa_rows(["standard_rag", "rulerag_icl", "standard_prompting"], grid)
    for row, reason in [
        ("rulerag_ft", "is trained"),
        ("standard_rag_rank", "rule-application candidates"),
        ("rulerag_icl_evidence", "rule-application candidates"),
        ("symbolic", "generator 'symbolic'"),
        ("rulerag_cok", "demonstrations from F_R items"),
        ("nope", "not a generation.grid row"),
    ]:
        with pytest.raises(InputError, match=reason):
            check_qa_rows([row], grid)


@pytest.mark.slow
def test_stage_answers_a_fixture_set_with_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage_project: StageProject
) -> None:
    """The stage end to end on the fixture: MiniLM matches the ICEWS-style rules to the
    questions phrased like them, BM25 searches with and without them, SmolLM2-135M answers
    both rows; files, metrics and the report are there."""
    require_minilm()
    import pipeline_steps.qa_rag as stage

    corpus = [
        {"id": "c1", "contents": "2014-01-02 Iran Consult Oman ."},
        {"id": "c2", "contents": "2014-01-03 China Accuse Japan ."},
        {"id": "c3", "contents": "2014-01-04 Kerry Criticize or denounce Russia ."},
        {"id": "c4", "contents": "Paris is the capital of France ."},
    ]
    questions = [
        {"id": "1", "question": "Iran Consult whom ?", "answer": "Oman"},
        {"id": "2", "question": "China Accuse whom ?", "answer": "Japan"},
        {"id": "3", "question": "What is the capital of France ?", "answer": "Paris"},
    ]
    write_set(tmp_path / "qa" / "toyqa", questions, corpus)
    bank_dir = tmp_path / "data" / "icews14" / "rules"
    bank_dir.mkdir(parents=True)
    RULES.to_parquet(bank_dir / "bank.parquet")
    overrides = {
        "qa.datasets": ["toyqa"],
        "qa.dir": str(tmp_path / "qa"),
        "qa.retriever": "bm25",
        "build_benchmark.rule_selection.threshold": 0.2,  # MiniLM: 0.28 / 0.38 here
        "generation.max_new_tokens": 4,
        "generation.test_queries": None,
    }
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")

    assert stage_project.run(stage, "--dataset", "toyqa", params=overrides) == 0
    base = tmp_path / "data" / "toyqa"
    test = [json.loads(line) for line in (base / "benchmark" / "test.jsonl").open()]
    by_id = {r["qid"]: r["rule_ids"] for r in test}
    assert by_id["1"][0] == "icews14:r1" and by_id["2"][0] == "icews14:r2"
    assert by_id["3"] == []  # no rule is near a capital-city question
    guided = pd.read_parquet(base / "retrieval" / "bm25-rg" / "run.parquet")
    assert set(guided.loc[guided["qid"] == "1", "rule"]) >= {"icews14:r1"}
    assert set(guided.loc[guided["qid"] == "3", "rule"]) == {""}  # searched alone
    report = json.loads((base / "qa" / "metrics.json").read_text())
    assert set(report["rows"]) == {"standard_rag", "rulerag_icl"}
    assert report["rows"]["standard_rag"]["queries"] == 3
    assert report["rows"]["standard_rag"]["recall_at_10"] == 1.0  # every answer is in the corpus
    results = (base / "qa" / "results.md").read_text()
    assert "RuleRAG-ICL above Standard RAG" in results and "| Contriever + LLAMA2_7B |" in results
    prompts = [
        json.loads(x)["prompt"]
        for x in (base / "generation" / "rulerag_icl" / "predictions.jsonl").open()
    ]
    assert any("Consult" in p and "Rule One:" in p for p in prompts)


def test_the_qa_folder_is_the_configured_one_else_the_mirrors(tmp_path: Path) -> None:
    from rulerag.qa.pipeline import qa_folder

    assert qa_folder(str(tmp_path), "popqa", mirror="/m") == tmp_path / "popqa"
    assert qa_folder(None, "popqa", mirror="/m") == Path("/m/qa/popqa")
    with pytest.raises(InputError, match="set qa.dir or RULERAG_DATA_DIR"):
        qa_folder(None, "popqa", mirror="")
