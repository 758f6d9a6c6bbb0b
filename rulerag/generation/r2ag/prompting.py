"""Retrieval-aware prompting (paper §3.4, App. B): one placeholder token before each document,
whose input embedding is replaced by that document's projected R²-Former vector e^R_i.

The prompt text carries the placeholders (`PLACEHOLDER`, a special token added to the
tokenizer); `inject` takes the LLM's ordinary token embeddings of the prompt and puts the i-th
document's vector at the i-th placeholder of each row, leaving every other position as the
embedding layer made it. The LLM then runs on `inputs_embeds`, so it stays frozen and unaware
of the swap; gradients reach the R²-Former through the replaced positions only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["PLACEHOLDER", "add_placeholder", "inject", "mark_documents"]

#: the retrieval-information placeholder ("<R>" in the paper's Figure 2 and App. B)
PLACEHOLDER = "<R>"


def add_placeholder(tokenizer: Any, model: Any | None = None) -> int:
    """Register `PLACEHOLDER` as one special token (resizing `model`'s embeddings if the
    vocabulary grew; the new row is never read: `inject` overwrites it) and return its id."""
    if PLACEHOLDER not in tokenizer.get_vocab():
        tokenizer.add_special_tokens({"additional_special_tokens": [PLACEHOLDER]})
        if model is not None and len(tokenizer) > model.get_input_embeddings().num_embeddings:
            model.resize_token_embeddings(len(tokenizer))
    return int(tokenizer.convert_tokens_to_ids(PLACEHOLDER))


def mark_documents(documents: Sequence[str]) -> list[str]:
    """Each document preceded by its rank and placeholder, `[i]similarity: <R> <document>`
    (the paper's Table 5), ready for any prompt that lists documents: RuleRAG's (rules
    included) or the plain one (`rulerag.generation.prompts.render_prompt`)."""
    return [f"[{i}]similarity: {PLACEHOLDER} {doc}" for i, doc in enumerate(documents, 1)]


def inject(
    embeddings: torch.Tensor,
    input_ids: torch.Tensor,
    placeholder_id: int,
    vectors: torch.Tensor,
    doc_mask: torch.Tensor | None = None,
    first_doc: torch.Tensor | None = None,
) -> torch.Tensor:
    """`embeddings` (b, T, h) with the i-th placeholder of each row replaced by `vectors[b, i]`
    (b, k, h); a row must hold exactly as many placeholders as it has documents (`doc_mask`,
    default all k), else the prompt and the list disagree and this raises.

    `first_doc` (b,): the rank of the document each row's first placeholder stands for, when a
    prompt cut from the left (`max_prompt_tokens`) lost its first documents; the row then holds
    placeholders for documents first_doc..k-1 only."""
    slots = input_ids == placeholder_id
    wanted = (
        torch.full((vectors.shape[0],), vectors.shape[1], device=input_ids.device)
        if doc_mask is None
        else doc_mask.sum(dim=1)
    )
    if first_doc is not None:
        wanted = wanted - first_doc.to(wanted.device)
    found = slots.sum(dim=1)
    if not torch.equal(found.to(wanted.dtype), wanted):
        raise ValueError(
            f"placeholders per prompt {found.tolist()} do not match documents {wanted.tolist()}"
        )
    order = torch.cumsum(slots.long(), dim=1) - 1  # which document a placeholder stands for
    if first_doc is not None:
        order = order + first_doc.to(order.device).long().unsqueeze(1)
    gathered = torch.gather(
        vectors.to(embeddings.dtype),
        1,
        order.clamp(min=0).unsqueeze(-1).expand(-1, -1, embeddings.shape[-1]),
    )
    return torch.where(slots.unsqueeze(-1), gathered, embeddings)
