"""Retrieval for RuleRAG: BM25 (bm25s / Pyserini), dense dual encoders with FAISS,
rule-guided retrieval, Recall@k, and RGFT / SSFT query-encoder training.

Every module imports its heavy dependencies (torch, sentence-transformers, FAISS, Pyserini's
JVM) inside the functions that need them, so importing the package is cheap.

    sparse       BM25sIndex, PyseriniIndex (one `search` interface), parity check
    encoders     model aliases (minilm, mpnet) -> offline copies, any id/path; DualEncoder
    dense        corpus embeddings (cached in chunks), DenseIndex (FAISS flat/ivf/hnsw, GPU)
    rule_guided  per-(query, rule) search of `q ∘ r`, union keeping the best score
    metrics      Recall@k: strict on the united ranked list, and the paper's loose union
    training     in-batch contrastive training of the query encoder (frozen documents),
                 `fit_query_encoder` (the sequence train_retriever and generalisation share)
    data         readers for the benchmark files

One entry per stage, each returning what the stage writes: `indexing.index_corpus` (index),
`fine_tuning.train_retriever` (train_retriever), `runs.retrieve_runs` (retrieve,
retrieve_finetuned), `report.retrieval_report` (retrieval_report).
"""

from rulerag.retrieval.configs import RetrievalConfig, parse_config
from rulerag.retrieval.data import Corpus, Query, RuleItem
from rulerag.retrieval.metrics import DEFAULT_KS, recall_at_k
from rulerag.retrieval.rule_guided import NO_RULE, compose, retrieve, unite

__all__ = [
    "DEFAULT_KS",
    "NO_RULE",
    "Corpus",
    "Query",
    "RetrievalConfig",
    "RuleItem",
    "compose",
    "parse_config",
    "recall_at_k",
    "retrieve",
    "unite",
]
