"""A QA set equipped with RuleQA's rules, laid out as a RuleQA benchmark (the anonymous RuleRAG
version, Sec. 5 "Generalization on More Datasets", Table 3).

The questions were not built from rules, so none has a rule of its own: each gets the rules of
one or more RuleQA banks (the union of their `bank.parquet`) whose Sentence-BERT similarity to
the question exceeds θ, at most N of them (`rulerag.rules.selection.select_by_similarity`, the
paper's N = 3, θ = 0.7, App. A.5): "if some rules are highly relevant, they are introduced,
otherwise no rules are introduced". The result is written in the layout the grid reads
(data/<name>/benchmark/{corpus,test}.jsonl, rules/bank.parquet, retrieval/<config>/run.parquet)
so Standard RAG and RuleRAG-ICL rows (`rulerag.generation.grid.run_row`) answer it unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rulerag import markdown
from rulerag.errors import InputError
from rulerag.qa.reader import QAQuestion
from rulerag.retrieval.data import Corpus, Query
from rulerag.retrieval.rule_guided import Searcher, retrieve
from rulerag.rules.selection import Encoder, select_by_similarity

#: the paper's Table 3 (anonymous version), EM in %: (retriever + generator, row) -> dataset
PAPER_TABLE3: dict[tuple[str, str], dict[str, float]] = {
    ("Contriever + LLAMA2_7B", "Standard RAG"): {
        "ASQA": 8.6,
        "PopQA": 14.3,
        "HotpotQA": 4.4,
        "NQ": 7.6,
    },
    ("Contriever + LLAMA2_7B", "RuleRAG-ICL"): {
        "ASQA": 10.0,
        "PopQA": 15.3,
        "HotpotQA": 5.4,
        "NQ": 7.8,
    },
    ("Contriever + LLAMA2_7B", "RuleRAG-FT"): {
        "ASQA": 11.1,
        "PopQA": 16.7,
        "HotpotQA": 6.0,
        "NQ": 8.1,
    },
    ("Contriever + LLAMA2_13B", "Standard RAG"): {
        "ASQA": 8.8,
        "PopQA": 13.7,
        "HotpotQA": 5.8,
        "NQ": 7.8,
    },
    ("Contriever + LLAMA2_13B", "RuleRAG-ICL"): {
        "ASQA": 10.4,
        "PopQA": 17.3,
        "HotpotQA": 6.8,
        "NQ": 8.3,
    },
    ("Contriever + LLAMA2_13B", "RuleRAG-FT"): {
        "ASQA": 11.9,
        "PopQA": 18.8,
        "HotpotQA": 8.2,
        "NQ": 8.9,
    },
    ("Contriever + GPT-4o-mini", "CoK"): {
        "ASQA": 27.9,
        "PopQA": 11.6,
        "HotpotQA": 36.8,
        "NQ": 31.4,
    },
    ("Contriever + GPT-4o-mini", "RuleRAG-CoK"): {
        "ASQA": 40.0,
        "PopQA": 16.2,
        "HotpotQA": 38.6,
        "NQ": 35.4,
    },
}


@dataclass(frozen=True)
class QABenchmark:
    corpus: list[dict[str, str]]  # {"id", "contents"}
    test: list[dict[str, Any]]  # the grid's query records: qid, query, answers, rule_ids
    bank: pd.DataFrame  # rule_id, text, source, score
    stats: dict[str, Any]


def union_bank(banks: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The rules of several RuleQA banks, ids made unique as `<source>:<rule_id>`."""
    frames = []
    for source, bank in banks.items():
        missing = {"rule_id", "text"} - set(bank.columns)
        if missing:
            raise InputError(f"rule bank of {source}: no column(s) {sorted(missing)}")
        frames.append(
            pd.DataFrame(
                {
                    "rule_id": source + ":" + bank["rule_id"].astype(str),
                    "text": bank["text"].astype(str),
                    "source": source,
                    "score": bank["score"].astype(float) if "score" in bank else np.nan,
                }
            )
        )
    if not frames:
        raise InputError("no rule bank to equip the QA set with")
    union = pd.concat(frames, ignore_index=True)
    return union.drop_duplicates("text", keep="first").reset_index(drop=True)


