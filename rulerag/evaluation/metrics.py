"""Answer extraction and the paper's three metrics: Exact Match, Token-F1, Recall@k.

* Normalisation is SQuAD's (the convention the RAG literature and RuleRAG follow): lowercase,
  drop punctuation, drop the articles a/an/the, collapse whitespace. Both sides are normalised,
  so `"The United States."` matches the gold `United States`.
* A query may have several acceptable answers (every object completing the KG link); each
  metric takes the best over the golds, so naming any one of them is right.
* Token-F1 is a bag-of-tokens overlap on whitespace tokens of the normalised strings (true word
  tokens: `"Iran"` vs `"Iraq"` share no token, though they share characters).
* Recall@k asks whether a gold answer string occurs (case-insensitively) in the first k
  documents of the query's united retrieval list, as the retrieval stage computes it.

Scores are fractions in [0, 1] here; the report multiplies by 100 as the paper prints them.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "aggregate",
    "exact_match",
    "extract_answer",
    "normalize_answer",
    "recall_at_k",
    "score_prediction",
    "token_f1",
]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_WS = re.compile(r"\s+")

#: Where a generation stops being the answer: the model starting the next prompt section (the
#: paper style's `# Query:` ..., the legacy style's `Query:` ...), a chat-turn marker, or an
#: end-of-text token that was decoded as text.
_STOP_MARKERS = (
    "\n",
    "# Instruct:",
    "# Retrieved documents:",
    "# Rules:",
    "# Query:",
    "# Answer:",
    "Final Query:",
    "Query:",
    "Instruct:",
    "Retrieved documents:",
    "Rules:",
    "Answer:",
    "<|im_end|>",
    "<|im_start|>",
    "<|endoftext|>",
    "</s>",
    "<eos>",
    "<|eot_id|>",
)
#: Lead-ins models put before the answer itself ("Answer: X", "The answer is X").
_LEAD_INS = re.compile(
    r"^\s*(?:#?\s*(?:final\s+)?answer\s*[:：]\s*"
    r"|the\s+(?:final\s+|correct\s+)?answer(?:\s+to\s+(?:the|this)\s+(?:question|query))?"
    r"\s+is\s*[:：]?\s*)",
    re.IGNORECASE,
)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, no punctuation, no articles, single spaces."""
    text = str(text).lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return _WS.sub(" ", text).strip()


def extract_answer(generation: str) -> str:
    """The answer inside a raw generation.

    Generators are asked for the answer entity only, but small models add a lead-in ("Answer:",
    "The answer is"), continue into the next prompt section, or repeat chat markers. This keeps
    the text after any lead-in up to the first line break or section marker, without quotes,
    brackets and punctuation at either end. The rule is deliberately simple and the same for
    every configuration, so it cannot favour one row of the table. The paper's answers end with
    a full stop (`# Answer: Afghanistan.`, the `paper` style's training target); it is dropped
    with the other end punctuation, so `Afghanistan.` and `Afghanistan` are the same answer.
    """
    text = str(generation).strip()
    text = _LEAD_INS.sub("", text, count=1).lstrip()
    cut = len(text)
    for marker in _STOP_MARKERS:
        at = text.find(marker)
        if 0 <= at < cut:
            cut = at
    text = text[:cut].strip()
    text = _LEAD_INS.sub("", text, count=1).strip()
    return _strip_ends(text)


_END_PUNCT = " \t\"'`*.;,:"
_PAIRS = {")": "(", "]": "["}


def _strip_ends(text: str) -> str:
    """Quotes and punctuation off both ends; a bracket only when it has no partner, so
    `Citizen (Nigeria).` keeps its closing parenthesis and `(Iran` loses its opening one."""
    while True:
        before = text
        text = text.strip(_END_PUNCT)
        for close, open_ in _PAIRS.items():
            if text.endswith(close) and text.count(close) > text.count(open_):
                text = text[:-1]
            if text.startswith(open_) and text.count(open_) > text.count(close):
                text = text[1:]
        if text == before:
            return text


def _as_golds(golds: str | Iterable[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else [str(g) for g in golds]


def exact_match(prediction: str, golds: str | Iterable[str]) -> float:
    """1.0 when the normalised prediction equals any normalised gold answer, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(gold) for gold in _as_golds(golds)))


def _f1(pred_tokens: Sequence[str], gold_tokens: Sequence[str]) -> float:
    if not pred_tokens or not gold_tokens:
        # Both empty counts as agreement (SQuAD's convention), one empty as none.
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(pred_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: str | Iterable[str]) -> float:
    """Best bag-of-tokens F1 between the prediction and any gold (0.0 without golds)."""
    pred_tokens = normalize_answer(prediction).split()
    scores = [_f1(pred_tokens, normalize_answer(gold).split()) for gold in _as_golds(golds)]
    return max(scores, default=0.0)


def recall_at_k(documents: Sequence[str], golds: str | Iterable[str], k: int) -> float:
    """1.0 when a gold answer occurs in one of the first k documents, else 0.0.

    Case-insensitive whole-word match, the retrieval stage's own test
    (`rulerag.retrieval.metrics.answer_pattern`), so the R@10 of the result table is the
    retrieval stage's strict Recall@10 on the same queries.
    """
    from rulerag.retrieval.metrics import answer_pattern, contains_answer

    if k <= 0:
        raise ValueError(f"k must be positive, not {k}")
    pattern = answer_pattern(_as_golds(golds))
    return float(any(contains_answer(str(d), pattern) for d in documents[:k]))


def score_prediction(
    generation: str,
    golds: Sequence[str],
    documents: Sequence[str] | None = None,
    ks: Sequence[int] = (10,),
) -> dict[str, Any]:
    """Everything saved per query: the extracted answer, EM, Token-F1, Recall@k for each k
    (None when the configuration retrieves nothing, so "no retrieval" is not read as 0)."""
    answer = extract_answer(generation)
    record: dict[str, Any] = {
        "prediction": answer,
        "em": exact_match(answer, golds),
        "token_f1": token_f1(answer, golds),
    }
    for k in ks:
        record[f"recall_at_{k}"] = None if documents is None else recall_at_k(documents, golds, k)
    return record


def aggregate(records: Iterable[Mapping[str, Any]], keys: Sequence[str] | None = None) -> dict:
    """Means of the numeric per-query scores (None values skipped; a key with no values is None),
    plus the number of queries."""
    rows = list(records)
    if keys is None:
        keys = sorted(
            {k for row in rows for k in row if k in {"em", "token_f1"} or k.startswith("recall")}
        )
    out: dict[str, Any] = {"queries": len(rows)}
    for key in keys:
        values = [float(row[key]) for row in rows if row.get(key) is not None]
        out[key] = sum(values) / len(values) if values else None
    return out
