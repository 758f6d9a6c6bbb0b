"""Recall@k for retrieval runs: strict (equal-k) and the paper's looser union figure.

A query is recalled at k when a gold answer occurs (case-insensitively, as whole words) in the
contents of one of its top-k documents. Whole words, not substrings: NELL-995 has answers such
as "k", which a substring test finds in almost every document.

* Strict `recall_at_k`: the query's per-rule lists are united (best score per document),
  ranked by score and cut at k, so every configuration is judged on k documents; this is the
  number to compare configurations with.
* Loose `loose_recall_at_k`: the answer occurs anywhere in the union of the per-rule top-k
  lists, which holds up to k x (number of rules) documents. This is how RuleRAG's paper counts
  rule-guided recall; for query-only runs it equals the strict figure.

Both are computed from the first rank at which a query's answer appears, so any list of k
comes out of one pass over the run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from rulerag.retrieval.rule_guided import unite

DEFAULT_KS = (1, 2, 5, 10, 20, 50)


def answer_pattern(answers: Iterable[str]) -> re.Pattern[str] | None:
    """A case-folded pattern matching any answer as whole words (None without answers).

    Longer answers are tried first; a boundary is any non-word character or the text's end,
    so "Police (China)" holds "China" but "Chinatown" does not.
    """
    needles = sorted({a.casefold() for a in answers if a and a.strip()}, key=len, reverse=True)
    if not needles:
        return None
    return re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, needles)) + r")(?!\w)")


def contains_answer(text: str, pattern: re.Pattern[str] | None) -> bool:
    return pattern is not None and pattern.search(text.casefold()) is not None


def _hit_pairs(
    run: pd.DataFrame,
    contents: Mapping[str, str],
    answers: Mapping[str, Sequence[str]],
) -> set[tuple[str, str]]:
    """The (qid, doc_id) pairs of `run` whose document holds one of the query's answers."""
    patterns = {qid: answer_pattern(ans) for qid, ans in answers.items()}
    pairs = run[["qid", "doc_id"]].drop_duplicates()
    return {
        (qid, doc_id)
        for qid, doc_id in pairs.itertuples(index=False)
        if contains_answer(contents[doc_id], patterns.get(qid))
    }


def _is_hit(frame: pd.DataFrame, hit_pairs: set[tuple[str, str]]) -> np.ndarray:
    if frame.empty or not hit_pairs:
        return np.zeros(len(frame), dtype=bool)
    return np.fromiter(
        ((q, d) in hit_pairs for q, d in zip(frame["qid"], frame["doc_id"], strict=True)),
        dtype=bool,
        count=len(frame),
    )


def answer_hits(
    run: pd.DataFrame,
    contents: Mapping[str, str],
    answers: Mapping[str, Sequence[str]],
) -> np.ndarray:
    """For each row of `run`, whether the document holds one of its query's answers."""
    if run.empty:
        return np.zeros(0, dtype=bool)
    return _is_hit(run, _hit_pairs(run, contents, answers))


def first_hit_ranks(
    run: pd.DataFrame,
    contents: Mapping[str, str],
    answers: Mapping[str, Sequence[str]],
) -> pd.DataFrame:
    """Per query with answers: `strict` = rank of the first answer-bearing document in the
    united list, `loose` = best per-rule rank of one (inf when none was retrieved)."""
    qids = [q for q, a in answers.items() if any(a)]
    out = pd.DataFrame(index=pd.Index(qids, name="qid"))
    out["strict"] = np.inf
    out["loose"] = np.inf
    if run.empty or not qids:
        return out
    # the united list holds only pairs of the run: test each document once
    hit_pairs = _hit_pairs(run, contents, answers)
    loose = run.loc[_is_hit(run, hit_pairs)].groupby("qid")["rank"].min()
    united = unite(run)
    strict = united.loc[_is_hit(united, hit_pairs)].groupby("qid")["rank"].min()
    out.loc[out.index.intersection(loose.index), "loose"] = loose
    out.loc[out.index.intersection(strict.index), "strict"] = strict
    return out


def recall_at_k(
    run: pd.DataFrame,
    contents: Mapping[str, str],
    answers: Mapping[str, Sequence[str]],
    ks: Iterable[int] = DEFAULT_KS,
) -> dict[str, float]:
    """`recall_at_{k}` (strict) and `loose_recall_at_{k}` for each k, plus `queries`.

    The denominator is every query of `answers` that has an answer, retrieved or not.
    """
    ranks = first_hit_ranks(run, contents, answers)
    n = len(ranks)
    metrics: dict[str, float] = {"queries": float(n)}
    for k in ks:
        metrics[f"recall_at_{k}"] = float((ranks["strict"] <= k).sum() / n) if n else 0.0
    for k in ks:
        metrics[f"loose_recall_at_{k}"] = float((ranks["loose"] <= k).sum() / n) if n else 0.0
    return metrics


def recall_curve(metrics: Mapping[str, float], config: str, ks: Iterable[int]) -> pd.DataFrame:
    """The DVC plot table: one row per k with strict and loose recall (fractions, as in
    metrics.json)."""
    ks = list(ks)
    return pd.DataFrame(
        {
            "k": ks,
            "recall": [round(metrics[f"recall_at_{k}"], 4) for k in ks],
            "loose_recall": [round(metrics[f"loose_recall_at_{k}"], 4) for k in ks],
            "config": config,
        }
    )