def build_qa_benchmark(
    questions: Sequence[QAQuestion],
    documents: Sequence[tuple[str, str]],
    bank: pd.DataFrame,
    encode: Encoder,
    *,
    top_n: int = 3,
    threshold: float = 0.7,
) -> QABenchmark:
    """Questions + corpus + a rule bank -> the benchmark files (see the module docstring)."""
    chosen = select_by_similarity(
        [q.question for q in questions], bank, encode, top_n=top_n, threshold=threshold
    )
    test = [
        {
            "qid": q.qid,
            "query": q.question,
            "answers": list(q.answers),
            "time": None,
            "rule_ids": rules,
        }
        for q, rules in zip(questions, chosen, strict=True)
    ]
    with_rules = [len(r) for r in chosen if r]
    used = pd.Series([rule for rules in chosen for rule in rules], dtype=object)
    stats = {
        "questions": len(test),
        "documents": len(documents),
        "bank_rules": int(len(bank)),
        "bank_sources": sorted(bank["source"].unique().tolist()) if len(bank) else [],
        "questions_with_rules": len(with_rules),
        "share_with_rules": round(len(with_rules) / len(test), 4) if test else 0.0,
        "mean_rules_when_any": round(float(np.mean(with_rules)), 2) if with_rules else 0.0,
        "distinct_rules_used": int(used.nunique()),
        "top_n": top_n,
        "threshold": threshold,
    }
    corpus = [{"id": doc_id, "contents": text} for doc_id, text in documents]
    return QABenchmark(corpus, test, bank, stats)


def retrieval_runs(
    benchmark: QABenchmark, searcher: Searcher, k: int, rule_texts: Mapping[str, str]
) -> dict[str, pd.DataFrame]:
    """The `standard` (question alone) and `rg` (question ∘ each of its rules; the question
    alone where it has none) runs, in the retrieve stage's run format."""
    queries = [
        Query(r["qid"], r["query"], tuple(r["answers"]), tuple(r["rule_ids"]))
        for r in benchmark.test
    ]
    standard, _ = retrieve(queries, searcher, k, use_rules=False)
    guided, _ = retrieve(queries, searcher, k, rule_texts=rule_texts, use_rules=True)
    return {"standard": standard, "rg": guided}


def corpus_of(benchmark: QABenchmark) -> Corpus:
    return Corpus(
        tuple(d["id"] for d in benchmark.corpus), tuple(d["contents"] for d in benchmark.corpus)
    )


def qa_report(
    name: str, stats: Mapping[str, Any], metrics: Mapping[str, Mapping[str, Any]], claims: str
) -> str:
    """results.md: the rows' EM / T-F1 / Recall@k, how many questions got rules, the paired
    test, and the paper's Table 3 for reference."""
    lines = [f"# {name}: a QA set with RuleQA's rules", ""]
    lines.append(
        f"{stats['questions']} questions, {stats['documents']} documents; rules from "
        f"{', '.join(stats['bank_sources'])} ({stats['bank_rules']} rules), Sentence-BERT "
        f"similarity > {stats['threshold']}, at most {stats['top_n']}: "
        f"{stats['questions_with_rules']} questions "
        f"({100 * stats['share_with_rules']:.1f} %) got rules "
        f"({stats['mean_rules_when_any']} on average), {stats['distinct_rules_used']} distinct."
    )
    recall_names = [f"R@{k.rsplit('_', 1)[-1]}" for k in _recall_keys(metrics)]
    lines += [""]
    lines += markdown.table_lines(
        ["row", "EM", "T-F1", *recall_names],
        [
            [f"{row} ({m.get('generator')})", _pct(m.get("em")), _pct(m.get("token_f1"))]
            + [_pct(m.get(key)) for key in _recall_keys(metrics)]
            for row, m in metrics.items()
        ],
        align="lrr" + "r" * len(recall_names),
    )
    if claims:
        lines += ["", claims.strip()]
    lines += ["", "The paper's Table 3 (anonymous version), EM in %:", ""]
    sets = ["ASQA", "PopQA", "HotpotQA", "NQ"]
    lines += markdown.table_lines(
        ["setting", "row", *sets],
        [
            [setting, row, *(figures[s] for s in sets)]
            for (setting, row), figures in PAPER_TABLE3.items()
        ],
        align="ll" + "r" * len(sets),
    )
    return "\n".join(lines) + "\n"


def _recall_keys(metrics: Mapping[str, Mapping[str, Any]]) -> list[str]:
    keys = {k for m in metrics.values() for k in m if k.startswith("recall_at_")}
    return sorted(keys, key=lambda k: int(k.rsplit("_", 1)[-1]))


def _pct(value: Any) -> str:
    return "–" if value is None else f"{100 * float(value):.1f}"
