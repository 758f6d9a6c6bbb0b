"""A generator with an R²-Former in front (paper §3.5): loss = LM loss on the answer tokens +
QDM loss (BCE of the relevance head against the documents' labels).

The LLM is frozen by default (`freeze_llm`): only the R²-Former learns; the paper's
"R²AG + fine-tuning" variant leaves LoRA adapters on the LLM trainable (wrap the LLM with peft
before passing it; frozen base weights stay frozen either way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rulerag.generation.r2ag.former import R2Former, qdm_loss
from rulerag.generation.r2ag.prompting import inject

__all__ = ["R2AGModel", "R2AGOutput", "freeze"]


@dataclass
class R2AGOutput:
    loss: torch.Tensor
    lm_loss: torch.Tensor
    qdm_loss: torch.Tensor
    logits: torch.Tensor
    relevance_logits: torch.Tensor


def freeze(module: nn.Module) -> None:
    """No parameter of `module` takes a gradient (LoRA parameters added later do)."""
    for parameter in module.parameters():
        parameter.requires_grad_(False)


class R2AGModel(nn.Module):
    """`llm` (a causal LM), `former` and the placeholder token's id."""

    def __init__(
        self,
        llm: Any,
        former: R2Former,
        placeholder_id: int,
        *,
        qdm_weight: float = 1.0,
        freeze_llm: bool = True,
    ) -> None:
        super().__init__()
        self.llm, self.former = llm, former
        self.placeholder_id, self.qdm_weight = placeholder_id, qdm_weight
        if freeze_llm:
            freeze(llm)

    def train(self, mode: bool = True) -> R2AGModel:
        """Training mode for what learns; a frozen LLM stays in eval mode (no dropout), so it
        computes exactly what it computes at inference."""
        super().train(mode)
        if mode and not any(p.requires_grad for p in self.llm.parameters()):
            self.llm.eval()
        return self

    def input_embeddings(
        self,
        input_ids: torch.Tensor,
        features: torch.Tensor,
        doc_mask: torch.Tensor | None = None,
        first_doc: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(the prompt's input embeddings with E^R at the placeholders, the QDM logits)."""
        out = self.former(features, doc_mask)
        embeddings = self.llm.get_input_embeddings()(input_ids)
        injected = inject(
            embeddings, input_ids, self.placeholder_id, out.projected, doc_mask, first_doc
        )
        return injected, out.relevance_logits

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        features: torch.Tensor,
        doc_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        doc_labels: torch.Tensor | None = None,
        first_doc: torch.Tensor | None = None,
    ) -> R2AGOutput:
        embeddings, relevance = self.input_embeddings(input_ids, features, doc_mask, first_doc)
        out = self.llm(inputs_embeds=embeddings, attention_mask=attention_mask, labels=labels)
        zero = embeddings.new_zeros(())
        lm = out.loss if labels is not None else zero
        qdm = qdm_loss(relevance, doc_labels, doc_mask) if doc_labels is not None else zero
        return R2AGOutput(lm + self.qdm_weight * qdm, lm, qdm, out.logits, relevance)

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        features: torch.Tensor,
        doc_mask: torch.Tensor | None = None,
        first_doc: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """The LLM's continuation (new tokens only) of prompts with retrieval embeddings."""
        embeddings, _ = self.input_embeddings(input_ids, features, doc_mask, first_doc)
        return self.llm.generate(inputs_embeds=embeddings, attention_mask=attention_mask, **kwargs)
