"""R²AG features for the lists RuleRAG's retrievers return, in the order the prompt shows them.

A standard dense run ranks one query's documents by cos(q, d), which is R²AG's relevance, so
its order is the paper's "sorted by r_i". A rule-guided run searches each (query, rule) pair
with q ∘ r and unites the lists (`rulerag.retrieval.rule_guided.unite`: each document once,
with its best score and the rule that gave it). Each document's relevance is then measured
against the text that found it: r_i = cos(E(q ∘ r_i), E(d_i)), with r_i the rule of its best
score (the query alone for documents found without a rule); precedent and neighbour
similarity compare documents with each other as in the paper. The united list is already
ordered by those scores, so the features follow the prompt's order unchanged (`sort=False`).
For a BM25 run the encoder still gives the features, but its order is BM25's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from rulerag.generation.r2ag.features import retrieval_features
from rulerag.retrieval.rule_guided import NO_RULE, compose

__all__ = ["list_features"]


def list_features(
    query: str,
    doc_ids: Sequence[str],
    rules: Sequence[str],
    *,
    search_rules: Mapping[str, str],
    encode: Callable[[list[str]], np.ndarray],
    doc_vectors: Mapping[str, np.ndarray],
) -> np.ndarray:
    """(k, 3) features of one query's documents in prompt order; `rules[i]` is the rule the
    i-th document was retrieved with (`NO_RULE` for the query alone), `search_rules` each
    rule's text as the retrieval stage composed it (`rule_query_texts` of the bank in the
    `retrieve.rule_query` form)."""
    if len(doc_ids) != len(rules):
        raise ValueError("one rule (or NO_RULE) per document is needed")
    if not doc_ids:
        return np.zeros((0, 3), dtype=np.float32)
    texts = [query if rule == NO_RULE else compose(query, search_rules[rule]) for rule in rules]
    unique = list(dict.fromkeys(texts))
    vectors = np.asarray(encode(unique), dtype=np.float64)
    by_text = dict(zip(unique, vectors, strict=True))
    queries = np.stack([by_text[t] for t in texts])
    docs = np.stack([np.asarray(doc_vectors[d], dtype=np.float64) for d in doc_ids])
    features, _ = retrieval_features(queries, docs, sort=False)
    return features
