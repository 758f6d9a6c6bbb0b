"""From generator samples to R²AG's model inputs: marked prompts, token ids, features, labels.

Each sample's prompt is the grid row's own (`PromptFormat.render_sample`, RuleRAG's prompt with
rules or the plain one) with every document marked `[i]similarity: <R> ...`
(`prompting.mark_documents`); it is tokenised exactly as the other generators tokenise
(`training.encode_example` for training, with the answer; `prompt_token_ids` for generation),
cut from the left at `max_prompt_tokens`. A prompt cut inside its documents keeps the
placeholders of its last documents only: `first_doc` says which document the first surviving
placeholder stands for, and the R²-Former still reads the whole list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rulerag.generation.prompts import PromptFormat, Sample
from rulerag.generation.r2ag.labels import document_labels
from rulerag.generation.r2ag.prompting import mark_documents

__all__ = ["R2AGCollator", "R2AGExample", "make_example", "marked_prompt", "training_examples"]


@dataclass
class R2AGExample:
    """One query as R²AG's model reads it."""

    qid: str
    input_ids: list[int]
    labels: list[int] | None  # None at inference (no answer appended)
    features: np.ndarray  # (k, 3)
    doc_labels: np.ndarray  # (k,) QDM targets (zeros at inference when unknown)
    first_doc: int = 0


def marked_prompt(prompt_format: PromptFormat, kind: str, sample: Sample) -> str:
    """The row's prompt with each document preceded by its rank and placeholder."""
    marked = replace(sample, documents=tuple(mark_documents(sample.documents)))
    return prompt_format.render_sample(kind, marked)


def make_example(
    sample: Sample,
    prompt_ids: list[int],
    placeholder_id: int,
    features: np.ndarray,
    *,
    labels: list[int] | None = None,
    label_mode: str = "answer",
) -> R2AGExample:
    """An example from a sample, its tokenised marked prompt (with the answer when `labels`)
    and its features; checks that the prompt's placeholders match the documents."""
    k = len(sample.documents)
    if features.shape != (k, 3):
        raise ValueError(f"query {sample.qid}: features {features.shape} for {k} documents")
    found = sum(1 for t in prompt_ids if t == placeholder_id)
    if found > k:
        raise ValueError(f"query {sample.qid}: {found} placeholders for {k} documents")
    doc_labels = document_labels(
        sample.documents,
        mode=label_mode,
        answers=sample.answers,
        doc_ids=list(sample.extra.get("doc_ids", []))[:k],
    )
    return R2AGExample(
        sample.qid, list(prompt_ids), labels, features.astype(np.float32), doc_labels, k - found
    )


class R2AGCollator:
    """A batch of examples as tensors: ids padded on `side` (right for training, left for
    generation), features and labels padded to the longest list with `doc_mask` marking the
    real documents."""

    def __init__(self, pad_token_id: int, side: str = "right") -> None:
        self.pad_token_id, self.side = int(pad_token_id), side

    def __call__(self, examples: Sequence[R2AGExample]) -> dict[str, Any]:
        import torch

        width = max(len(e.input_ids) for e in examples)
        k = max(1, max(len(e.features) for e in examples))

        def pad(rows: list[list[int]], value: int) -> torch.Tensor:
            padded = [
                [*row, *[value] * (width - len(row))]
                if self.side == "right"
                else [*[value] * (width - len(row)), *row]
                for row in rows
            ]
            return torch.tensor(padded, dtype=torch.long)

        features = torch.zeros(len(examples), k, 3)
        doc_labels = torch.zeros(len(examples), k)
        doc_mask = torch.zeros(len(examples), k, dtype=torch.bool)
        for i, e in enumerate(examples):
            n = len(e.features)
            features[i, :n] = torch.from_numpy(e.features)
            doc_labels[i, :n] = torch.from_numpy(e.doc_labels)
            doc_mask[i, :n] = True
        batch = {
            "input_ids": pad([e.input_ids for e in examples], self.pad_token_id),
            "attention_mask": pad([[1] * len(e.input_ids) for e in examples], 0),
            "features": features,
            "doc_mask": doc_mask,
            "doc_labels": doc_labels,
            "first_doc": torch.tensor([e.first_doc for e in examples], dtype=torch.long),
        }
        if all(e.labels is not None for e in examples):
            batch["labels"] = pad([list(e.labels or []) for e in examples], -100)
        return batch


def training_examples(
    samples: Sequence[Sample],
    prompts: Sequence[str],
    targets: Sequence[str],
    tokenizer: Any,
    placeholder_id: int,
    features: Callable[[Sample], np.ndarray],
    *,
    chat_template: bool,
    max_prompt_tokens: int | None,
    max_answer_tokens: int | None,
    label_mode: str = "answer",
) -> list[R2AGExample]:
    """Examples with the answer appended (loss on it only, `training.encode_example`)."""
    from tqdm.auto import tqdm

    from rulerag.generation.training import encode_example

    examples = []
    rows = zip(samples, prompts, targets, strict=True)
    for sample, prompt, target in tqdm(rows, total=len(samples), desc="R²AG examples"):
        encoded = encode_example(
            tokenizer,
            prompt,
            target,
            chat_template=chat_template,
            max_prompt_tokens=max_prompt_tokens,
            max_answer_tokens=max_answer_tokens,
        )
        examples.append(
            make_example(
                sample,
                encoded["input_ids"],
                placeholder_id,
                features(sample),
                labels=encoded["labels"],
                label_mode=label_mode,
            )
        )
    return examples
