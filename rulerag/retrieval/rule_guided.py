"""Rule-guided retrieval (the paper's RG-retriever): one search per (query, rule), then a union.

For each rule r selected for query q the retriever searches with `q ∘ r` (the query text, a
space, the rule text) and keeps its top k; the per-rule lists are united, a document keeping
its best score. A query with no usable rule is searched alone. `standard` retrieval is the
same code with rules switched off, so both configurations produce the same run format:

    qid, rule, rank, doc_id, score      (rule = "" for the query alone; rank from 1)

The per-rule lists are kept in the run (not only their union) because the paper's looser
Recall@k (answer anywhere in the union of per-rule top-k) needs them; `unite` derives the
ranked union that the strict Recall@k and the generator read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

import numpy as np
import pandas as pd

from rulerag.retrieval.data import Query

#: the `rule` value of a search made with the query alone
NO_RULE = ""
RUN_COLUMNS = ["qid", "rule", "rank", "doc_id", "score"]


class Searcher(Protocol):
    """Anything that maps texts to top-k corpus rows (BM25sIndex, PyseriniIndex,
    DenseRetriever)."""

    corpus_ids: tuple[str, ...]

    def search(
        self, texts: Sequence[str], k: int, show_progress: bool = False
    ) -> tuple[np.ndarray, np.ndarray]: ...


#: how a rule enters a rule-guided search (params.yaml `retrieve.rule_query`)
RuleQueryForm = Literal["rule", "body"]
RULE_QUERY_FORMS: tuple[str, ...] = get_args(RuleQueryForm)
_ATOM = re.compile(r"\[[^,\]]+, ([^\]]+?), [^,\]]+\]")


def compose(query: str, rule_text: str) -> str:
    """`q ∘ r`: the query, a space, the rule text."""
    return f"{query} {rule_text}"


def rule_body(rule_text: str) -> str:
    """The body relation names of a rule's text form, space-joined:
    `[Entity1, r1, Entity2] leads to [Entity1, r, Entity2]` -> `r1`. Relation names may hold
    commas (ICEWS14's `Abduct, hijack, or take hostage`); the entity slots never do."""
    body, sep, _ = rule_text.partition(" leads to ")
    if not sep:
        raise ValueError(f"not a rule's text form ([..] leads to [..]): {rule_text!r}")
    return " ".join(_ATOM.findall(body)) or body


def rule_query_text(rule_text: str, form: str = "rule") -> str:
    """The text a rule adds to a rule-guided search (`retrieve.rule_query`): `rule` = its whole
    text form (the paper's `q ⊕ r`), `body` = its body relation names only. `body` is this
    project's option: on NELL-995 the whole text (the head relation again, the `Entity1` /
    `leads to` frame) pulls short queries off their subject
    (benchmarks/rule_guided_diagnosis.py). Retrieval and RGFT training use the same form."""
    if form not in RULE_QUERY_FORMS:
        raise ValueError(f"rule_query must be one of {RULE_QUERY_FORMS}, not {form!r}")
    return rule_text if form == "rule" else rule_body(rule_text)


def rule_query_texts(rule_texts: Mapping[str, str], form: str = "rule") -> dict[str, str]:
    """`rule_query_text` over a bank's {rule_id: text}."""
    return {rule_id: rule_query_text(text, form) for rule_id, text in rule_texts.items()}


@dataclass(frozen=True)
class Expansion:
    """The searches one query set turns into."""

    qids: list[str]
    rules: list[str]
    texts: list[str]
    unknown_rules: int  # rule ids of queries that the rule bank does not hold (skipped)
    fallbacks: int  # queries searched alone although rules were asked for


def expand(queries: Sequence[Query], rule_texts: Mapping[str, str], use_rules: bool) -> Expansion:
    """One search per (query, known rule) when `use_rules`, else one per query."""
    qids: list[str] = []
    rules: list[str] = []
    texts: list[str] = []
    unknown = fallbacks = 0
    for query in queries:
        known = []
        if use_rules:
            for rule_id in dict.fromkeys(query.rule_ids):  # keep order, drop repeats
                if rule_id in rule_texts:
                    known.append(rule_id)
                else:
                    unknown += 1
            fallbacks += not known
        if known:
            for rule_id in known:
                qids.append(query.qid)
                rules.append(rule_id)
                texts.append(compose(query.text, rule_texts[rule_id]))
        else:
            qids.append(query.qid)
            rules.append(NO_RULE)
            texts.append(query.text)
    return Expansion(qids, rules, texts, unknown, fallbacks)


def search_blocks(
    plan: Expansion,
    searcher: Searcher,
    k: int,
    block: int = 2048,
    show_progress: bool = False,
) -> Iterator[pd.DataFrame]:
    """The run of `plan`'s searches, a frame per block of `block` searches, in search order
    (so a query's rows come together); one empty run frame when there is nothing to search,
    so that a run written from the blocks always has its columns.

    Blocks keep a long query set's run out of memory (the `retrieve` stage writes and scores
    them as they come) and move a progress bar.
    """
    from tqdm.auto import tqdm

    if not plan.texts:
        yield empty_run()
        return
    corpus_ids = np.asarray(searcher.corpus_ids, dtype=object)
    with tqdm(total=len(plan.texts), desc="retrieve", unit="q", disable=not show_progress) as bar:
        for start in range(0, len(plan.texts), block):
            rows, scores = searcher.search(plan.texts[start : start + block], k)
            n, kk = rows.shape
            keep = rows >= 0
            frame = pd.DataFrame(
                {
                    "qid": np.repeat(np.asarray(plan.qids[start : start + n], object), kk)[
                        keep.ravel()
                    ],
                    "rule": np.repeat(np.asarray(plan.rules[start : start + n], object), kk)[
                        keep.ravel()
                    ],
                    "rank": np.tile(np.arange(1, kk + 1, dtype=np.int32), n)[keep.ravel()],
                    "doc_id": corpus_ids[rows[keep]],
                    "score": scores[keep].astype(np.float32),
                }
            )
            bar.update(n)
            yield frame.astype({"qid": str, "rule": str, "doc_id": str})


def retrieve(
    queries: Sequence[Query],
    searcher: Searcher,
    k: int,
    rule_texts: Mapping[str, str] | None = None,
    use_rules: bool = True,
    block: int = 2048,
    show_progress: bool = False,
) -> tuple[pd.DataFrame, Expansion]:
    """Search every (query, rule) pair (or every query) and return the whole run frame (what
    `search_blocks` yields, concatenated) with the searches it made."""
    plan = expand(queries, rule_texts or {}, use_rules)
    frames = list(search_blocks(plan, searcher, k, block, show_progress))
    return pd.concat(frames, ignore_index=True), plan


def empty_run() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "qid": pd.Series(dtype=str),
            "rule": pd.Series(dtype=str),
            "rank": pd.Series(dtype=np.int32),
            "doc_id": pd.Series(dtype=str),
            "score": pd.Series(dtype=np.float32),
        }
    )


def unite(run: pd.DataFrame, k: int | None = None) -> pd.DataFrame:
    """The union of each query's per-rule lists, ranked by score, cut at `k`.

    A document found by several rules keeps its best score (and the rule that gave it).
    Equal scores are ordered by the better per-rule rank, then by doc id, so the union is
    deterministic. Columns: qid, rank (from 1), doc_id, score, rule.
    """
    if run.empty:
        return pd.DataFrame(columns=["qid", "rank", "doc_id", "score", "rule"])
    ordered = run.sort_values(
        ["qid", "score", "rank", "doc_id"], ascending=[True, False, True, True], kind="stable"
    )
    best = ordered.drop_duplicates(["qid", "doc_id"], keep="first")
    best = best.assign(rank=best.groupby("qid", sort=False).cumcount().astype(np.int32) + 1)
    if k is not None:
        best = best[best["rank"] <= k]
    return best[["qid", "rank", "doc_id", "score", "rule"]].reset_index(drop=True)
