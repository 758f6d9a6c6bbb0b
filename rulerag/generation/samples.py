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

from rulerag.benchmark.sampling import sample_queries
from rulerag.generation.prompts import PromptFormat, Sample
from rulerag.generation.settings import RULE_FILTERS, GenerationSettings
from rulerag.io import iter_jsonl, read_jsonl, read_parquet
from rulerag.layout import RUN_FG_FILENAME, RUN_FILENAME, DataLayout
from rulerag.retrieval.data import read_rule_texts

__all__ = [
    "RUN_FG_FILENAME",
    "RUN_FILENAME",
    "build_samples",
    "fg_examples",
    "fg_samples",
    "load_corpus",
    "load_samples",
    "prompt_format",
    "retrieved_only",
    "sample_queries",
    "selected_rules",
    "united_documents",
    "united_lists",
]


def retrieved_only(records: Sequence[Mapping[str, Any]], run_path: Path) -> list[Mapping[str, Any]]:
    """The records whose queries the retrieval run holds (all of them when there is no run).

    The retrieval stage may search only a seeded sample of the F_G queries
    (`retrieve.f_g_queries`); training samples must come from that sample, or they would
    reach the generator without documents.
    """
    if not Path(run_path).is_file():
        return list(records)
    held = set(read_parquet(run_path, columns=["qid"])["qid"].astype(str))
    return [r for r in records if str(r["qid"]) in held]


def united_documents(
    run: pd.DataFrame,
    rules: str = "all",
    rule_ids: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, list[str]]:
    """Each query's documents: the union over its (query, rule) lists, best score first
    (`united_lists` without the rules)."""
    return {q: [doc for doc, _ in pairs] for q, pairs in united_lists(run, rules, rule_ids).items()}


def united_lists(
    run: pd.DataFrame,
    rules: str = "all",
    rule_ids: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, list[tuple[str, str]]]:
    """Each query's (document, rule that gave its best score) pairs: the union over its
    (query, rule) lists, best score first.

    The union is the retrieval stage's own (`rulerag.retrieval.rule_guided.unite`: best score
    per document, ties by per-rule rank, then id). `rules` keeps `all` rows, only the
    query-alone rows (`query_only`, rule == "") or only the rule-guided ones (`rules_only`).
    `rule_ids` (qid -> the rules the prompt will show) keeps only the lists retrieved with
    those rules (and the query-alone list), so `max_rules: 1` gives one rule and that rule's
    documents, not one rule with three rules' documents.
    """
    from rulerag.retrieval.rule_guided import NO_RULE, unite

    if rules not in RULE_FILTERS:
        raise ValueError(f"rules must be one of {RULE_FILTERS}, not {rules!r}")
    frame = run.astype({"qid": str, "doc_id": str})
    rule = frame["rule"].fillna(NO_RULE).astype(str) if "rule" in frame else NO_RULE
    frame = frame.assign(rule=rule)
    is_query = frame["rule"] == NO_RULE
    if rules != "all":
        frame = frame[is_query if rules == "query_only" else ~is_query]
        is_query = is_query[frame.index]
    if rule_ids is not None:
        allowed = {(str(q), str(r)) for q, ids in rule_ids.items() for r in ids}
        pairs = pd.Series(list(zip(frame["qid"], frame["rule"], strict=True)), frame.index)
        frame = frame[is_query | pairs.isin(allowed)]
    if frame.empty:
        return {}
    united = unite(frame)
    return {
        str(q): list(zip(g["doc_id"], g["rule"], strict=True))
        for q, g in united.groupby("qid", sort=False)
    }


def load_corpus(path: Path, ids: Iterable[str] | None = None) -> dict[str, str]:
    """Document id -> text, only for `ids` when given (the corpus can be large)."""
    wanted = set(ids) if ids is not None else None
    corpus: dict[str, str] = {}
    for record in iter_jsonl(path):
        doc_id = str(record["id"])
        if wanted is None or doc_id in wanted:
            corpus[doc_id] = str(record["contents"])
    return corpus


def selected_rules(
    record: Mapping[str, Any], rule_texts: Mapping[str, str], max_rules: int | None
) -> list[str]:
    """The rule ids a query's prompt shows and its documents come from: its selected rules that
    the bank holds, in the benchmark's order (best first), the first `max_rules` (None: all).
    The retrieval stage searched with the same bank rules in the same order."""
    ids = [str(r) for r in dict.fromkeys(record.get("rule_ids") or []) if str(r) in rule_texts]
    return ids if max_rules is None else ids[: int(max_rules)]


