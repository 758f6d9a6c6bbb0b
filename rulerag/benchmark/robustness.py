"""Queries that need no rule: RuleRAG's robustness test (anonymous version, Appendix E, Table 7).

Each test query is turned, through one of its own matched rules `[Entity1, r1, Entity2] leads
to [Entity1, r2, Entity2]`, into a query that asks the rule's body relation instead of its
head ("What is the nationality of Jean-Luc Godard?" with `born in -> has nationality` becomes
"Where is Jean-Luc Godard born?"). The paper keeps everything else: the answers are unchanged,
the rules are the original query's, and a document stating the answer through r1 is in the
corpus, so the query can be answered by retrieval alone; rules then are at best useless and
may distract.

On RuleQA: the same subject, time, answers and rule ids; the first of the query's rules (best
first) that has one body atom, read forwards (`[Entity1, r1, Entity2]`), and for which the
corpus holds `subject r1 answer` (before the query time on a temporal KG) for a gold answer.
The degenerate query's answers are those gold answers (the ones r1 reaches), so EM asks for an
answer a document states directly. Queries with no such rule are left out and counted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from rulerag.kg.text import query_text

__all__ = ["ROBUST_PREFIX", "degenerate_queries"]

#: query ids of degenerate queries: robust-<original qid>
ROBUST_PREFIX = "robust-"


def _forward_body(bank: pd.DataFrame) -> dict[str, int]:
    """rule id -> r1 for one-atom rules whose body reads `[Entity1, r1, Entity2]`."""
    out: dict[str, int] = {}
    for rule_id, length, body in zip(bank["rule_id"], bank["length"], bank["body"], strict=True):
        if int(length) != 1:
            continue
        (relation, subject, obj) = json.loads(body)[0]
        if (subject, obj) == (0, 1):
            out[str(rule_id)] = int(relation)
    return out


def degenerate_queries(
    test: Sequence[Mapping[str, Any]],
    bank: pd.DataFrame,
    corpus: pd.DataFrame,
    entity_names: Mapping[int, str],
    relation_names: Mapping[int, str],
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The degenerate query of each test query that has one (see the module), and counts:
    `queries`, `degenerated`, `no_forward_one_atom_rule`, `no_document`."""
    body = _forward_body(bank)
    links: dict[tuple[int, int], list[tuple[int, int | None]]] = {}
    times = corpus["time"] if "time" in corpus else pd.Series([None] * len(corpus))
    for h, r, t, when in zip(
        corpus["head"], corpus["relation"], corpus["tail"], times, strict=True
    ):
        links.setdefault((int(h), int(r)), []).append(
            (int(t), None if pd.isna(when) else int(when))
        )
    out: list[dict[str, Any]] = []
    counts = {
        "queries": len(test),
        "degenerated": 0,
        "no_forward_one_atom_rule": 0,
        "no_document": 0,
    }
    for query in test:
        candidates = [body[r] for r in query["rule_ids"] if r in body]
        if not candidates:
            counts["no_forward_one_atom_rule"] += 1
            continue
        wanted = {int(a) for a in query["answer_ids"]}
        when = query.get("time")
        for relation in candidates:
            reached = {
                tail
                for tail, at in links.get((int(query["head"]), relation), [])
                if tail in wanted and (when is None or at is None or at < when)
            }
            if reached:
                break
        else:
            counts["no_document"] += 1
            continue
        ids = [int(a) for a in query["answer_ids"] if int(a) in reached]
        name = str(relation_names[relation])
        out.append(
            {
                **query,
                "qid": ROBUST_PREFIX + str(query["qid"]),
                "query": query_text(query["head_name"], name, query.get("time_text")),
                "relation": relation,
                "relation_name": name,
                "answers": list(dict.fromkeys(str(entity_names[a]) for a in ids)),
                "answer_ids": ids,
                "original_qid": query["qid"],
                "original_relation": int(query["relation"]),
            }
        )
        counts["degenerated"] += 1
    return out, counts
