"""RuleBench questions and rule libraries (SIAR + R³'s evaluation data), and the input format
for a user's own rule library with questions.

The format (RuleBench's own JSON, read as is):

* a rule file: a JSON object `rule_id -> {"NL": natural-language rule, "FOL": formal rule}`
  (`FOL` optional: the natural text stands in);
* a question file: a JSON list of `{"instruction", "input", "output", "rule": [rule_id, ...]}`
  (`instruction` may be empty; `input` is the query; `output` the gold answer; `rule` the gold
  rule ids, which must resolve in the rule file).

The paper's library for a set is every rule of its test rule file; its robustness setting adds
the counterfactual (`-cf`) rules. Self-induction shots come from another split's questions
(validation or train), never from the test questions.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rulerag.errors import InputError
from rulerag.rule_retrieval.library import RuleLibrary

__all__ = [
    "RuleQuestion",
    "load_set",
    "match_of",
    "read_questions",
    "reasoning_prompt",
    "rulebench_task",
    "shots_from",
]

#: rule file of each question file (RuleBench's layout; ULogic's `rules.json` = test rules)
_RULE_FILES = {
    "test_data.json": ("test_rule.json", "rules.json"),
    "validation_data.json": ("validation_rule.json",),
    "train_data.json": ("train_rule.json",),
}


@dataclass(frozen=True)
class RuleQuestion:
    """One question: the query text, its gold answer and gold rule ids."""

    qid: str
    instruction: str
    query: str
    answer: str
    gold: tuple[str, ...]


def read_questions(path: Path, library: RuleLibrary, id_prefix: str = "") -> list[RuleQuestion]:
    """Questions of a RuleBench-format file; a gold id missing from `library` is an error."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(f"{path}: not a RuleBench question file ({err})") from None
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of questions")
    known = set(library.ids)
    out = []
    for i, item in enumerate(data):
        where = f"{path}: question {i}"
        if not isinstance(item, dict) or not isinstance(item.get("input"), str):
            raise InputError(f"{where}: needs an 'input' text")
        gold = tuple(f"{id_prefix}{r}" for r in item.get("rule") or ())
        unknown = [g for g in gold if g not in known]
        if unknown:
            raise InputError(f"{where}: gold rule {unknown[0]!r} is not in the rule library")
        out.append(
            RuleQuestion(
                qid=f"{path.stem}-{i}",
                instruction=str(item.get("instruction") or ""),
                query=item["input"].strip(),
                answer=str(item.get("output") or ""),
                gold=gold,
            )
        )
    return out


def _rule_file(folder: Path, question_file: str) -> Path:
    for name in _RULE_FILES.get(question_file, ()):
        if (folder / name).is_file():
            return folder / name
    raise InputError(f"{folder}: no rule file for {question_file} (looked for {_RULE_FILES})")


def load_set(
    root: Path, name: str, split: str = "test", counterfactual: bool = False
) -> tuple[RuleLibrary, list[RuleQuestion]]:
    """A RuleBench set (`clutrr`, `ulogic`, ... under `root`): its split's rule library and
    questions; `counterfactual` adds the `<name>-cf` rules (ids prefixed `cf:`) to the library,
    the paper's robustness setting."""
    folder = Path(root) / name
    question_file = f"{split}_data.json"
    library = RuleLibrary.from_rulebench(_rule_file(folder, question_file))
    if counterfactual:
        cf_folder = Path(root) / f"{name}-cf"
        library = library.extended(
            RuleLibrary.from_rulebench(_rule_file(cf_folder, question_file), prefix="cf:")
        )
    return library, read_questions(folder / question_file, library)


def shots_from(
    questions: Sequence[RuleQuestion], library: RuleLibrary, n: int, seed: int = 12
) -> list[tuple[str, str]]:
    """`n` (query, gold rule text) demonstrations for self-induction, a seeded sample."""
    text = library.text_of("natural")
    usable = [q for q in questions if q.gold and q.gold[0] in text]
    picked = random.Random(seed).sample(usable, min(n, len(usable)))
    return [(q.query, text[q.gold[0]]) for q in picked]


def reasoning_prompt(question: RuleQuestion, rule: str | None) -> str:
    """The prompt that answers a question with its top-1 rule (for Match). The paper states
    no template; this one is RuleBench's instruction, the rule, then the question."""
    parts = [question.instruction.strip()] if question.instruction.strip() else []
    if rule:
        parts.append(f"Rule: {rule}")
    parts += [question.query, "Answer:"]
    return "\n".join(parts)


def rulebench_task(
    root: Path, name: str, queries: int | None, shots: int, seed: int, counterfactual: bool
):
    """(the retrieval task, the sampled test questions) of a RuleBench set: the test rule
    library (doubled with the `-cf` rules when `counterfactual`), a seeded sample of test
    questions, and self-induction shots from the set's validation or train questions."""
    from rulerag.rule_retrieval.experiment import RuleRetrievalTask

    library, questions = load_set(root, name, "test", counterfactual)
    if queries is not None and queries < len(questions):
        rng = random.Random(seed)
        questions = [questions[i] for i in sorted(rng.sample(range(len(questions)), queries))]
    demos: list[tuple[str, str]] = []
    for split in ("validation", "train"):
        if (Path(root) / name / f"{split}_data.json").is_file():
            demo_library, demo_questions = load_set(root, name, split)
            demos = shots_from(demo_questions, demo_library, shots, seed)
            break
    task = RuleRetrievalTask(
        library=library,
        qids=tuple(q.qid for q in questions),
        queries=tuple(q.query for q in questions),
        gold=tuple(frozenset(q.gold) for q in questions),
        shots=tuple(demos),
    )
    return task, questions


def match_of(
    questions: Sequence[RuleQuestion],
    top_rules: Sequence[str | None],
    complete: Callable[[list[str]], list[str]],
) -> float:
    """The paper's Match for answering each question with its top-1 rule (None: no rule)."""
    from rulerag.rule_retrieval.evaluate import match

    prompts = [reasoning_prompt(q, r) for q, r in zip(questions, top_rules, strict=True)]
    return match(complete(prompts), [q.answer for q in questions])
