"""Build a RuleQA-style benchmark from a KG and its rule bank (RuleRAG paper, Section 2).

- Corpus D: each link of the configured splits (default train) as one short document,
  optionally filtered (the paper's static corpora are much smaller than their KGs).
- Test queries Q: test links whose relation has a bank rule, grouped into queries
  (subject, relation[, time]) whose gold answers are every object completing them in the KG,
  sampled evenly across popularity strata (popularity = the subject's train degree).
- F_R / F_G: the valid links' queries split into two disjoint halves by seed. F_R has one item
  per (query, selected rule) with oracle documents; F_G has queries, answers and rules.
No query (subject, relation[, time]) of F_R or F_G is also a test query.

Rules are selected once the queries are drawn (only the sampled test queries and the F pool
are asked), by the query's relation (`head`), by Sentence-BERT similarity, or by a rule
retriever (`RuleSelector`: vanilla / SIAR, optionally re-ranked with R³), which never sees the
relation. The corpus filter `rule_neighbourhood` always follows the `head` rules, so every
selection method is measured over the same corpus.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, get_args

import numpy as np
import pandas as pd

from rulerag.benchmark.settings import (
    BuildBenchmarkSettings,
    RuleSelectionSettings,
    SelectionMethod,
)
from rulerag.errors import InputError
from rulerag.kg.schema import KnowledgeGraph, format_time
from rulerag.kg.text import document_text, query_text
from rulerag.rules.selection import Encoder, select_by_head, select_by_similarity

KEY = ["head", "relation", "time"]
SELECTIONS: tuple[str, ...] = get_args(SelectionMethod)


class RuleSelector(Protocol):
    """A rule retriever for build_benchmark (`rulerag.rule_retrieval.selector`): bank rule ids
    per query text, best first, at most `top_n`; `shots` are (query, rule id) demonstrations
    for self-induction, `shots` many of them wanted; `cost` counts what it asked (LLM calls...),
    for stats.json."""

    shots: int
    cost: Mapping[str, int]

    def __call__(
        self, queries: Sequence[str], shots: Sequence[tuple[str, str]]
    ) -> list[list[str]]: ...


#: the benchmark's sizes beside the paper's Table 1 (stats key, label)
TABLE1_KEYS = (("rules", "rules"), ("corpus", "corpus docs"), ("f_r", "F_R"), ("f_g", "F_G"),
               ("test", "test queries"))  # fmt: skip


def table1(stats: Mapping[str, Any], paper: Mapping[str, int] | None = None) -> str:
    """The built sizes beside the paper's Table 1 row for the KG, as aligned text."""
    paper = paper or {}
    lines = [f"{'':14}{'built':>10}{'paper':>10}"]
    for key, label in TABLE1_KEYS:
        lines.append(f"{label:14}{stats[key]:>10,}{paper.get(key, float('nan')):>10,}")
    return "\n".join(lines)


#: the bank columns the benchmark reads (`rules.bank.rules_frame` writes them)
BANK_COLUMNS = ("rule_id", "head_relation", "length", "body", "body_relations", "score", "text")


def check_bank(bank: pd.DataFrame, source: str, fix: str) -> None:
    """Refuse a bank the benchmark cannot be built from, naming `source` (the file or the
    dataset) and `fix` (what to rerun).

    An empty bank, or a table without a bank's columns, used to fail deep in a pandas merge
    (`You are trying to merge on float64 and object columns for key 'rule_id'`); mine_rules
    stops on an empty bank itself, so this is a bank from elsewhere, or an old one.
    """
    missing = [column for column in BANK_COLUMNS if column not in bank.columns]
    if missing:
        raise InputError(
            f"{source}: not a rule bank: no column {missing} (it has {list(bank.columns)}); {fix}"
        )
    if bank.empty:
        raise InputError(
            f"{source}: no rule in it, so there is nothing to build a benchmark from; {fix}"
        )


@dataclass
class Benchmark:
    corpus: pd.DataFrame
    test: list[dict[str, Any]]
    f_r: list[dict[str, Any]]
    f_g: list[dict[str, Any]]
    stats: dict[str, Any] = field(default_factory=dict)


