"""Verify-and-edit (VE), chain-of-knowledge (CoK) and RuleRAG-CoK as rows of the grid.

The anonymous RuleRAG version compares with VE (Zhao et al., 2023) and CoK (Li et al., 2024)
"following their implementation", with the corpus as their knowledge source and 3-shot
chain-of-thought prompts (its Sec. 4.2), and builds RuleRAG-CoK: CoK whose retrieval and
prompts are rule-guided. Both methods start from chain-of-thought answers with
self-consistency and correct the rationale with retrieved knowledge only when the sampled
answers disagree; they differ in how (read from the two reference implementations):

* VE: 5 samples at temperature 0.7; verify when the majority's share is below 0.6 (its
  HotpotQA commands: 3 of 5). The rationale is split at "First, / Second, / ..."; for each
  sentence, independently, a verifying question is written, the corpus searched (3 documents)
  and the question answered from them; the answers replace the sentences, and the answer is
  generated again after the edited rationale.
* CoK: 10 samples at temperature 0.7, the first 5 that state an answer vote; correct when the
  majority's share is below 0.5. Progressive: rationale 1 gets a query, knowledge and an
  explicit edit ("Sentence / Knowledge / Edited sentence"); rationale 2 is then generated
  again after the edited rationale 1, and corrected the same way; the answer is consolidated
  from both. Only the "factual" domain exists here (the corpus), so no domain selection.
* RuleRAG-CoK: CoK with the query's rules in every prompt and every search text `q ∘ r`.

The demonstrations are built from F_R items (a query, its rule, an oracle document, the
answer), so they read like RuleQA and never come from the test queries. Deviations, stated:
VE keeps the first majority sample's rationale (it picks the most probable one, which needs
log-probabilities a chat API does not give); both methods' demonstrations are generated from
data, not the papers' hand-written HotpotQA ones.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rulerag.generation.prompts import Sample
from rulerag.generation.settings import CHAIN_METHODS, ChainSettings
from rulerag.retrieval.rule_guided import Searcher, compose, rule_query_text

MARKERS = ("First, ", "Second, ", "Third, ", "Fourth, ")
ANSWER_CUE = "The answer is"
_MARKER_RE = re.compile(r"(?:First|Second|Third|Fourth|Moreover), ")


class ChainLLM(Protocol):
    """`n` completions per prompt (temperature 0: greedy), one line each."""

    def __call__(
        self, prompts: Sequence[str], n: int, temperature: float, max_new_tokens: int
    ) -> list[list[str]]: ...


@dataclass(frozen=True)
class Demo:
    """One demonstration: an F_R item's query, rule, oracle document and answer."""

    query: str
    rule: str
    document: str
    fact: str  # the head fact in words: "<subject> <relation> <answer>"
    answer: str


def demos_from_items(
    items: Sequence[Mapping[str, Any]], corpus: Mapping[str, str], n: int, seed: int
) -> list[Demo]:
    """`n` demonstrations from F_R items with an oracle document (a seeded sample)."""
    usable = [
        item
        for item in items
        if item.get("answers") and any(d in corpus for d in item.get("oracle_doc_ids") or [])
    ]
    order = np.random.default_rng(seed).permutation(len(usable))
    chosen = []
    for i in order:
        item = usable[int(i)]
        if any(d.query == item["query"] for d in chosen):
            continue
        doc = next(corpus[d] for d in item["oracle_doc_ids"] if d in corpus)
        answer = str(item["answers"][0])
        fact = f"{item.get('head_name', '')} {item.get('relation_name', '')} {answer}".strip()
        chosen.append(Demo(item["query"], item["rule_text"], _sentence(doc), fact, answer))
        if len(chosen) == n:
            break
    return chosen


def _sentence(text: str) -> str:
    text = " ".join(str(text).split()).rstrip(" .")
    return text + "."


def rationale(demo: Demo, rules: bool) -> str:
    """The demonstration's chain of thought: the evidence, then the step to the answer."""
    step = f"by the rule {demo.rule}, {demo.fact}" if rules else demo.fact
    return f"First, {demo.document} Second, {_sentence(step)} {ANSWER_CUE} {demo.answer}."


def cot_prompt(demos: Sequence[Demo], query: str, rules: Sequence[str], with_rules: bool) -> str:
    """The 3-shot chain-of-thought prompt, up to `A:` (RuleRAG-CoK shows the rules)."""
    blocks = []
    for demo in demos:
        head = f"Rules: {demo.rule}\n" if with_rules else ""
        blocks.append(f"{head}Q: {demo.query}\nA: {rationale(demo, with_rules)}")
    head = f"Rules: {' '.join(rules)}\n" if with_rules and rules else ""
    blocks.append(f"{head}Q: {query}\nA:")
    return "Answer the question step by step, as in the examples.\n\n" + "\n\n".join(blocks)


