"""The generator's prompts, one function for training and inference.

RuleRAG's RG-generator reads an instruction in four parts, Instruct / Retrieved documents /
Rules / Query, and then `Answer:` (the paper, Sec. 3 and its prompt table in the appendix):

    Instruct: Answer the question based on the retrieved documents and the rules. The rules are
    logical patterns that can help you infer the answer: when the documents contain a fact that
    matches the left side of a rule, the fact on the right side of the rule is likely to hold.
    Reply with the answer entity only.
    Retrieved documents:
    1. Time 2014-06-23 Abdullah Abdullah Make a visit Afghanistan.
    2. ...
    Rules:
    [Entity1, Make a visit, Entity2] leads to [Entity1, Consult, Entity2]
    Query: Time 2014-12-01 what does Abdullah Abdullah Make a visit ?
    Answer:

The exact instruction sentence of the paper could not be retrieved offline; the wording above
keeps the paper's structure and intent (its first sentence and section names as the paper and
the design notes give them) and is written down here once, so a change is one edit.

Three kinds, one per family of rows in the paper's Table 2:

* `rule`   - the RuleRAG prompt above (RuleRAG-ICL's RG-generator, RuleRAG-FT's RGFT-generator);
* `plain`  - the same without the Rules part and its sentence (Standard RAG, SSFT generators,
             "RG-retriever + generator");
* `query`  - the query alone with `Answer:` (Standard Prompting: no retrieval, no rules).

`render_prompt` is the only place prompt text is made; training (`training.py`) and inference
(`local.py`, `api.py`) tokenise its output through `prompt_token_ids`, so a fine-tuned model
sees at test time exactly the token sequence it was trained on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "PLAIN_INSTRUCTION",
    "PROMPT_KINDS",
    "RULE_INSTRUCTION",
    "PromptKind",
    "Sample",
    "chat_messages",
    "few_shot_messages",
    "prompt_token_ids",
    "render_prompt",
    "target_text",
    "use_chat_template",
]

PromptKind = Literal["rule", "plain", "query"]
PROMPT_KINDS: tuple[str, ...] = ("rule", "plain", "query")

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


@dataclass(frozen=True)
class Sample:
    """One query as the generator sees it: what goes into the prompt, and the gold answers."""

    qid: str
    query: str
    answers: tuple[str, ...] = ()
    documents: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)


def render_prompt(
    kind: str,
    query: str,
    documents: Sequence[str] = (),
    rules: Sequence[str] = (),
) -> str:
    """The prompt text of one query (see the module docstring for the three kinds).

    Documents are numbered from 1 in the order given (best first); rules go one per line. An
    empty documents or rules list still prints its header, so every prompt of one kind has the
    same skeleton and a model never sees a layout it was not trained on.
    """
    if kind not in PROMPT_KINDS:
        raise ValueError(f"prompt kind must be one of {PROMPT_KINDS}, not {kind!r}")
    query = " ".join(str(query).split())
    if kind == "query":
        return f"Query: {query}\nAnswer:"
    lines = [RULE_INSTRUCTION if kind == "rule" else PLAIN_INSTRUCTION, "Retrieved documents:"]
    lines += [f"{i}. {' '.join(str(doc).split())}" for i, doc in enumerate(documents, start=1)]
    if kind == "rule":
        lines.append("Rules:")
        lines += [" ".join(str(rule).split()) for rule in rules]
    lines += [f"Query: {query}", "Answer:"]
    return "\n".join(lines)


def target_text(answer: str) -> str:
    """What the generator is trained to produce after the prompt: one answer, nothing else.

    Without a chat template the prompt ends with `Answer:` and the answer follows after one
    space; with a chat template the answer is the assistant turn's content. The end-of-sequence
    token is added at the token level (`training.encode_example`), not as text.
    """
    return " ".join(str(answer).split())


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


def few_shot_messages(
    examples: Sequence[tuple[str, str]], prompt: str, system: str | None = None
) -> list[dict[str, str]]:
    """The paper's k-shot prompt for closed models as chat turns: each fixed F_G example is a
    user turn (its rendered prompt) answered by an assistant turn (its gold answer), then the
    query's own prompt. Same `render_prompt` text as everywhere else."""
    messages: list[dict[str, str]] = []
    if system:
        messages.append({"role": "system", "content": system})
    for example_prompt, example_answer in examples:
        messages.append({"role": "user", "content": example_prompt})
        messages.append({"role": "assistant", "content": target_text(example_answer)})
    messages.append({"role": "user", "content": prompt})
    return messages


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
