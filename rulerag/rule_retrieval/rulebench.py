"""RuleBench questions and rule libraries (SIAR + R³'s evaluation data), and the input format
for a user's own rule library with questions.

The format (RuleBench's own JSON, read as is):

* a rule file: a JSON object `rule_id -> {"NL": natural-language rule, "FOL": formal rule}`
  (`FOL` optional: the natural text stands in);
* a question file: a JSON list of `{"instruction", "input", "output", "rule": [rule_id, ...]}`
  (`instruction` may be empty; `input` is the query; `output` the gold answer; `rule` the gold
  rule ids, which must resolve in the rule file: a list of ids, or a single id as a string
  or a number, so `"rule": "179"` is rule 179, never rules 1, 7 and 9).

Both are UTF-8 JSON, with or without a byte-order mark. A rule id listed twice is kept once
when both are the same rule (RuleBench's `ulogic-cf` lists every id twice) and refused when
they differ (`RuleLibrary.from_rulebench`).

The paper's library for a set is every rule of its test rule file; its robustness setting adds
the counterfactual (`-cf`) rules. Self-induction shots come from another split's questions
(validation, else train); a set with no usable one (RuleBench ships sets whose
`train_rule.json` is `{}`) takes them from the test questions, each query's own gold rules
left out (`held_out_shots`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rulerag.errors import InputError
from rulerag.rule_retrieval.library import RuleLibrary, read_json

__all__ = [
    "RuleQuestion",
    "held_out_shots",
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
    data = read_json(path, "RuleBench question file")
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of questions")
    known = set(library.ids)
    out = []
    for i, item in enumerate(data):
        where = f"{path}: question {i}"
        if not isinstance(item, dict) or not isinstance(item.get("input"), str):
            raise InputError(f"{where}: needs an 'input' text")
        gold = tuple(f"{id_prefix}{r}" for r in _rule_ids(item.get("rule"), where))
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


def _rule_ids(value: object, where: str) -> list[str]:
    """A question's gold rule ids: a list of ids, or one id as a string or a number (iterating
    the string `"179"` would give rules 1, 7 and 9); none when absent or null."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    ids = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str | int):
            raise InputError(
                f"{where}: 'rule' must be a rule id (a string or an integer) or a list of them, "
                f"not {item!r}"
            )
        ids.append(str(item))
    return ids


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


def held_out_shots(
    questions: Sequence[RuleQuestion],
    pool: Sequence[RuleQuestion],
    library: RuleLibrary,
    n: int,
    seed: int = 12,
) -> list[tuple[tuple[str, str], ...]]:
    """`n` (query, gold rule text) demonstrations for each of `questions`, drawn from the test
    questions `pool` (a seeded order, the same for every query), leaving out the query itself
    and every demonstration whose rule is one of the query's gold rules, by id or by text: a
    shot never shows the answer.

    The SIAR + R³ paper always self-induces from a few-shot prompt (its Sec. 3.1, "we utilize
    few-shot prompting to guide the LLM for self-induction"; the template of its App. A ends
    in "... more demonstrations") and its library is the test set's rules (App. B, "we
    consolidate all rules within the entire test set into a comprehensive rule library and
    used the original questions as queries"); it names no other source of demonstrations. So
    a set with no training rules takes its shots from the test questions, as the paper's
    setting allows, rather than dropping them (a zero-shot SIAR is not the paper's method).
    """
    text = library.text_of("natural")
    usable = [q for q in pool if q.gold and q.gold[0] in text]
    order = random.Random(seed).sample(usable, len(usable))
    out = []
    for question in questions:
        banned = {text[g] for g in question.gold if g in text}
        picked: list[tuple[str, str]] = []
        for demo in order:
            if len(picked) >= n:
                break
            if demo.qid == question.qid or set(demo.gold) & set(question.gold):
                continue
            if text[demo.gold[0]] in banned:
                continue
            picked.append((demo.query, text[demo.gold[0]]))
        out.append(tuple(picked))
    return out


def _split_shots(
    root: Path, name: str, n: int, seed: int
) -> tuple[list[tuple[str, str]] | None, list[str]]:
    """Shots from the set's validation, else train questions (the first split that has
    questions and rules); None with the reasons when no split gives any."""
    notes = []
    for split in ("validation", "train"):
        folder = Path(root) / name
        question_file = f"{split}_data.json"
        if not (folder / question_file).is_file():
            continue
        rule_file = _rule_file(folder, question_file)
        library = RuleLibrary.from_rulebench(rule_file, allow_empty=True)
        if not len(library):
            notes.append(f"{rule_file.name} is empty")
            continue
        demos = shots_from(read_questions(folder / question_file, library), library, n, seed)
        if demos:
            return demos, notes
        notes.append(f"{question_file} has no question with a gold rule")
    return None, notes or ["no validation or train questions"]


def rulebench_task(
    root: Path, name: str, queries: int | None, shots: int, seed: int, counterfactual: bool
):
    """(the retrieval task, the sampled test questions) of a RuleBench set: the test rule
    library (doubled with the `-cf` rules when `counterfactual`), a seeded sample of test
    questions, and `shots` self-induction demonstrations from the set's validation or train
    questions; from the test questions without each query's gold rules when neither has any
    (`held_out_shots`; the task's `notes` say so). `shots` 0 (no method self-induces) reads no
    other split."""
    from rulerag.rule_retrieval.experiment import RuleRetrievalTask

    library, everything = load_set(root, name, "test", counterfactual)
    questions = everything
    if queries is not None and queries < len(questions):
        rng = random.Random(seed)
        questions = [questions[i] for i in sorted(rng.sample(range(len(questions)), queries))]
    demos: list[tuple[str, str]] = []
    query_shots = None
    notes: tuple[str, ...] = ()
    if shots > 0:
        found, reasons = _split_shots(root, name, shots, seed)
        if found is not None:
            demos = found
        else:
            query_shots = tuple(held_out_shots(questions, everything, library, shots, seed))
            notes = (
                f"self-induction shots: from the test questions, each query's own gold rules "
                f"left out ({'; '.join(reasons)})",
            )
    task = RuleRetrievalTask(
        library=library,
        qids=tuple(q.qid for q in questions),
        queries=tuple(q.query for q in questions),
        gold=tuple(frozenset(q.gold) for q in questions),
        shots=tuple(demos),
        query_shots=query_shots,
        notes=notes,
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