def question_prompt(demos: Sequence[Demo], query: str, sentence: str) -> str:
    """A verifying question (VE) / a query (CoK) for one rationale sentence."""
    shots = [
        f"Overall Question: {d.query}\nAnswer: {_sentence(d.fact)}\nQuestion: {d.query}"
        for d in demos[:2]
    ]
    shots.append(f"Overall Question: {query}\nAnswer: {sentence}\nQuestion:")
    return "Write a question that asks for the fact the answer states.\n\n" + "\n\n".join(shots)


def answer_prompt(demos: Sequence[Demo], documents: Sequence[str], question: str) -> str:
    """VE: answer a verifying question in one sentence from the retrieved documents."""
    shots = [f"{d.document}\nQ: {d.query}\nA: {_sentence(d.fact)}" for d in demos]
    shots.append(f"{' '.join(documents)}\nQ: {question}\nA:")
    return "\n\n".join(shots)


def edit_prompt(
    demos: Sequence[Demo], sentence: str, documents: Sequence[str], rules: Sequence[str] = ()
) -> str:
    """CoK: correct a rationale sentence with the retrieved knowledge (and the rules)."""
    shots = []
    for i, demo in enumerate(demos[:2]):
        wrong = demos[(i + 1) % len(demos)].answer if len(demos) > 1 else "nothing"
        wrong_fact = demo.fact[: len(demo.fact) - len(demo.answer)] + wrong
        shots.append(
            f"Sentence: {_sentence(wrong_fact)}\nKnowledge: {demo.document}\n"
            f"Edited sentence: {_sentence(demo.fact)}"
        )
    knowledge = " ".join([*documents, *(f"Rule: {r}" for r in rules)])
    shots.append(f"Sentence: {sentence}\nKnowledge: {knowledge}\nEdited sentence:")
    intro = "The sentence may contain factual errors. Correct it with the knowledge given."
    return intro + "\n\n" + "\n\n".join(shots)


def answer_of(text: str) -> str | None:
    """The answer a rationale states after "The answer is", or None."""
    at = text.find(ANSWER_CUE)
    if at < 0:
        return None
    answer = text[at + len(ANSWER_CUE) :].strip().split("\n")[0]
    answer = answer.split(". ")[0].strip().rstrip(".").strip()
    return answer or None


def split_rationale(text: str) -> list[str]:
    """The rationale's sentences at "First, / Second, / ...", before "The answer is"."""
    body = text.split(ANSWER_CUE)[0]
    parts = [p.strip() for p in _MARKER_RE.split(body) if p.strip()]
    return parts[: len(MARKERS)] or ([body.strip()] if body.strip() else [])


def vote(texts: Sequence[str], voters: int | None = None) -> tuple[str | None, float, str]:
    """Majority answer, its share among the voting samples and the first sample giving it.
    Only samples that state an answer vote (the first `voters` of them when given)."""
    stated = [(answer_of(t), t) for t in texts]
    stated = [(a, t) for a, t in stated if a]
    if voters is not None:
        stated = stated[:voters]
    if not stated:
        return None, 0.0, texts[0] if texts else ""
    counts = Counter(a.lower() for a, _ in stated)
    top, count = counts.most_common(1)[0]
    first = next((a, t) for a, t in stated if a.lower() == top)
    return first[0], count / len(stated), first[1]


