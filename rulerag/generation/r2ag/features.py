"""R²AG's retrieval features for one ranked list (paper §3.2, App. A, Eq. 10-12).

For a query and its top-k documents, with a similarity `sim` (cosine here, the paper's
"dot product or cosine similarity"):

* relevance      r_i = sim(x^q, x^d_i); the list is sorted by it;
* precedent      γ_i = sim(x^d_i, Σ_{j<i} w_j x^d_j), w_j = softmax(r)_j. Eq. 11 normalises
  over all k documents, a positive factor that cosine ignores, so softmax over the
  precedents alone gives the same γ; the first document has no precedent and gets 1;
* neighbour      ζ_i = the mean of sim(x^d_{i-1}, x^d_i) and sim(x^d_i, x^d_{i+1}); the first
  and last document have one neighbour; a list of one document gets 1.

Rule-guided lists (RuleRAG's RG / RGFT retrievers) search each (query, rule) pair with q ∘ r
and unite the lists, so each document carries the embedding of the text that found it:
`query` may be one vector for the whole list or one per document (`q ∘ r` of its rule).
"""

from __future__ import annotations

import numpy as np

__all__ = ["FEATURES", "retrieval_features"]

#: the feature columns, in the order the R²-Former reads them
FEATURES = ("relevance", "precedent", "neighbour")


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def retrieval_features(
    query: np.ndarray, docs: np.ndarray, *, sort: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(features (k, 3) float32 in `FEATURES` order, order (k,)): `order` lists the rows of
    `docs` as the features do (by relevance, descending and stable, when `sort`).

    `query`: (d,) or one row per document (k, d); `docs`: (k, d) embeddings of the retriever.
    """
    d = _unit(docs)
    k = len(d)
    if k == 0:
        return np.zeros((0, 3), dtype=np.float32), np.zeros(0, dtype=np.int64)
    q = _unit(query)
    q = np.broadcast_to(q, d.shape) if q.ndim == 1 else q
    if q.shape != d.shape:
        raise ValueError(f"query embeddings {q.shape} do not match the documents' {d.shape}")
    relevance = np.einsum("ij,ij->i", q, d)
    order = np.argsort(-relevance, kind="stable") if sort else np.arange(k)
    d, relevance = d[order], relevance[order]

    weights = np.exp(relevance - relevance.max())
    weighted = np.cumsum(weights[:, None] * d, axis=0)  # row i: Σ_{j<=i} w_j x_j
    precedent = np.ones(k)
    if k > 1:
        precedent[1:] = np.einsum("ij,ij->i", d[1:], _unit(weighted[:-1]))

    adjacent = np.einsum("ij,ij->i", d[:-1], d[1:])  # sim(x_i, x_{i+1})
    neighbour = np.ones(k)
    if k > 1:
        padded = np.concatenate([[np.nan], adjacent, [np.nan]])
        neighbour = np.nanmean(np.stack([padded[:-1], padded[1:]]), axis=0)
    features = np.stack([relevance, precedent, neighbour], axis=1).astype(np.float32)
    return features, order.astype(np.int64)
