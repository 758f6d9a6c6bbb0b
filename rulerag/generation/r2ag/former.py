"""The R²-Former (paper §3.3, Eq. 2-3): list-wise retrieval features in, one vector per
document out, for the LLM (projected to its hidden size) and for query-document matching.

input_i = (r_i, γ_i, ζ_i) -> Linear(3 -> d) + a learned embedding of the rank i ->
TransformerEncoder (every document attends to every other; padding masked) -> H (k, d);
relevance head Linear(d -> 1) (QDM: BCE against the documents' labels, §3.5) and projection
Linear(d -> LLM hidden size) giving E^R, the embedding placed before each document.
The defaults are the official code's: 1 layer, 4 heads, d = 256, dropout 0.1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["FormerConfig", "FormerOutput", "R2Former", "qdm_loss"]


@dataclass(frozen=True)
class FormerConfig:
    """The R²-Former's shape; `hidden_size` is the LLM's token-embedding width."""

    hidden_size: int
    d_model: int = 256
    layers: int = 1
    heads: int = 4
    dropout: float = 0.1
    max_docs: int = 64  # rank embeddings (the paper's k is at most 30)
    features: int = 3


@dataclass
class FormerOutput:
    hidden: torch.Tensor  # (batch, k, d_model): H
    relevance_logits: torch.Tensor  # (batch, k): QDM scores before the sigmoid
    projected: torch.Tensor  # (batch, k, hidden_size): E^R


class R2Former(nn.Module):
    """`forward(features (b, k, 3), mask (b, k) True = a real document)`."""

    def __init__(self, config: FormerConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Linear(config.features, config.d_model)
        self.rank = nn.Embedding(config.max_docs, config.d_model)
        layer = nn.TransformerEncoderLayer(
            d_model=config.d_model,
            nhead=config.heads,
            dim_feedforward=4 * config.d_model,
            dropout=config.dropout,
            batch_first=True,
        )
        self.encoder = nn.TransformerEncoder(
            layer, num_layers=config.layers, enable_nested_tensor=False
        )
        self.relevance = nn.Linear(config.d_model, 1)
        self.project = nn.Linear(config.d_model, config.hidden_size)

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> FormerOutput:
        batch, k, _ = features.shape
        if k > self.config.max_docs:
            raise ValueError(
                f"{k} documents per list, the R²-Former has {self.config.max_docs} ranks"
            )
        ranks = torch.arange(k, device=features.device)
        x = self.embed(features) + self.rank(ranks)[None]
        padding = None
        if mask is not None:
            padding = ~mask.bool()
            # a list with no document: attend over its padding rather than over nothing (NaN);
            # it has no placeholder to fill and no QDM label, so the output is never read
            padding = padding & ~padding.all(dim=1, keepdim=True)
        hidden = self.encoder(x, src_key_padding_mask=padding)
        return FormerOutput(hidden, self.relevance(hidden).squeeze(-1), self.project(hidden))


def qdm_loss(
    logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Query-document matching: BCE of the relevance head against 0/1 document labels, over
    the real documents only."""
    losses = nn.functional.binary_cross_entropy_with_logits(
        logits, labels.float(), reduction="none"
    )
    if mask is None:
        return losses.mean()
    weights = mask.float()
    return (losses * weights).sum() / weights.sum().clamp(min=1.0)