class ChainGenerator:
    """A grid row's generator for `method` (ve / cok), optionally rule-guided (RuleRAG-CoK):
    `generate_samples` answers each sample through the method's chain (run_row calls it)."""

    def __init__(
        self,
        llm: ChainLLM,
        searcher: Searcher,
        corpus: Mapping[str, str],
        demos: Sequence[Demo],
        method: str,
        rules: bool,
        settings: ChainSettings | None = None,
        name: str = "chain",
        rule_query: str = "rule",
    ) -> None:
        if method not in CHAIN_METHODS:
            raise ValueError(f"chain method must be one of {CHAIN_METHODS}, not {method!r}")
        self.llm, self.searcher, self.corpus = llm, searcher, corpus
        self.demos, self.method, self.rules = list(demos), method, rules
        self.settings = settings or ChainSettings()
        self.rule_query = rule_query  # a rule's form in a search text (retrieve.rule_query)
        self.name = f"{method}{'+rules' if rules else ''}:{name}"
        self.traces: list[dict[str, Any]] = []

    def render(self, _format: Any, _kind: str, sample: Sample) -> str:
        """The first prompt of the chain (what predictions.jsonl records)."""
        return cot_prompt(self.demos, sample.query, sample.rules, self.rules)

    def generate_samples(self, samples: Sequence[Sample], prompts: Sequence[str]) -> list[str]:
        s = self.settings
        n = s.ve_samples if self.method == "ve" else s.cok_samples
        voters = None if self.method == "ve" else s.cok_voters
        threshold = s.ve_threshold if self.method == "ve" else s.cok_threshold
        drafts = self.llm(list(prompts), n, s.temperature, s.max_new_tokens)
        answers: list[str] = []
        pending: list[int] = []
        self.traces = []
        for i, texts in enumerate(drafts):
            answer, share, kept = vote(texts, voters)
            self.traces.append({"answer": answer, "consistency": share, "rationale": kept})
            answers.append(f"{ANSWER_CUE} {answer}." if answer else "")
            if share < threshold:
                pending.append(i)
        if pending:
            correct = self._verify_and_edit if self.method == "ve" else self._chain_of_knowledge
            for i, text in zip(
                pending, correct([samples[i] for i in pending], pending), strict=True
            ):
                answers[i] = text
        return answers

    # -- the corrections ----------------------------------------------------------------------

    def _greedy(self, prompts: Sequence[str]) -> list[str]:
        if not prompts:
            return []
        out = self.llm(list(prompts), 1, 0.0, self.settings.step_max_new_tokens)
        return [texts[0].strip().split("\n")[0].strip() for texts in out]

    def _search(self, texts: Sequence[str], rules: Sequence[Sequence[str]]) -> list[list[str]]:
        """Top `documents` corpus texts per search text; with rules, the best of `q ∘ r` over
        the query's rules (the rule-guided search of RuleRAG)."""
        k = self.settings.documents
        plan: list[tuple[int, str]] = []
        for i, (text, own) in enumerate(zip(texts, rules, strict=True)):
            if self.rules and own:
                plan += [(i, compose(text, rule_query_text(r, self.rule_query))) for r in own]
            else:
                plan.append((i, text))
        rows, scores = self.searcher.search([t for _, t in plan], k)
        ids = np.asarray(self.searcher.corpus_ids, dtype=object)
        best: list[dict[str, float]] = [{} for _ in texts]
        for (i, _), row, score in zip(plan, rows, scores, strict=True):
            for r, sc in zip(row, score, strict=True):
                if r >= 0:
                    doc = str(ids[r])
                    best[i][doc] = max(best[i].get(doc, -np.inf), float(sc))
        chosen = [sorted(b, key=lambda d: (-b[d], d))[:k] for b in best]
        return [[self.corpus[d] for d in docs if d in self.corpus] for docs in chosen]

    def _final(self, samples: Sequence[Sample], rationales: Sequence[str]) -> list[str]:
        prompts = [
            f"{cot_prompt(self.demos, s.query, s.rules, self.rules)} {r} {ANSWER_CUE}"
            for s, r in zip(samples, rationales, strict=True)
        ]
        answers = []
        for text in self._greedy(prompts):
            text = text.strip()
            text = text[len(ANSWER_CUE) :] if text.startswith(ANSWER_CUE) else text  # repeated
            answer = answer_of(f"{ANSWER_CUE} {text}")
            answers.append(f"{ANSWER_CUE} {answer}." if answer else "")
        return answers

    def _verify_and_edit(self, samples: Sequence[Sample], index: Sequence[int]) -> list[str]:
        """Each rationale sentence verified on its own: question, search, answer, replace."""
        jobs = []
        for sample, i in zip(samples, index, strict=True):
            for j, sentence in enumerate(split_rationale(self.traces[i]["rationale"])):
                jobs.append((sample, i, j, sentence))
        questions = self._greedy([question_prompt(self.demos, s.query, x) for s, _, _, x in jobs])
        found = self._search(questions, [s.rules for s, _, _, _ in jobs])
        edits = self._greedy(
            [answer_prompt(self.demos, docs, q) for docs, q in zip(found, questions, strict=True)]
        )
        edited: dict[int, list[str]] = {i: [] for i in index}
        for (_, i, j, _), text in zip(jobs, edits, strict=True):
            edited[i].append(f"{MARKERS[min(j, len(MARKERS) - 1)]}{_sentence(text)}")
        for (_, i, _, _), q, docs in zip(jobs, questions, found, strict=True):
            self.traces[i].setdefault("steps", []).append({"question": q, "documents": docs})
        rationales = [" ".join(edited[i]) for i in index]
        for i, text in zip(index, rationales, strict=True):
            self.traces[i]["edited"] = text
        return self._final(samples, rationales)

    def _chain_of_knowledge(self, samples: Sequence[Sample], index: Sequence[int]) -> list[str]:
        """Rationale 1 corrected first; rationale 2 regenerated after it, then corrected."""
        rules = [s.rules for s in samples]
        first = []
        for i in index:
            parts = split_rationale(self.traces[i]["rationale"])
            first.append(parts[0] if parts else "")
        e1 = self._correct(samples, first, rules)
        prompts = [
            f"{cot_prompt(self.demos, s.query, s.rules, self.rules)} First, {e} Second,"
            for s, e in zip(samples, e1, strict=True)
        ]
        second = [t.split(ANSWER_CUE)[0].strip() for t in self._greedy(prompts)]
        e2 = self._correct(samples, second, rules)
        rationales = [f"First, {a} Second, {b}" for a, b in zip(e1, e2, strict=True)]
        for i, text in zip(index, rationales, strict=True):
            self.traces[i]["edited"] = text
        return self._final(samples, rationales)

    def _correct(
        self, samples: Sequence[Sample], sentences: Sequence[str], rules: Sequence[Sequence[str]]
    ) -> list[str]:
        """CoK's step: a query for the sentence, knowledge from the corpus, an explicit edit."""
        queries = self._greedy(
            [
                question_prompt(self.demos, s.query, x)
                for s, x in zip(samples, sentences, strict=True)
            ]
        )
        found = self._search(queries, rules)
        shown = [r if self.rules else () for r in rules]
        edits = self._greedy(
            [
                edit_prompt(self.demos, x, docs, own)
                for x, docs, own in zip(sentences, found, shown, strict=True)
            ]
        )
        return [_sentence(e) if e else _sentence(x) for e, x in zip(edits, sentences, strict=True)]