class _Namer:
    """Entity, relation and time names, looked up vectorised."""

    def __init__(self, kg: KnowledgeGraph) -> None:
        self.entity = kg.entities.set_index("id")["name"].astype(str)
        self.relation = kg.relations.set_index("id")["name"].astype(str)
        self.unit = kg.time_unit

    def times(self, values: pd.Series) -> pd.Series:
        if self.unit is None:
            return pd.Series([None] * len(values), index=values.index, dtype=object)
        uniq = {v: format_time(v, self.unit) for v in values.dropna().unique()}
        return values.map(lambda v: None if pd.isna(v) else uniq[v]).astype(object)


def gold_answers(facts: pd.DataFrame) -> pd.DataFrame:
    """Every object completing (head, relation, time) anywhere in the KG: any one counts."""
    uniq = facts.drop_duplicates(KEY + ["tail"]).sort_values(KEY + ["tail"], kind="stable")
    grouped = uniq.groupby(KEY, dropna=False, sort=False)["tail"].agg(list)
    return grouped.rename("answer_ids").reset_index()


def popularity(facts: pd.DataFrame) -> pd.Series:
    """An entity's degree among the train links (0 for entities the train split never names)."""
    train = facts[facts["split"] == "train"]
    return pd.concat([train["head"], train["tail"]]).value_counts()


