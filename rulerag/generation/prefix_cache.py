"""A prompt prefix shared by a batch of prompts, run through the model once.

The paper's prompts open with the same instruction (about 75 of SmolLM2's ~260 prompt tokens
on ICEWS14; most of a few-shot prompt), so greedy generation and answer ranking start every
prompt from a copy of that prefix's key/value cache instead of recomputing it. The prompt's
own tokens keep the positions they would have had, so outputs are those of the full prompt up
to floating-point rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MIN_SHARED_TOKENS", "SharedPrefix", "shared_prefix", "tree_attention"]

#: below this many common tokens the copies cost more than they save
MIN_SHARED_TOKENS = 8


@dataclass
class SharedPrefix:
    """The token ids every prompt starts with, and their key/value cache (batch of one):
    copy it (`copy.deepcopy`) before a forward pass extends it."""

    ids: tuple[int, ...]
    cache: Any


def tree_attention(model: Any) -> bool:
    """Whether the model takes attention masks beyond left padding as they are: transformers'
    SDPA and eager attention do (a custom 4-D mask; a 2-D mask with gaps); other kernels
    (flash attention) get the plain path."""
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None) in ("sdpa", "eager")


def shared_prefix(
    model: Any, prompt_ids: Sequence[Sequence[int]], min_tokens: int = MIN_SHARED_TOKENS
) -> SharedPrefix | None:
    """The longest token prefix of all `prompt_ids` (each prompt keeps at least one token of
    its own) with its cache; None when shorter than `min_tokens` or without tree attention."""
    import torch

    if not prompt_ids or not tree_attention(model):
        return None
    common = list(prompt_ids[0])
    for ids in prompt_ids[1:]:
        n = 0
        for a, b in zip(common, ids, strict=False):
            if a != b:
                break
            n += 1
        common = common[:n]
    common = common[: min(len(ids) for ids in prompt_ids) - 1]
    if len(common) < max(1, min_tokens):
        return None
    device = next(model.parameters()).device
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([common], device=device), use_cache=True,
                    logits_to_keep=1)  # fmt: skip
    return SharedPrefix(tuple(common), out.past_key_values)