def local_llm(generator: Any) -> ChainLLM:
    """A `LocalGenerator` as the chain's LLM (its `sample`)."""

    def call(prompts: Sequence[str], n: int, temperature: float, max_new_tokens: int):
        return generator.sample(prompts, n, temperature, max_new_tokens)

    return call


def api_llm(generator: Any) -> ChainLLM:
    """An `ApiGenerator` (no fixed shots: the chain's prompts carry their own) as the chain's
    LLM: `n` requests per prompt at the temperature asked."""

    def call(prompts: Sequence[str], n: int, temperature: float, max_new_tokens: int):
        saved = generator.temperature, generator.max_tokens
        generator.temperature, generator.max_tokens = temperature, max_new_tokens
        try:
            flat = generator.generate([p for p in prompts for _ in range(n)])
        finally:
            generator.temperature, generator.max_tokens = saved
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]

    return call


def chain_factory(
    index: Any, retrieve: Any = None, model_cache: Any = None
) -> Callable[..., ChainGenerator]:
    """run_row's generator factory for chain rows: the row's model (base or API) as the LLM,
    the `generation.retriever` index over the corpus as the knowledge source (the base encoder
    or BM25, as Standard RAG searches), demonstrations from the dataset's F_R items.
    A rule takes `retrieve.rule_query`'s form in a search text (`retrieve`: the
    `RetrieveSettings`; None: the default form, `rule`)."""
    rule_query = "rule" if retrieve is None else retrieve.rule_query

    def build(base: Any, grid: Any, settings: Any, retrieval: str | None) -> ChainGenerator:
        from rulerag.generation.generators import make_generator
        from rulerag.generation.samples import load_corpus
        from rulerag.io import read_jsonl
        from rulerag.layout import DataLayout
        from rulerag.retrieval.configs import parse_config
        from rulerag.retrieval.runs import open_searcher

        base = Path(base)
        layout = DataLayout(base)
        model = make_generator(base, replace(grid, method=None), settings, None, cached=False)
        if grid.generator == "api":
            model.examples = []  # the chain's prompts carry their own demonstrations
            llm = api_llm(model)
        else:
            llm = local_llm(model)
        config = parse_config(f"{settings.retriever}-standard")
        searcher = open_searcher(config, layout, index, model_cache)
        corpus = load_corpus(layout.corpus)  # read once: every step searches it
        items = read_jsonl(layout.queries("f_r"))
        demos = demos_from_items(items, corpus, settings.chains.shots, settings.seed)
        if not demos:
            raise ValueError(f"{base}: no F_R item with an oracle document for the demonstrations")
        return ChainGenerator(
            llm,
            searcher,
            corpus,
            demos,
            method=str(grid.method),
            rules=grid.prompt == "rule",
            settings=settings.chains,
            name=getattr(model, "name", "model"),
            rule_query=rule_query,
        )

    return build
