"""Ordinary open-domain QA sets (ASQA, PopQA, HotpotQA, NQ) as this project reads them.

The anonymous RuleRAG version (its Table 3) equips such sets, built without rules, with the
rules of a RuleQA bank. A QA set is a folder holding

* `questions.jsonl` (or `.json`, a list): one question per record. The fields are found under
  the names the four sets are distributed with (first present wins):
  - id: `id`, `qid`, `_id` (HotpotQA), `sample_id` (ASQA); else the line number;
  - question: `question`, `query`, `ambiguous_question` (ASQA);
  - answers: `answers` / `answer` (a string or a list: NQ-open, HotpotQA), `possible_answers`
    (PopQA, a JSON-encoded list), `qa_pairs[*].short_answers` (ASQA, flattened);
  - contexts (optional): `ctxs` (DPR / FiD: `{title, text}`), `context` (HotpotQA:
    `[title, [sentence, ...]]`), `contexts` (strings or `{title, text}`);
* `corpus.jsonl` (optional): `{id, contents}` (Pyserini's format) or `{id, title, text}`
  (DPR's passages). Without it the corpus is every question's contexts, each distinct text
  once; with neither the set is refused.

Bad input raises `InputError` naming the file, the line and the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rulerag.errors import InputError

QUESTION_FILES = ("questions.jsonl", "questions.json")
CORPUS_FILE = "corpus.jsonl"
ID_FIELDS = ("id", "qid", "_id", "sample_id")
QUESTION_FIELDS = ("question", "query", "ambiguous_question")
CONTEXT_FIELDS = ("ctxs", "context", "contexts")


@dataclass(frozen=True)
class QAQuestion:
    qid: str
    question: str
    answers: tuple[str, ...]
    contexts: tuple[str, ...] = field(default=(), compare=False)


def _records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, record) of a JSON-lines file, or (index + 1, item) of a JSON list."""
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise InputError(f"{path}: not JSON: {err}") from err
        if not isinstance(data, list):
            raise InputError(f"{path}: expected a JSON list of questions")
        yield from enumerate(data, 1)
        return
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                yield number, json.loads(raw.decode("utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise InputError(f"{path}:{number}: not JSON: {err}") from err


def _text(value: Any) -> str:
    return " ".join(str(value).split())


def _answers(record: Mapping[str, Any], where: str) -> tuple[str, ...]:
    if "qa_pairs" in record:  # ASQA: the short answers of every disambiguation
        pairs = record["qa_pairs"]
        if not isinstance(pairs, list):
            raise InputError(f"{where}: field 'qa_pairs' must be a list")
        values: list[Any] = [a for pair in pairs for a in (pair or {}).get("short_answers", [])]
    elif "possible_answers" in record:  # PopQA: a JSON-encoded list
        raw = record["possible_answers"]
        try:
            values = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError as err:
            raise InputError(f"{where}: field 'possible_answers' is not a JSON list") from err
    else:
        key = "answers" if "answers" in record else "answer"
        if key not in record:
            raise InputError(f"{where}: no answers (fields answers / answer / ...)")
        values = record[key]
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list) or not values:
        raise InputError(f"{where}: the answers must be a non-empty string or list")
    answers = tuple(dict.fromkeys(_text(v) for v in values if _text(v)))
    if not answers:
        raise InputError(f"{where}: every answer is empty")
    return answers


def _contexts(record: Mapping[str, Any], where: str) -> tuple[str, ...]:
    key = next((k for k in CONTEXT_FIELDS if k in record), None)
    if key is None:
        return ()
    items = record[key]
    if not isinstance(items, list):
        raise InputError(f"{where}: field {key!r} must be a list")
    texts = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            texts.append(_text(item))
        elif isinstance(item, Mapping) and "text" in item:
            title = _text(item.get("title") or "")
            texts.append(f"{title}: {_text(item['text'])}" if title else _text(item["text"]))
        elif isinstance(item, list) and len(item) == 2 and isinstance(item[1], list):
            texts.append(f"{_text(item[0])}: {_text(' '.join(map(str, item[1])))}")
        else:
            raise InputError(f"{where}: {key}[{i}] is not a text, {{title, text}} or [title, ...]")
    return tuple(t for t in texts if t)


def find_questions(folder: Path) -> Path:
    for name in QUESTION_FILES:
        if (folder / name).is_file():
            return folder / name
    raise InputError(f"{folder}: no {' or '.join(QUESTION_FILES)}")


def read_questions(path: Path) -> list[QAQuestion]:
    """The questions of one file (see the module docstring for the field names)."""
    questions: list[QAQuestion] = []
    seen: set[str] = set()
    for number, record in _records(path):
        where = f"{path}:{number}"
        if not isinstance(record, Mapping):
            raise InputError(f"{where}: a question must be a JSON object")
        key = next((k for k in QUESTION_FIELDS if k in record), None)
        if key is None or not _text(record[key]):
            raise InputError(f"{where}: no question (fields {', '.join(QUESTION_FIELDS)})")
        id_key = next((k for k in ID_FIELDS if k in record), None)
        qid = _text(record[id_key]) if id_key else f"q{number}"
        if qid in seen:
            raise InputError(f"{where}: id {qid!r} repeats an earlier question")
        seen.add(qid)
        questions.append(
            QAQuestion(qid, _text(record[key]), _answers(record, where), _contexts(record, where))
        )
    if not questions:
        raise InputError(f"{path}: no questions")
    return questions


def read_corpus_file(path: Path) -> list[tuple[str, str]]:
    """(id, text) of a corpus.jsonl: `{id, contents}` or `{id, title, text}`."""
    documents: list[tuple[str, str]] = []
    seen: set[str] = set()
    for number, record in _records(path):
        where = f"{path}:{number}"
        if not isinstance(record, Mapping) or "id" not in record:
            raise InputError(f"{where}: a document needs an 'id'")
        if "contents" in record:
            text = _text(record["contents"])
        elif "text" in record:
            title = _text(record.get("title") or "")
            text = f"{title}: {_text(record['text'])}" if title else _text(record["text"])
        else:
            raise InputError(f"{where}: a document needs 'contents' or 'text'")
        doc_id = _text(record["id"])
        if doc_id in seen:
            raise InputError(f"{where}: document id {doc_id!r} repeats")
        seen.add(doc_id)
        if text:
            documents.append((doc_id, text))
    if not documents:
        raise InputError(f"{path}: no documents")
    return documents


def corpus_from_contexts(questions: Sequence[QAQuestion]) -> list[tuple[str, str]]:
    """Every distinct context text of the questions, in order of first appearance."""
    texts = dict.fromkeys(text for q in questions for text in q.contexts)
    return [(f"ctx-{i}", text) for i, text in enumerate(texts)]


def read_qa_set(folder: Path) -> tuple[list[QAQuestion], list[tuple[str, str]], str]:
    """Questions, corpus documents and where the corpus came from (`corpus.jsonl` or
    `contexts`) of the QA set in `folder`."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"QA set folder {folder} not found")
    questions = read_questions(find_questions(folder))
    if (folder / CORPUS_FILE).is_file():
        return questions, read_corpus_file(folder / CORPUS_FILE), CORPUS_FILE
    documents = corpus_from_contexts(questions)
    if not documents:
        raise InputError(
            f"{folder}: no {CORPUS_FILE} and no question carries contexts: nothing to retrieve"
        )
    return questions, documents, "contexts"
