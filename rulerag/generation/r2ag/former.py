"""The R²-Former (paper §3.3, Eq. 2-3): list-wise retrieval features in, one vector per
document out, for the LLM (projected to its hidden size) and for query-document matching.

input_i = (r_i, γ_i, ζ_i) -> Linear(3 -> d) + a learned embedding of the rank i ->
TransformerEncoder (every document attends to every other; padding masked) -> H (k, d);
relevance head Linear(d -> 1) (QDM: BCE against the documents' labels, §3.5) and projection
Linear(d -> LLM hidden size) giving E^R, the embedding placed before each document.
The defaults are the official code's: 1 layer, 4 heads, d = 256, dropout 0.1.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from rulerag.generation.r2ag.settings import FormerSettings

__all__ = ["MAX_DOCS", "FormerOutput", "R2Former", "qdm_loss"]

#: rank embeddings of an R²-Former (the paper's k is at most 30)
MAX_DOCS = 64


@dataclass
class FormerOutput:
    hidden: torch.Tensor  # (batch, k, d_model): H
    relevance_logits: torch.Tensor  # (batch, k): QDM scores before the sigmoid
    projected: torch.Tensor  # (batch, k, hidden_size): E^R


class R2Former(nn.Module):
    """`forward(features (b, k, 3), mask (b, k) True = a real document)`. Its shape is
    params.yaml's `r2ag.former` (`FormerSettings`); `hidden_size` is the LLM's token-embedding
    width."""

    def __init__(
        self,
        shape: FormerSettings,
        hidden_size: int,
        *,
        max_docs: int = MAX_DOCS,
        n_features: int = 3,
    ) -> None:
        super().__init__()
        self.shape, self.hidden_size = shape, hidden_size
        self.max_docs, self.n_features = max_docs, n_features
        self.embed = nn.Linear(n_features, shape.d_model)
        self.rank = nn.Embedding(max_docs, shape.d_model)
        layer = nn.TransformerEncoderLayer(
            d_model=shape.d_model,
            nhead=shape.heads,
            dim_feedforward=4 * shape.d_model,
            dropout=shape.dropout,
            batch_first=True,
        )
        self.encoder = nn.TransformerEncoder(
            layer, num_layers=shape.layers, enable_nested_tensor=False
        )
        self.relevance = nn.Linear(shape.d_model, 1)
        self.project = nn.Linear(shape.d_model, hidden_size)

    def meta(self) -> dict[str, Any]:
        """What a saved R²-Former records of its shape (`from_meta` reads it back)."""
        return {
            "hidden_size": self.hidden_size,
            **asdict(self.shape),
            "max_docs": self.max_docs,
            "features": self.n_features,
        }

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> R2Former:
        """An (untrained) R²-Former of the shape `meta` records."""
        values = dict(meta)
        hidden, max_docs, n_features = (
            values.pop(k) for k in ("hidden_size", "max_docs", "features")
        )
        return cls(FormerSettings(**values), hidden, max_docs=max_docs, n_features=n_features)

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> FormerOutput:
        batch, k, _ = features.shape
        if k > self.max_docs:
            raise ValueError(f"{k} documents per list, the R²-Former has {self.max_docs} ranks")
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
