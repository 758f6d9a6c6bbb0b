"""Generator data in the layout of the official RuleRAG code (chenzhongwu20/RuleRAG_ICL_FT).

What its scripts read (docs/export.md has the details and what else they need to run):

* `main_train.py` -> `utils.get_dataset("json", DATA_PATH)` = `datasets.load_dataset("json")`,
  then `llama2_tokenizer` tokenises each record's `context` and `target`: here `train.json`, a
  JSON list of `{"context", "target"}` from F_G, the context the paper's Table 8 prompt up to
  `# Answer:` (`rulerag.generation.prompts`, style `paper`, kind `rule`), the target its
  answer with the paper's closing full stop.
* `RuleRAG_inference.py` -> `read_test_and_divide(input_file)`: `content.split('\n\n')`, one
  block per test query: here `test_prompts.txt`, each Table 8 prompt followed by a blank line
  (a prompt is one line per part, so it holds no blank line itself).
* the same script's `read_test_an(test_ans_file)`: line i of a tab-separated file, column 2 is
  block i's gold answer: here `test_answers.tsv`, `s  r  o  t` (subject, relation, answer,
  time; time empty for a static KG), the first answer of each test query.
* `RuleRAG_evaler.Evaler` reads an entity-name JSON (its keys are matched in the generated
  text): here `entity2id.json`, `{name: id}` of the KG's entities.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rulerag.generation.prompts import PromptFormat, Sample

__all__ = [
    "ANSWERS",
    "ENTITIES",
    "PROMPTS",
    "TRAIN",
    "answer_line",
    "prompt_blocks",
    "train_records",
    "write_official",
]

TRAIN = "train.json"
PROMPTS = "test_prompts.txt"
ANSWERS = "test_answers.tsv"
ENTITIES = "entity2id.json"


def _prompt(sample: Sample) -> str:
    """Table 8's prompt of a sample (documents, rules, query, answer cue)."""
    return PromptFormat("paper", sample.temporal).render_sample("rule", sample)


def train_records(samples: Sequence[Sample]) -> list[dict[str, str]]:
    """`{"context", "target"}` per answered sample: the prompt and its first answer."""
    return [
        {"context": _prompt(s), "target": PromptFormat("paper", s.temporal).target(s.answers[0])}
        for s in samples
        if s.answers
    ]


def prompt_blocks(samples: Sequence[Sample]) -> str:
    """The inference file: every prompt followed by a blank line (`split('\\n\\n')` gives the
    prompts in order, then one empty block)."""
    out = []
    for sample in samples:
        prompt = _prompt(sample)
        if "\n\n" in prompt:  # a blank line would split one query into two blocks
            raise ValueError(f"{sample.qid}: its prompt holds a blank line")
        out.append(prompt + "\n\n")
    return "".join(out)


def _field(value: Any, what: str, qid: str) -> str:
    """A TSV field as the benchmark wrote it; a tab or line break would shift the columns
    `read_test_an` splits, so it is refused rather than rewritten."""
    text = "" if value is None else str(value)
    if "\t" in text or "\n" in text or "\r" in text:
        raise ValueError(f"{qid}: its {what} holds a tab or a line break")
    return text


def answer_line(record: Mapping[str, Any]) -> str:
    """`s<TAB>r<TAB>o<TAB>t` of a test query record (its first answer)."""
    qid = str(record["qid"])
    answers = record.get("answers") or []
    if not answers:
        raise ValueError(f"{qid}: a test query without an answer")
    parts = (
        _field(record.get("head_name"), "subject", qid),
        _field(record.get("relation_name"), "relation", qid),
        _field(answers[0], "answer", qid),
        _field(record.get("time_text"), "time", qid),
    )
    return "\t".join(parts) + "\n"


def write_official(
    folder: Path,
    train: Sequence[Sample],
    test: Sequence[Sample],
    test_records: Sequence[Mapping[str, Any]],
    entities: Mapping[str, int],
) -> dict[str, int]:
    """Write the four files into `folder`; returns their record counts."""
    if [s.qid for s in test] != [str(r["qid"]) for r in test_records]:
        raise ValueError("test prompts and test records are not in the same order")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    records = train_records(train)
    (folder / TRAIN).write_text(
        json.dumps(records, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
    )
    (folder / PROMPTS).write_text(prompt_blocks(test), encoding="utf-8")
    (folder / ANSWERS).write_text("".join(map(answer_line, test_records)), encoding="utf-8")
    (folder / ENTITIES).write_text(
        json.dumps(dict(entities), ensure_ascii=False, indent=0) + "\n", encoding="utf-8"
    )
    return {"train": len(records), "test": len(test), "entities": len(entities)}
