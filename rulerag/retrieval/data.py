"""Readers for what `build_benchmark` writes: corpus, query sets, F_R items, rule texts.

Kept apart from the algorithms so that every retrieval function takes plain Python values and
can be tested on a corpus written inline; the stage scripts are the only callers of these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rulerag.io import iter_jsonl, read_parquet


@dataclass(frozen=True)
class Corpus:
    """Documents in index order: `ids[i]` has text `contents[i]` (FAISS and bm25s rows)."""

    ids: tuple[str, ...]
    contents: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.contents):
            raise ValueError("corpus ids and contents differ in length")
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("corpus ids are not unique")

    def __len__(self) -> int:
        return len(self.ids)

    def position(self) -> dict[str, int]:
        """Doc id -> row, for back ends (Pyserini) that answer with ids."""
        return {doc_id: i for i, doc_id in enumerate(self.ids)}


@dataclass(frozen=True)
class Query:
    """One test / F_G query: text, acceptable answers, and the rules selected for it."""

    qid: str
    text: str
    answers: tuple[str, ...] = ()
    rule_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class RuleItem:
    """One F_R item: a (query, rule) pair and the oracle documents it should retrieve."""

    item_id: str
    qid: str
    query: str
    rule_id: str
    rule_text: str
    oracle_doc_ids: tuple[str, ...]
    answers: tuple[str, ...] = field(default=())


def read_corpus(path: Path) -> Corpus:
    """corpus.jsonl (`{"id", "contents"}` per line, Pyserini's JsonCollection format)."""
    ids, contents = [], []
    for row in iter_jsonl(path):
        ids.append(str(row["id"]))
        contents.append(str(row["contents"]))
    return Corpus(tuple(ids), tuple(contents))


def read_queries(path: Path) -> list[Query]:
    """test.jsonl / f_g.jsonl / robust.jsonl: qid, query, answers, rule_ids (may be empty)."""
    return to_queries(iter_jsonl(path))


def to_queries(rows: Iterable[Mapping[str, Any]]) -> list[Query]:
    """Benchmark query records as `Query`s."""
    return [
        Query(
            qid=str(row["qid"]),
            text=str(row["query"]),
            answers=tuple(str(a) for a in row.get("answers") or ()),
            rule_ids=tuple(str(r) for r in row.get("rule_ids") or ()),
        )
        for row in rows
    ]


def read_rule_items(path: Path) -> list[RuleItem]:
    """f_r.jsonl: one line per (query, selected rule) with its oracle documents."""
    return [
        RuleItem(
            item_id=str(row.get("item_id") or f"{row['qid']}#{row['rule_id']}"),
            qid=str(row["qid"]),
            query=str(row["query"]),
            rule_id=str(row.get("rule_id") or ""),
            rule_text=str(row.get("rule_text") or ""),
            oracle_doc_ids=tuple(str(d) for d in row.get("oracle_doc_ids") or ()),
            answers=tuple(str(a) for a in row.get("answers") or ()),
        )
        for row in iter_jsonl(path)
    ]


def read_rule_texts(path: Path) -> dict[str, str]:
    """bank.parquet -> {rule_id: text}."""
    frame = read_parquet(path, columns=["rule_id", "text"])
    return dict(zip(frame["rule_id"].astype(str), frame["text"].astype(str), strict=True))
