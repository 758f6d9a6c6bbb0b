"""The generator's prompts, one place for training and inference.

Two styles (`generation.prompt_style`):

* `paper` (default): RuleRAG's own instruction prompt, word for word (RuleRAG arXiv version,
  Appendix A.9: Table 8 is the RGFT instruction prompt, Table 10 the 3-shot prompt for closed
  models). Five parts, one per line:

      # Instruct: For the query in the form of “Time {time} what does {subject} {relation} ?”,
        we provide a collection of text consisting of multiple documents in the form of
        “Time {time} {subject} {relation} {object}.” Your response should directly generate
        the missing {object}.
      # Retrieved documents: Documents related to the Query. Time 2014-06-23 ... Afghanistan.
      # Rules: Use the following Two rules to answer the given Query. Rule One: [Entity1,
        Abduct, hijack, or take hostage, Entity2] leads to [Entity1, Make a visit, Entity2].
        Rule Two: ...
      # Query: Time 2014-12-01 what does Abdullah Abdullah Make a visit ?
      # Answer: Afghanistan.

  The instruction's query and document forms are not written here: they are the benchmark's
  own text forms (`rulerag.kg.text`) rendered with placeholders, so a static KG gets
  `what does {subject} {relation} ?` / `{subject} {relation} {object}.` (FB15k-237, NELL-995,
  users' static KGs) by the same derivation. Rules are counted with capitalised number words as
  the paper writes them ("Two rules", "Rule One:"; one rule reads "One rule"). Answers end with
  a full stop, as in the paper's examples (`target_text`); answer extraction drops it.
* `legacy`: the project's earlier format (an instruction sentence of our own, numbered
  documents, one rule per line, `Query:` / `Answer:`), kept so older runs can be reproduced.

Three kinds, one per family of rows in the paper's Table 2:

* `rule`  - all five parts (RuleRAG-ICL's RG-generator, RuleRAG-FT's RGFT-generator);
* `plain` - without the Rules part (Standard RAG, SSFT generators, "RG-retriever + generator":
            the paper's SSFT instruction "consists only of the queries and retrieved documents
            without rules", Sec. 4.1);
* `query` - the query alone and the answer cue (Standard Prompting; the paper prints no prompt
            for it, so no instruction about documents that are not there).

`PromptFormat.render` is the only place prompt text is made; training (`training.py`) and
inference (`local.py`, `api.py`) tokenise its output through `prompt_token_ids`, so a
fine-tuned model sees at test time exactly the token sequence it was trained on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from rulerag.kg.text import document_text, query_text

__all__ = [
    "PLAIN_INSTRUCTION",
    "PROMPT_KINDS",
    "PROMPT_STYLES",
    "PromptStyle",
    "RULE_INSTRUCTION",
    "PromptFormat",
    "PromptKind",
    "Sample",
    "chat_messages",
    "instruction",
    "number_word",
    "prompt_token_ids",
    "render_prompt",
    "target_text",
    "use_chat_template",
]

PromptKind = Literal["rule", "plain", "query"]
PromptStyle = Literal["paper", "legacy"]
PROMPT_KINDS: tuple[str, ...] = get_args(PromptKind)
PROMPT_STYLES: tuple[str, ...] = get_args(PromptStyle)

#: Table 8's instruction with the query and document forms left open (see `instruction`).
PAPER_INSTRUCTION = (
    "For the query in the form of “{query}”, we provide a collection of text consisting of "
    "multiple documents in the form of “{document}” Your response should directly generate "
    "the missing {{object}}."
)
#: Table 8's section openers.
PAPER_DOCUMENTS = "Documents related to the Query."
PAPER_RULES = "Use the following {count} {noun} to answer the given Query."
#: Table 10's 3-shot frame for closed models.
PAPER_FEW_SHOT = "Answer the Final Query by referring to the {count} cases below."

#: The `legacy` style's instructions (the project's own wording before the paper's was used).
RULE_INSTRUCTION = (
    "Instruct: Answer the question based on the retrieved documents and the rules. "
    "The rules are logical patterns that can help you infer the answer: when the documents "
    "contain a fact that matches the left side of a rule, the fact on the right side of the "
    "rule is likely to hold. Reply with the answer entity only."
)
PLAIN_INSTRUCTION = (
    "Instruct: Answer the question based on the retrieved documents. "
    "Reply with the answer entity only."
)

_NUMBER_WORDS = (
    "Zero", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten",
    "Eleven", "Twelve", "Thirteen", "Fourteen", "Fifteen", "Sixteen", "Seventeen", "Eighteen",
    "Nineteen", "Twenty",
)  # fmt: skip


def number_word(n: int) -> str:
    """`Two` for 2, as the paper counts rules and cases; digits past twenty."""
    return _NUMBER_WORDS[n] if 0 <= n < len(_NUMBER_WORDS) else str(n)


def instruction(temporal: bool) -> str:
    """Table 8's instruction, its forms derived from the benchmark's text forms."""
    time = "{time}" if temporal else None
    return PAPER_INSTRUCTION.format(
        query=query_text("{subject}", "{relation}", time),
        document=document_text("{subject}", "{relation}", "{object}", time),
    )


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _sentence(text: Any) -> str:
    """One line ending in a full stop (rule texts have none; documents already do)."""
    text = _one_line(text)
    return text if text.endswith(".") else f"{text}."


@dataclass(frozen=True)
class Sample:
    """One query as the generator sees it: what goes into the prompt, and the gold answers."""

    qid: str
    query: str
    answers: tuple[str, ...] = ()
    documents: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    temporal: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class PromptFormat:
    """How prompts and answers are written: the style and whether the KG is temporal (which
    decides the paper instruction's query and document forms)."""

    style: str = "paper"
    temporal: bool = True

    def __post_init__(self) -> None:
        if self.style not in PROMPT_STYLES:
            raise ValueError(f"prompt style must be one of {PROMPT_STYLES}, not {self.style!r}")

    def render(
        self, kind: str, query: str, documents: Sequence[str] = (), rules: Sequence[str] = ()
    ) -> str:
        """The prompt text of one query, up to the answer cue (see the module docstring).

        An empty documents or rules list still prints its part, so every prompt of one kind
        has the same skeleton and a model never sees a layout it was not trained on.
        """
        if kind not in PROMPT_KINDS:
            raise ValueError(f"prompt kind must be one of {PROMPT_KINDS}, not {kind!r}")
        if self.style == "legacy":
            return _legacy(kind, query, documents, rules)
        query = _one_line(query)
        if kind == "query":
            return f"# Query: {query}\n# Answer:"
        lines = [f"# Instruct: {instruction(self.temporal)}"]
        lines.append(
            " ".join(["# Retrieved documents:", PAPER_DOCUMENTS, *map(_one_line, documents)])
        )
        if kind == "rule":
            noun = "rule" if len(rules) == 1 else "rules"
            opener = PAPER_RULES.format(count=number_word(len(rules)), noun=noun)
            numbered = [f"Rule {number_word(i)}: {_sentence(r)}" for i, r in enumerate(rules, 1)]
            lines.append(" ".join(["# Rules:", opener, *numbered]))
        lines += [f"# Query: {query}", "# Answer:"]
        return "\n".join(lines)

    def target(self, answer: str) -> str:
        """What the generator is trained to produce after the prompt: the answer, with the
        paper's closing full stop in the `paper` style (`# Answer: Afghanistan.`).

        Without a chat template the answer follows the cue after one space; with one it is the
        assistant turn's content. The end-of-sequence token is added at the token level
        (`training.encode_example`), not as text.
        """
        text = _one_line(answer)
        return _sentence(text) if self.style == "paper" and text else text

    def few_shot_messages(
        self, examples: Sequence[tuple[str, str]], prompt: str, system: str | None = None
    ) -> list[dict[str, str]]:
        """The k-shot prompt for closed models (fixed F_G examples instead of fine-tuning).

        `paper`: Table 10, one user message: "Answer the Final Query by referring to the three
        cases below." then `Case 1:` ... with each example's prompt and answer, then
        `Final Query:` and the query's prompt. `legacy`: each example as a user turn answered
        by an assistant turn, then the query's prompt.
        """
        messages: list[dict[str, str]] = []
        if system:
            messages.append({"role": "system", "content": system})
        if self.style == "paper":
            if not examples:
                return [*messages, {"role": "user", "content": prompt}]
            parts = [PAPER_FEW_SHOT.format(count=number_word(len(examples)).lower())]
            for i, (example_prompt, example_answer) in enumerate(examples, 1):
                parts += [f"Case {i}:", f"{example_prompt} {self.target(example_answer)}"]
            parts += ["Final Query:", prompt]
            return [*messages, {"role": "user", "content": "\n".join(parts)}]
        for example_prompt, example_answer in examples:
            messages.append({"role": "user", "content": example_prompt})
            messages.append({"role": "assistant", "content": self.target(example_answer)})
        messages.append({"role": "user", "content": prompt})
        return messages

    def render_sample(self, kind: str, sample: Sample) -> str:
        return self.render(kind, sample.query, sample.documents, sample.rules)


def _legacy(kind: str, query: str, documents: Sequence[str], rules: Sequence[str]) -> str:
    """The `legacy` style: numbered documents, one rule per line."""
    query = _one_line(query)
    if kind == "query":
        return f"Query: {query}\nAnswer:"
    lines = [RULE_INSTRUCTION if kind == "rule" else PLAIN_INSTRUCTION, "Retrieved documents:"]
    lines += [f"{i}. {_one_line(doc)}" for i, doc in enumerate(documents, start=1)]
    if kind == "rule":
        lines.append("Rules:")
        lines += [_one_line(rule) for rule in rules]
    lines += [f"Query: {query}", "Answer:"]
    return "\n".join(lines)


def render_prompt(
    kind: str,
    query: str,
    documents: Sequence[str] = (),
    rules: Sequence[str] = (),
    *,
    style: str = "paper",
    temporal: bool = True,
) -> str:
    """`PromptFormat(style, temporal).render(...)` in one call."""
    return PromptFormat(style, temporal).render(kind, query, documents, rules)


def target_text(answer: str, style: str = "paper") -> str:
    """`PromptFormat(style).target(answer)` in one call."""
    return PromptFormat(style).target(answer)


def use_chat_template(tokenizer: Any, setting: bool | str | None) -> bool:
    """Resolve the `chat_template` knob: True/False, or "auto" (use it when the tokenizer has
    one, as instruction-tuned models like SmolLM2-Instruct do)."""
    if setting in (None, "auto"):
        return bool(getattr(tokenizer, "chat_template", None))
    if isinstance(setting, str):
        return setting.strip().lower() in {"1", "true", "yes", "on"}
    return bool(setting)


def chat_messages(prompt: str) -> list[dict[str, str]]:
    """The prompt as a single user turn (how it is sent through a chat template or an API)."""
    return [{"role": "user", "content": prompt}]


def prompt_token_ids(tokenizer: Any, prompt: str, chat_template: bool) -> list[int]:
    """Token ids of a rendered prompt, up to where the answer starts: the one tokenisation used
    by both training and generation.

    With a chat template the prompt is the user turn and the assistant header is appended
    (`add_generation_prompt`); the template supplies any special tokens itself. Without one the
    tokenizer's own special tokens (e.g. Llama's BOS) are added, as `generate` would see them.
    """
    if chat_template:
        text = tokenizer.apply_chat_template(
            chat_messages(prompt), tokenize=False, add_generation_prompt=True
        )
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
