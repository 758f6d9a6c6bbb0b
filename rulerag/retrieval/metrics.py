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


def answer_patterns(
    answers: Mapping[str, Sequence[str]],
) -> dict[str, re.Pattern[str] | None]:
    """Each query's `answer_pattern`, compiled once for a whole run."""
    return {qid: answer_pattern(ans) for qid, ans in answers.items()}


def _hit_pairs(
    run: pd.DataFrame,
    contents: Mapping[str, str],
    patterns: Mapping[str, re.Pattern[str] | None],
) -> set[tuple[str, str]]:
    """The (qid, doc_id) pairs of `run` whose document holds one of the query's answers."""
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
    return _is_hit(run, _hit_pairs(run, contents, answer_patterns(answers)))


def _first_ranks(
    run: pd.DataFrame,
    contents: Mapping[str, str],
    patterns: Mapping[str, re.Pattern[str] | None],
) -> tuple[pd.Series, pd.Series]:
    """(strict, loose) first-hit ranks of the queries of `run` that found an answer."""
    # the united list holds only pairs of the run: test each document once
    hit_pairs = _hit_pairs(run, contents, patterns)
    loose = run.loc[_is_hit(run, hit_pairs)].groupby("qid")["rank"].min()
    united = unite(run)
    strict = united.loc[_is_hit(united, hit_pairs)].groupby("qid")["rank"].min()
    return strict, loose


def _rank_table(
    answers: Mapping[str, Sequence[str]],
    strict: Sequence[pd.Series],
    loose: Sequence[pd.Series],
) -> pd.DataFrame:
    """The `first_hit_ranks` table: one row per query with answers, inf where none was found."""
    qids = [q for q, a in answers.items() if any(a)]
    out = pd.DataFrame(index=pd.Index(qids, name="qid"))
    out["strict"] = np.inf
    out["loose"] = np.inf
    for column, parts in (("loose", loose), ("strict", strict)):
        found = [part for part in parts if not part.empty]
        if found:
            ranks = pd.concat(found)
            out.loc[out.index.intersection(ranks.index), column] = ranks
    return out


def first_hit_ranks(
    run: pd.DataFrame,
    contents: Mapping[str, str],
    answers: Mapping[str, Sequence[str]],
) -> pd.DataFrame:
    """Per query with answers: `strict` = rank of the first answer-bearing document in the
    united list, `loose` = best per-rule rank of one (inf when none was retrieved)."""
    if run.empty or not any(any(a) for a in answers.values()):
        return _rank_table(answers, [], [])
    strict, loose = _first_ranks(run, contents, answer_patterns(answers))
    return _rank_table(answers, [strict], [loose])


class FirstHits:
    """`first_hit_ranks` of a run that arrives a block at a time (`add`), for runs too large
    to hold: a ×16 graph's rule-guided run is 27.8 million rows, and uniting it whole (the
    strict figure's sort) took more than the run itself again (at ×4: 0.88 GiB after the
    search, 1.87 GiB uniting). Each query's rows must come together, as the searches of
    `rule_guided.expand` do; the rows of every query but the last one seen are ranked as soon
    as a block brings them, so one block and one query's rows are held at a time. A query
    whose rows come apart is a `ValueError` (its figures would differ from the whole run's)."""

    def __init__(self, contents: Mapping[str, str], answers: Mapping[str, Sequence[str]]) -> None:
        self._contents = contents
        self._answers = answers
        self._patterns = answer_patterns(answers)
        self._held: pd.DataFrame | None = None  # the last query's rows so far
        self._ranked: set[str] = set()
        self._strict: list[pd.Series] = []
        self._loose: list[pd.Series] = []

    def add(self, block: pd.DataFrame) -> None:
        """Take the next rows of the run, in its order."""
        if block.empty:
            return
        rows = block if self._held is None else pd.concat([self._held, block], ignore_index=True)
        qids = rows["qid"].to_numpy()
        last = len(qids) - 1
        while last > 0 and qids[last - 1] == qids[-1]:
            last -= 1
        self._held = rows.iloc[last:]
        if last:
            self._rank(rows.iloc[:last])

    def _rank(self, rows: pd.DataFrame) -> None:
        qids = set(rows["qid"].unique())
        apart = qids & self._ranked
        if apart:
            raise ValueError(
                f"the run's rows of query {sorted(apart)[0]!r} do not come together; "
                "FirstHits needs each query's rows in one stretch"
            )
        self._ranked |= qids
        strict, loose = _first_ranks(rows, self._contents, self._patterns)
        self._strict.append(strict)
        self._loose.append(loose)

    def ranks(self) -> pd.DataFrame:
        """The `first_hit_ranks` table of every row added."""
        if self._held is not None:
            self._rank(self._held)
            self._held = None
        return _rank_table(self._answers, self._strict, self._loose)


def recall_figures(ranks: pd.DataFrame, ks: Iterable[int] = DEFAULT_KS) -> dict[str, float]:
    """`recall_at_{k}` (strict) and `loose_recall_at_{k}` for each k, plus `queries`, of a
    `first_hit_ranks` table. The denominator is every query with an answer, retrieved or not.
    """
    n = len(ranks)
    metrics: dict[str, float] = {"queries": float(n)}
    for k in ks:
        metrics[f"recall_at_{k}"] = float((ranks["strict"] <= k).sum() / n) if n else 0.0
    for k in ks:
        metrics[f"loose_recall_at_{k}"] = float((ranks["loose"] <= k).sum() / n) if n else 0.0
    return metrics


def recall_at_k(
    run: pd.DataFrame,
    contents: Mapping[str, str],
    answers: Mapping[str, Sequence[str]],
    ks: Iterable[int] = DEFAULT_KS,
) -> dict[str, float]:
    """`recall_figures` of a whole run."""
    return recall_figures(first_hit_ranks(run, contents, answers), ks)


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
