"""From benchmark files and retrieval runs to the generator's inputs (`prompts.Sample`).

Inputs (produced by earlier stages):

* `benchmark/test.jsonl`, `benchmark/f_g.jsonl`: `{"qid", "query", "answers", "rule_ids"}`;
* `benchmark/corpus.jsonl`: `{"id", "contents"}`; `rules/bank.parquet`: `rule_id`, `text`;
* a retrieval run, `retrieval/<config>/run.parquet` (test queries) or `run_fg.parquet` (F_G
  queries): columns `qid`, `rule` (the rule id a (query, rule) pair was retrieved with, "" for
  the query alone), `rank`, `doc_id`, `score`.

The RG-retriever retrieves once per (query, rule) pair; a query's documents are the union of
its pairs' lists: each document once with its best score, best first (`united_documents`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rulerag.generation.prompts import Sample
from rulerag.io import iter_jsonl
from rulerag.retrieval.configs import RUN_FG_FILENAME, RUN_FILENAME

__all__ = [
    "RUN_FG_FILENAME",
    "RUN_FILENAME",
    "build_samples",
    "load_corpus",
    "retrieved_only",
    "sample_queries",
    "united_documents",
]


RULE_FILTERS = ("all", "query_only", "rules_only")


def sample_queries(
    records: Sequence[Mapping[str, Any]], n: int | None, seed: int
) -> list[Mapping[str, Any]]:
    """A seeded sample of n records in file order (all when n is None or large enough).

    Every configuration of the grid draws the same sample (same file, n and seed), so the rows
    of the result table are compared on the same queries.
    """
    if n is None or n >= len(records):
        return list(records)
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(len(records), size=int(n), replace=False))
    return [records[int(i)] for i in keep]


def retrieved_only(records: Sequence[Mapping[str, Any]], run_path: Path) -> list[Mapping[str, Any]]:
    """The records whose queries the retrieval run holds (all of them when there is no run).

    The retrieval stage may search only a seeded sample of the F_G queries
    (`retrieve.f_g_queries`); training samples must come from that sample, or they would
    reach the generator without documents.
    """
    if not Path(run_path).is_file():
        return list(records)
    held = set(pd.read_parquet(run_path, columns=["qid"])["qid"].astype(str))
    return [r for r in records if str(r["qid"]) in held]


def united_documents(run: pd.DataFrame, rules: str = "all") -> dict[str, list[str]]:
    """Each query's documents: the union over its (query, rule) lists, best score first.

    The union is the retrieval stage's own (`rulerag.retrieval.rule_guided.unite`: best score
    per document, ties by per-rule rank, then id). `rules` keeps `all` rows, only the
    query-alone rows (`query_only`, rule == "") or only the rule-guided ones (`rules_only`).
    """
    from rulerag.retrieval.rule_guided import unite

    if rules not in RULE_FILTERS:
        raise ValueError(f"rules must be one of {RULE_FILTERS}, not {rules!r}")
    frame = run
    if rules != "all" and "rule" in frame:
        is_query = frame["rule"].fillna("").astype(str) == ""
        frame = frame[is_query if rules == "query_only" else ~is_query]
    if frame.empty:
        return {}
    united = unite(frame.astype({"qid": str, "doc_id": str}))
    return {str(q): list(g["doc_id"]) for q, g in united.groupby("qid", sort=False)}


def load_corpus(path: Path, ids: Iterable[str] | None = None) -> dict[str, str]:
    """Document id -> text, only for `ids` when given (the corpus can be large)."""
    wanted = set(ids) if ids is not None else None
    corpus: dict[str, str] = {}
    for record in iter_jsonl(path):
        doc_id = str(record["id"])
        if wanted is None or doc_id in wanted:
            corpus[doc_id] = str(record["contents"])
    return corpus


def build_samples(
    queries: Sequence[Mapping[str, Any]],
    *,
    rule_texts: Mapping[str, str],
    documents: Mapping[str, Sequence[str]] | None,
    corpus: Mapping[str, str],
    num_documents: int,
    max_rules: int | None,
    keep_retrieved: int = 10,
) -> list[Sample]:
    """One `Sample` per query.

    `documents` maps qid -> ranked doc ids (None: the configuration retrieves nothing). The
    prompt gets the first `num_documents`; the first `keep_retrieved` are kept (text and ids)
    for Recall@k and the predictions file. Rules are the query's `rule_ids` that are in the
    bank, in the order the benchmark selected them, at most `max_rules`.
    """
    samples = []
    for record in queries:
        qid = str(record["qid"])
        rule_ids = [str(r) for r in record.get("rule_ids") or [] if str(r) in rule_texts]
        if max_rules is not None:
            rule_ids = rule_ids[: int(max_rules)]
        extra: dict[str, Any] = {"rule_ids": rule_ids}
        retrieved: tuple[str, ...] = ()
        prompt_docs: tuple[str, ...] = ()
        if documents is not None:
            ids = [d for d in documents.get(qid, []) if d in corpus]
            extra["doc_ids"] = ids[: max(num_documents, keep_retrieved)]
            retrieved = tuple(corpus[d] for d in ids[:keep_retrieved])
            prompt_docs = tuple(corpus[d] for d in ids[:num_documents])
            extra["retrieved"] = retrieved
        samples.append(
            Sample(
                qid=qid,
                query=str(record["query"]),
                answers=tuple(str(a) for a in record.get("answers") or []),
                documents=prompt_docs,
                rules=tuple(rule_texts[r] for r in rule_ids),
                extra=extra,
            )
        )
    return samples