def stratified_sample(
    candidates: pd.DataFrame, size: int | None, weights: Sequence[float], rng: np.random.Generator
) -> pd.DataFrame:
    """Assign popularity strata (equal-frequency, 0 = long tail) and sample by the weights.

    Strata come from the candidates' rank by popularity, so each holds the same number of
    candidates; each stratum then contributes in proportion to its weight. A stratum with too
    few candidates gives its leftover quota to the others.
    """
    n = len(candidates)
    order = candidates.sort_values(["popularity", *KEY], kind="stable", na_position="first")
    strata = np.minimum(np.arange(n) * len(weights) // max(n, 1), len(weights) - 1)
    order = order.assign(stratum=strata)
    if size is None or size >= n:
        return order
    weights_arr = np.asarray(weights, dtype=float)
    available = np.bincount(strata, minlength=len(weights)).astype(int)
    quota = np.zeros(len(weights), dtype=int)
    remaining = size
    open_ = (available > 0) & (weights_arr > 0)
    while remaining > 0 and open_.any():
        share = weights_arr * open_
        ideal = remaining * share / share.sum()
        take = np.floor(ideal).astype(int)
        leftover = remaining - take.sum()
        for i in np.argsort(-(ideal - take), kind="stable")[:leftover]:
            take[i] += 1
        take = np.minimum(take, available - quota)
        quota += take
        remaining -= int(take.sum())
        open_ = open_ & (quota < available)
        if take.sum() == 0:
            break
    picked = []
    for stratum, count in enumerate(quota):
        members = order.index[order["stratum"] == stratum]
        picked.extend(rng.choice(members, size=count, replace=False).tolist())
    return order.loc[sorted(picked, key=order.index.get_loc)]


def _query_keys(facts: pd.DataFrame, split: str, relations: set[int]) -> pd.DataFrame:
    links = facts[(facts["split"] == split) & facts["relation"].isin(relations)]
    return links[KEY].drop_duplicates().reset_index(drop=True)


def _first_subject_atom(bank: pd.DataFrame) -> pd.DataFrame:
    """Per rule: the body atom touching Entity1 (its relation, and whether it is inverse).

    Oracle documents are the corpus documents about the query's subject through this atom.
    """
    rows = []
    for rule_id, body in zip(bank["rule_id"], bank["body"], strict=True):
        for relation, subject, obj in json.loads(body):
            if 0 in (subject, obj):
                rows.append((rule_id, int(relation), subject != 0))
                break
    return pd.DataFrame(rows, columns=["rule_id", "body_relation", "inverse"])


def _atom_matches(items: pd.DataFrame, atoms: pd.DataFrame, corpus: pd.DataFrame) -> pd.DataFrame:
    """Corpus documents matching each (query, rule) item's subject atom: columns item index,
    doc id, the document's other entity and time."""
    with_atom = items.merge(atoms, on="rule_id")
    parts = []
    for inverse, subject_col, other_col in ((False, "head", "tail"), (True, "tail", "head")):
        side = with_atom[with_atom["inverse"] == inverse]
        docs = corpus[["id", "head", "relation", "tail", "time", "fact_row"]].rename(
            columns={subject_col: "subject", other_col: "other", "time": "doc_time"}
        )
        parts.append(
            side.merge(
                docs,
                left_on=["head", "body_relation"],
                right_on=["subject", "relation"],
                suffixes=("", "_doc"),
            )
        )
    return pd.concat(parts, ignore_index=True)


def _oracles(
    items: pd.DataFrame, atoms: pd.DataFrame, corpus: pd.DataFrame, temporal: bool, cap: int
) -> pd.Series:
    """Oracle document ids per F_R item, answer-bearing documents first, then the most recent."""
    matches = _atom_matches(items, atoms, corpus)
    if temporal:
        matches = matches[matches["doc_time"] < matches["time"]]
    answers = items[["item", "answer_ids"]].explode("answer_ids")
    answers = answers.rename(columns={"answer_ids": "other"}).astype({"other": "int64"})
    answers["is_answer"] = True
    matches = matches.astype({"other": "int64"}).merge(answers, on=["item", "other"], how="left")
    matches["is_answer"] = matches["is_answer"].fillna(False).astype(bool)
    matches = matches.sort_values(
        ["item", "is_answer", "doc_time", "fact_row"],
        ascending=[True, False, False, True],
        kind="stable",
        na_position="last",
    )
    return matches.groupby("item", sort=True)["id"].agg(lambda s: list(s.head(cap)))


def _filter_corpus(
    corpus: pd.DataFrame,
    how: str,
    bank: pd.DataFrame,
    queries: pd.DataFrame,
    atoms: pd.DataFrame,
) -> pd.DataFrame:
    if how == "none":
        return corpus
    if how == "rule_relations":
        relations = set(bank["head_relation"]) | {
            int(r) for body in bank["body_relations"] for r in json.loads(body)
        }
        return corpus[corpus["relation"].isin(relations)]
    if how == "query_entities":
        subjects = set(queries["head"])
        return corpus[corpus["head"].isin(subjects) | corpus["tail"].isin(subjects)]
    items = queries[["head", "rule_ids"]].explode("rule_ids").dropna()
    items = items.rename(columns={"rule_ids": "rule_id"}).drop_duplicates()
    items = items.assign(item=np.arange(len(items)))
    hits = _atom_matches(items, atoms, corpus)
    return corpus[corpus["id"].isin(set(hits["id"]))]


def _select_rules(
    frames: Sequence[pd.DataFrame],
    selection: RuleSelectionSettings,
    bank: pd.DataFrame,
    encoder: Encoder | None,
    selector: RuleSelector | None,
    rng: np.random.Generator,
) -> None:
    """Set each frame's `rule_ids` by the configured selection (in place).

    A rule retriever's self-induction shots are F_R queries (the first frame after the test
    one) with their best `head` rule, drawn by `rng`, never a test query; a query that is
    itself a shot gets the next drawn query in its place, so no prompt shows its own rule.
    """
    if selection.method == "head":
        for frame in frames:
            frame["rule_ids"] = frame["head_rule_ids"]
        return
    if selection.method == "similarity":
        if encoder is None:
            raise ValueError("rule selection 'similarity' needs an encoder")
        for frame in frames:
            frame["rule_ids"] = select_by_similarity(
                list(frame["query"]), bank, encoder, selection.top_n, selection.threshold
            )
        return
    if selector is None:
        raise ValueError(f"rule selection {selection.method!r} needs a rule selector")
    pool = frames[1][frames[1]["head_rule_ids"].map(len) > 0]
    drawn = pool.iloc[rng.permutation(len(pool))[: selector.shots + 1]]
    demos = [
        (str(q), str(rules[0]))
        for q, rules in zip(drawn["query"], drawn["head_rule_ids"], strict=True)
    ]
    for frame in frames:
        queries = [str(q) for q in frame["query"]]
        groups: dict[tuple[tuple[str, str], ...], list[int]] = {}
        for i, query in enumerate(queries):
            shots = tuple(d for d in demos if d[0] != query)[: selector.shots]
            groups.setdefault(shots, []).append(i)
        chosen: list[list[str]] = [[] for _ in queries]
        for shots, rows in groups.items():
            picked = selector([queries[i] for i in rows], list(shots))
            for i, rules in zip(rows, picked, strict=True):
                chosen[i] = list(rules)[: selection.top_n]
        frame["rule_ids"] = chosen


def build_benchmark(
    kg: KnowledgeGraph,
    bank: pd.DataFrame,
    settings: BuildBenchmarkSettings,
    encoder: Encoder | None = None,
    selector: RuleSelector | None = None,
    *,
    name: str = "build_benchmark",
) -> Benchmark:
    """Build corpus, Q, F_R and F_G deterministically from `settings.seed`; `settings` are
    params.yaml's `build_benchmark` for this KG (`BuildBenchmarkSettings.for_dataset`);
    `encoder` serves the `similarity` selection, `selector` the rule-retrieval ones (vanilla,
    SIAR, with R³ or not).

    A benchmark without test queries or without F_R items is an `InputError` saying why
    (`name`, e.g. `build_benchmark@icews14`, starts the message): written, it would only fail
    later stages, or train a retriever on nothing.
    """
    check_bank(bank, f"{name}: the rule bank", "select it from mined rules (mine_rules)")
    if not settings.for_one_dataset():
        raise ValueError(
            "build_benchmark takes the settings for one dataset: settings.for_dataset(dataset)"
        )
    facts = kg.facts.reset_index(drop=True).assign(fact_row=lambda f: np.arange(len(f)))
    names = _Namer(kg)
    pool = _candidate_queries(facts, bank, settings, names)
    test, f_r_q, f_g_q = _draw_queries(facts, bank, pool, settings, names, name)
    rng_shots = np.random.default_rng([settings.seed, 3])
    _select_rules((test, f_r_q, f_g_q), settings.rule_selection, bank, encoder, selector, rng_shots)
    atoms = _first_subject_atom(bank)
    corpus = _corpus(facts, bank, pool, atoms, settings, names)
    items, dropped = _f_r_items(f_r_q, atoms, corpus, kg.temporal, settings.max_oracle_docs)
    if dropped == len(items):
        reason = _why_no_f_r_item(facts, settings, f_r_q, len(items), corpus, pool)
        raise InputError(f"{name}: {reason}")
    items = items.dropna(subset=["oracle_doc_ids"])
    test_records = [_query_record(r, names) for _, r in test.iterrows()]
    f_g_records = [_query_record(r, names) for _, r in f_g_q.iterrows()]
    f_r_records = _f_r_records(items, f_r_q, bank, names)

    stats = _stats(kg, bank, corpus, test_records, f_r_records, f_g_records, settings)
    stats["f_r_items_without_oracle"] = dropped
    stats["f_r_queries"] = int(len(f_r_q))
    stats["finetune_queries_from_train"] = int(len(pool.moved))
    out_corpus = corpus[["id", "contents", "head", "relation", "tail", "time", "split"]]
    return Benchmark(out_corpus, test_records, f_r_records, f_g_records, stats)


@dataclass(frozen=True)
class _QueryPool:
    """The queries a benchmark is drawn from, with their names, text and `head` rules."""

    candidates: pd.DataFrame  # test queries whose relation has a bank rule
    valid: pd.DataFrame  # the F_R / F_G pool: valid queries the test split does not ask, + moved
    moved: pd.DataFrame  # train queries moved into the pool (`finetune_from_train`)
    ruled_valid: int  # valid queries with a bank rule, before the test split's are dropped


def _candidate_queries(
    facts: pd.DataFrame, bank: pd.DataFrame, settings: BuildBenchmarkSettings, names: _Namer
) -> _QueryPool:
    """Candidate queries: test links whose relation has a bank rule; valid links likewise,
    minus any query the test split also asks, plus `finetune_from_train` train queries that
    neither split asks."""
    ruled = set(int(r) for r in bank["head_relation"])
    degree = popularity(facts)
    top_n = settings.rule_selection.top_n
    candidates = _describe(_query_keys(facts, "test", ruled), bank, top_n, names, degree)
    test_keys = _query_keys(facts, "test", set(facts["relation"]))
    valid = _query_keys(facts, "valid", ruled)
    ruled_valid = len(valid)
    valid = valid.merge(test_keys, on=KEY, how="left", indicator=True)
    valid = valid[valid["_merge"] == "left_only"].drop(columns="_merge")
    moved = pd.DataFrame(columns=KEY)
    if settings.finetune_from_train:
        train = _query_keys(facts, "train", ruled)
        taken = pd.concat([test_keys, valid[KEY]]).drop_duplicates()
        train = train.merge(taken, on=KEY, how="left", indicator=True)
        train = train[train["_merge"] == "left_only"].drop(columns="_merge")
        rng_train = np.random.default_rng([settings.seed, 2])
        count = min(settings.finetune_from_train, len(train))
        moved = train.iloc[np.sort(rng_train.choice(len(train), size=count, replace=False))]
        valid = pd.concat([valid, moved], ignore_index=True)
    valid = _describe(valid, bank, top_n, names, degree)
    return _QueryPool(candidates, valid, moved, ruled_valid)


def _describe(
    frame: pd.DataFrame, bank: pd.DataFrame, top_n: int, names: _Namer, degree: pd.Series
) -> pd.DataFrame:
    """Names, query text and `head`-selected rules for candidate queries."""
    frame = frame.reset_index(drop=True)
    frame["popularity"] = frame["head"].map(degree).fillna(0).astype(int)
    frame["head_name"] = frame["head"].map(names.entity)
    frame["relation_name"] = frame["relation"].map(names.relation)
    frame["time_text"] = names.times(frame["time"])
    frame["query"] = [
        query_text(h, r, t)
        for h, r, t in zip(
            frame["head_name"], frame["relation_name"], frame["time_text"], strict=True
        )
    ]
    frame["head_rule_ids"] = select_by_head(list(frame["relation"]), bank, top_n)
    return frame


def _draw_queries(
    facts: pd.DataFrame,
    bank: pd.DataFrame,
    pool: _QueryPool,
    settings: BuildBenchmarkSettings,
    names: _Namer,
    name: str,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Q balanced over popularity strata; F_R / F_G the two seeded halves of the valid
    queries; each in a deterministic order with its gold answers and query ids. Fails before
    any rule is selected (a retrieval selection asks an LLM) when Q or F_R is empty."""
    rng_test = np.random.default_rng([settings.seed, 0])
    rng_split = np.random.default_rng([settings.seed, 1])
    weights = settings.strata.weights or (1.0,) * settings.strata.count  # None: equal
    test = stratified_sample(pool.candidates, settings.test_size, weights, rng_test)
    if test.empty:
        raise InputError(f"{name}: {_why_no_test_query(facts, bank, names)}")
    answers = gold_answers(facts)
    valid = pool.valid
    shuffled = valid.iloc[rng_split.permutation(len(valid))]
    half = (len(shuffled) + 1) // 2
    test = _finalise(test, answers, "test")
    f_r_q = _finalise(shuffled.iloc[:half], answers, "fr")
    f_g_q = _finalise(shuffled.iloc[half:], answers, "fg")
    if f_r_q.empty:
        reason = _why_no_f_r_item(facts, settings, f_r_q, 0, facts.iloc[:0], pool)
        raise InputError(f"{name}: {reason}")
    return test, f_r_q, f_g_q


def _finalise(frame: pd.DataFrame, answers: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """Deterministic order, gold answers and query ids."""
    frame = frame.sort_values(KEY, kind="stable", na_position="first").reset_index(drop=True)
    frame = frame.merge(answers, on=KEY, how="left")
    frame["qid"] = [f"{prefix}-{i + 1:05d}" for i in range(len(frame))]
    if "stratum" not in frame:
        frame["stratum"] = -1
    return frame


def _corpus(
    facts: pd.DataFrame,
    bank: pd.DataFrame,
    pool: _QueryPool,
    atoms: pd.DataFrame,
    settings: BuildBenchmarkSettings,
    names: _Namer,
) -> pd.DataFrame:
    """Corpus: the configured splits' links, never a test link nor one of a query moved into
    the F pool, then the configured filter, each link written as a document."""
    corpus = facts[facts["split"].isin(settings.corpus.splits)]
    test_links = facts.loc[facts["split"] == "test", ["head", "relation", "tail", "time"]]
    corpus = corpus.merge(test_links.drop_duplicates(), how="left", indicator=True)
    corpus = corpus[corpus["_merge"] == "left_only"].drop(columns="_merge")
    if len(pool.moved):  # queries moved into the F pool leave the corpus with all their links
        corpus = corpus.merge(
            pool.moved.astype(corpus[KEY].dtypes.to_dict()), on=KEY, how="left", indicator=True
        )
        corpus = corpus[corpus["_merge"] == "left_only"].drop(columns="_merge")
    corpus = corpus.sort_values("fact_row", kind="stable").reset_index(drop=True)
    corpus["id"] = "D" + corpus["fact_row"].astype(str)
    # Filters look at every candidate query, not only the sampled ones, so the corpus does not
    # change with test_size.
    queries = pd.concat([pool.candidates, pool.valid], ignore_index=True)
    queries = queries.assign(rule_ids=queries["head_rule_ids"])
    how = settings.corpus.filter
    assert isinstance(how, str)  # for_one_dataset
    corpus = _filter_corpus(corpus, how, bank, queries, atoms)
    corpus = corpus.reset_index(drop=True)
    corpus["contents"] = [
        document_text(h, r, o, t)
        for h, r, o, t in zip(
            corpus["head"].map(names.entity),
            corpus["relation"].map(names.relation),
            corpus["tail"].map(names.entity),
            names.times(corpus["time"]),
            strict=True,
        )
    ]
    return corpus


def _f_r_items(
    f_r_q: pd.DataFrame, atoms: pd.DataFrame, corpus: pd.DataFrame, temporal: bool, cap: int
) -> tuple[pd.DataFrame, int]:
    """F_R items: one per (query, selected rule) with its oracle documents (NaN: none, to be
    dropped), and how many have none."""
    items = (
        f_r_q[["qid", *KEY, "rule_ids", "answer_ids"]]
        .explode("rule_ids")
        .dropna(subset=["rule_ids"])
    )
    items = items.rename(columns={"rule_ids": "rule_id"}).reset_index(drop=True)
    items["item"] = np.arange(len(items))
    oracle = _oracles(items, atoms, corpus, temporal, cap)
    items["oracle_doc_ids"] = items["item"].map(oracle)
    return items, int(items["oracle_doc_ids"].isna().sum())


def _query_record(row: pd.Series, names: _Namer) -> dict[str, Any]:
    """A query as test.jsonl / f_g.jsonl write it."""
    answer_names = list(dict.fromkeys(names.entity[a] for a in row["answer_ids"]))
    return {
        "qid": row["qid"],
        "query": row["query"],
        "answers": answer_names,
        "answer_ids": [int(a) for a in row["answer_ids"]],
        "head": int(row["head"]),
        "head_name": row["head_name"],
        "relation": int(row["relation"]),
        "relation_name": row["relation_name"],
        "time": None if pd.isna(row["time"]) else int(row["time"]),
        "time_text": row["time_text"],
        "rule_ids": list(row["rule_ids"]),
        "popularity": int(row["popularity"]),
        "stratum": int(row["stratum"]),
    }


def _f_r_records(
    items: pd.DataFrame, f_r_q: pd.DataFrame, bank: pd.DataFrame, names: _Namer
) -> list[dict[str, Any]]:
    """F_R items as f_r.jsonl writes them: the query's record with one rule and its oracle
    documents in place of its rules."""
    rule_text = bank.set_index("rule_id")["text"]
    f_r_queries = {r["qid"]: _query_record(r, names) for _, r in f_r_q.iterrows()}
    records = []
    for item in items.itertuples(index=False):
        record = {k: v for k, v in f_r_queries[item.qid].items() if k != "rule_ids"}
        record.update(
            {
                "item_id": f"{item.qid}#{item.rule_id}",
                "rule_id": item.rule_id,
                "rule_text": str(rule_text[item.rule_id]),
                "oracle_doc_ids": list(item.oracle_doc_ids),
            }
        )
        records.append(record)
    return records


def _why_no_test_query(facts: pd.DataFrame, bank: pd.DataFrame, names: _Namer) -> str:
    """Why the benchmark has no test query: no test split, or none of its relations has a
    bank rule (a query is asked only where a rule can explain its answer)."""
    test = facts[facts["split"] == "test"]
    if test.empty:
        return (
            "the benchmark has no test query: the KG has no test facts (splits: "
            f"{sorted(set(facts['split']))}); ingest a KG with a test split"
        )
    heads = sorted(set(bank["head_relation"]))
    asked = test["relation"].value_counts()
    return (
        f"the benchmark has no test query: none of the KG's {len(test):,} test facts has a "
        f"relation with a bank rule, so no rule explains one (the bank's {len(bank)} rules "
        f"conclude {_names(heads, names.relation)}; the test facts are of "
        f"{_names(list(asked.index), names.relation)}); mine rules for the test relations "
        "(lower mine_rules' thresholds) or widen mine_rules.bank"
    )


def _why_no_f_r_item(
    facts: pd.DataFrame,
    settings: BuildBenchmarkSettings,
    f_r_q: pd.DataFrame,
    items: int,
    corpus: pd.DataFrame,
    pool: _QueryPool,
) -> str:
    """Why F_R (the retriever's fine-tuning set: a query, one of its rules and the documents
    that rule points to) has no item: no fine-tuning query, no rule selected for one, or no
    oracle document for any (query, rule) pair."""
    empty = "F_R, the retriever's fine-tuning set, is empty"
    selection, ruled_valid, moved = settings.rule_selection, pool.ruled_valid, pool.moved
    if f_r_q.empty:
        valid = int((facts["split"] == "valid").sum())
        from_train = f", and {len(moved)} moved from train" if settings.finetune_from_train else ""
        return (
            f"{empty}: there is no fine-tuning query (the KG's {valid:,} valid facts give "
            f"{ruled_valid} queries of a relation with a bank rule, none that the test split "
            f"does not ask too{from_train}); give the KG valid facts of the bank's relations, "
            "or set build_benchmark.finetune_from_train to move train queries into the pool"
        )
    if not items:
        return (
            f"{empty}: the rule selection '{selection.method}' chose no rule for any of its "
            f"{len(f_r_q)} queries (build_benchmark.rule_selection: top_n {selection.top_n}, "
            f"threshold {selection.threshold})"
        )
    mentioned = set(corpus["head"]) | set(corpus["tail"])
    seen = int(f_r_q["head"].isin(mentioned).sum())
    if len(facts) and bool((facts["head"] == facts["tail"]).all()):
        why = (
            "every fact of the KG is a self-loop (head = tail): its rules (r(X, Y) <= "
            "r(Y, X) and the like) explain no query by another fact"
        )
    elif not seen:
        why = (
            "no query's subject appears in the corpus at all (entities the corpus splits "
            "never name)"
        )
    else:
        why = f"{seen} of the queries' subjects appear in the corpus, through other relations"
    return (
        f"{empty}: no query is explained by a rule in the corpus: none of the "
        f"{items} (query, rule) pairs of its {len(f_r_q)} queries has an oracle document, a "
        f"corpus document (splits {list(settings.corpus.splits)}, filter "
        f"'{settings.corpus.filter}') linking the query's subject through the rule's first "
        f"body atom; {why}"
    )


def _names(ids: Sequence[int], relation: pd.Series, shown: int = 5) -> str:
    """Relation names for a message: the first `shown`, then how many more."""
    listed = [str(relation.get(int(i), i)) for i in ids[:shown]]
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(repr(n) for n in listed) + more


def _stats(
    kg: KnowledgeGraph,
    bank: pd.DataFrame,
    corpus: pd.DataFrame,
    test: list[dict],
    f_r: list[dict],
    f_g: list[dict],
    settings: BuildBenchmarkSettings,
) -> dict[str, Any]:
    def mean(values: list[int]) -> float:
        return round(float(np.mean(values)), 3) if values else 0.0

    strata = pd.Series([q["stratum"] for q in test], dtype="int64").value_counts().sort_index()
    return {
        "rules": int(len(bank)),
        "corpus": int(len(corpus)),
        "f_r": len(f_r),
        "f_g": len(f_g),
        "test": len(test),
        "answers_per_query": mean([len(q["answers"]) for q in test]),
        "rules_per_query": mean([len(q["rule_ids"]) for q in test]),
        "queries_without_rules": sum(1 for q in test + f_g if not q["rule_ids"]),
        "oracle_docs_per_item": mean([len(i["oracle_doc_ids"]) for i in f_r]),
        "strata": {str(k): int(v) for k, v in strata.items()},
        "corpus_filter": settings.corpus.filter,
        "selection": settings.rule_selection.method,
    }