def build_samples(
    queries: Sequence[Mapping[str, Any]],
    *,
    rule_texts: Mapping[str, str],
    documents: Mapping[str, Sequence[str]] | None,
    corpus: Mapping[str, str],
    num_documents: int,
    max_rules: int | None,
    keep_retrieved: int = 10,
    doc_rules: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Sample]:
    """One `Sample` per query.

    `documents` maps qid -> ranked doc ids (None: the configuration retrieves nothing). The
    prompt gets the first `num_documents`; the first `keep_retrieved` are kept (text and ids)
    for Recall@k and the predictions file. Rules: `selected_rules`. A record with a `time` is
    a temporal query (the paper instruction's forms depend on it). `doc_rules` (qid -> doc id ->
    the rule whose list gave it its best score) goes to `extra["doc_rules"]`, aligned with
    `extra["doc_ids"]` (R²AG measures each document against the text that found it).
    """
    samples = []
    for record in queries:
        qid = str(record["qid"])
        rule_ids = selected_rules(record, rule_texts, max_rules)
        extra: dict[str, Any] = {"rule_ids": rule_ids}
        retrieved: tuple[str, ...] = ()
        prompt_docs: tuple[str, ...] = ()
        if documents is not None:
            ids = [d for d in documents.get(qid, []) if d in corpus]
            extra["doc_ids"] = ids[: max(num_documents, keep_retrieved)]
            if doc_rules is not None:
                found = doc_rules.get(qid, {})
                extra["doc_rules"] = [found.get(d, "") for d in extra["doc_ids"]]
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
                temporal=record.get("time") is not None,
                extra=extra,
            )
        )
    return samples


def load_samples(
    base: Path,
    queries: Sequence[Mapping[str, Any]],
    retrieval: str | None,
    run_file: str | Path | pd.DataFrame,
    rules: str,
    settings: GenerationSettings,
) -> list[Sample]:
    """The generator inputs of `queries` under data/<dataset>/ (`base`): their documents from
    the retrieval run `retrieval/<retrieval>/<run_file>` (a Path: that file; a frame: that run,
    as the robustness rows search their own queries; none when `retrieval` is None), united
    over the lists of the rules the prompt shows (`selected_rules`, filter `rules`), their rules
    from the bank, the document texts from the corpus."""
    layout = DataLayout(Path(base))
    rule_texts = read_rule_texts(layout.rule_bank)
    documents = None
    doc_rules = None
    needed: set[str] = set()
    if retrieval:
        run = _read_run(layout, retrieval, run_file, {str(q["qid"]) for q in queries})
        shown = {str(q["qid"]): selected_rules(q, rule_texts, settings.max_rules) for q in queries}
        lists = united_lists(run, rules, shown)
        documents = {q: [doc for doc, _ in pairs] for q, pairs in lists.items()}
        doc_rules = {q: dict(pairs) for q, pairs in lists.items()}
        needed = {d for ids in documents.values() for d in ids[: settings.keep_retrieved]}
    corpus = load_corpus(layout.corpus, needed) if needed else {}
    return build_samples(
        queries,
        rule_texts=rule_texts,
        documents=documents,
        corpus=corpus,
        num_documents=settings.num_documents,
        max_rules=settings.max_rules,
        keep_retrieved=max(settings.recall_k),
        doc_rules=doc_rules,
    )


def _read_run(
    layout: DataLayout, retrieval: str, run_file: str | Path | pd.DataFrame, qids: set[str]
) -> pd.DataFrame:
    """The rows of queries `qids` of the run `load_samples` unites, in the run's order: of the
    frame itself, or of the file (a name in the retrieval configuration's folder, or a path),
    read for those queries only (a rule-guided run at ×16 is 27.8 million rows; a grid row
    needs a hundred queries' of them). A fresh index either way: the rows are selected by
    label further on."""
    if isinstance(run_file, pd.DataFrame):
        kept = run_file[run_file["qid"].astype(str).isin(qids)]
        return kept.reset_index(drop=True)
    path = run_file if isinstance(run_file, Path) else layout.output(retrieval) / run_file
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run the retrieval stage for {retrieval}")
    return read_parquet(path, where=("qid", sorted(qids)))


def fg_samples(
    base: Path,
    n: int,
    retrieval: str | None,
    rules: str,
    settings: GenerationSettings,
    shuffle: bool = False,
) -> list[Sample]:
    """A seeded sample of n answered F_G queries as generator inputs (see `fg_examples`)."""
    layout = DataLayout(Path(base))
    pool = [r for r in read_jsonl(layout.queries("f_g")) if r.get("answers")]
    if retrieval:
        pool = retrieved_only(pool, layout.run(retrieval, "f_g"))
    chosen = sample_queries(pool, n, settings.seed)
    if shuffle:
        order = np.random.default_rng(settings.seed + 1).permutation(len(chosen))
        chosen = [chosen[int(i)] for i in order]
    return load_samples(base, chosen, retrieval, RUN_FG_FILENAME, rules, settings)


def fg_examples(
    base: Path,
    n: int,
    retrieval: str | None,
    prompt: str,
    rules: str,
    settings: GenerationSettings,
    shuffle: bool = False,
) -> list[tuple[str, str]]:
    """(prompt, first gold answer) pairs of a seeded sample of n answered F_G queries.

    Shared by generator training and the API generator's shots, so both see F_G exactly as
    the grid row will see a test query: documents from `retrieval`'s F_G run (only queries
    that run holds; none when `retrieval` is None), the prompt kind, style and rule filter.
    `shuffle` reorders the sample with seed + 1 (training splits dev off its head).
    """
    samples = fg_samples(base, n, retrieval, rules, settings, shuffle)
    return [(prompt_format(settings, s).render_sample(prompt, s), s.answers[0]) for s in samples]


def prompt_format(settings: GenerationSettings, sample: Sample) -> PromptFormat:
    """How `sample` is prompted under `settings` (the style, and the KG's kind)."""
    return PromptFormat(settings.prompt_style, sample.temporal)
