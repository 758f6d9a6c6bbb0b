"""Ordinary QA sets with RuleQA's rules (the anonymous version's Table 3): reading the four
sets' field layouts, similarity rule matching with θ and N, the refused rows. (The `qa_rag`
stage on a small fixture: tests/stages/test_qa_rag_stage.py.)"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipeline_steps.common import PROJECT_DIR
from rulerag.errors import InputError
from rulerag.generation.settings import generation_settings
from rulerag.qa.build import build_qa_benchmark, union_bank
from rulerag.qa.reader import QAQuestion, read_qa_set, read_questions
from rulerag.qa.settings import check_qa_rows
from tests.support.qa_sets import RULES, write_set

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


def test_the_qa_folder_is_the_configured_one_else_the_mirrors(tmp_path: Path) -> None:
    from rulerag.qa.pipeline import qa_folder

    assert qa_folder(str(tmp_path), "popqa", mirror="/m") == tmp_path / "popqa"
    assert qa_folder(None, "popqa", mirror="/m") == Path("/m/qa/popqa")
    with pytest.raises(InputError, match="set qa.dir or RULERAG_DATA_DIR"):
        qa_folder(None, "popqa", mirror="")
