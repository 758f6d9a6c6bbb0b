"""Rules that answer: the `apply_rules` step and RuleQA queries answered by rules.

The step (`apply_mined_rules`) measures the rule bank as its miners' communities do (link
forecasting on the KG's test split, `forecasting.forecast`) and answers RuleQA's test queries
with explained candidates (`rule_answers`), which the grid's `symbolic` row and rule-derived
evidence read. For RuleQA the history is what the retrievers see: the facts of the corpus
splits (`build_benchmark.corpus.splits`), before the query time on a temporal KG, so the
symbolic row knows no more than the documents do. Its settings, params.yaml's `apply_rules`
section, are `rulerag.rules.settings.ApplySettings`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from rulerag import markdown
from rulerag.io import atomic_open, read_jsonl, read_parquet, write_json, write_jsonl
from rulerag.kg.schema import format_time
from rulerag.kg.text import document_text
from rulerag.layout import DataLayout
from rulerag.rules.aggregation import Candidates
from rulerag.rules.application import apply_rules
from rulerag.rules.applied_rule import RulesByHead, applied_rules
from rulerag.rules.edge_index import edges_with_inverses
from rulerag.rules.forecasting import FORECAST_QUERY_CHUNK, forecast, rounded_metrics
from rulerag.rules.rule import Rule
from rulerag.rules.rule_clusters import rule_clusters
from rulerag.rules.rule_table import RULE_TABLE_COLUMNS, RuleTable
from rulerag.rules.settings import ApplySettings, ClusterLabels

__all__ = [
    "PUBLISHED",
    "AppliedRules",
    "RuleAnswers",
    "apply_mined_rules",
    "results_markdown",
    "rule_answers",
]

#: TLogic's published ICEWS14 link-forecasting figures (its Table 3; rule lengths 1-3, 200
#: walks, window 0), the reference the stage's report prints beside ours
PUBLISHED = {
    "icews14": {
        "source": "TLogic (Liu et al., AAAI 2022), Table 3",
        "mrr": 0.4304,
        "hits_at_1": 0.3356,
        "hits_at_3": 0.4827,
        "hits_at_10": 0.6117,
    }
}


#: the link-forecasting figures, in the papers' column order
FIGURES = ("mrr", "hits_at_1", "hits_at_3", "hits_at_10")


@dataclass
class AppliedRules:
    """What the `apply_rules` stage writes: the link-forecasting figures (metrics.json), the
    RuleQA test queries' explained candidates (answers.jsonl) and the report (results.md).

    The answers come as they are made (`answers`, read once, by `write`): held all at once
    they grew with the test queries (0.9 GiB of the 4.5 GiB peak on ICEWS14 grown sixteen
    times, benchmarks/bench_scale.py), so the share answered, the last figure, and the report
    are known once they are written."""

    metrics: dict[str, Any]
    answers: Iterable[dict[str, Any]]
    settings: ApplySettings

    def write(self, folder: Path) -> None:
        """answers.jsonl (a chunk of queries at a time), metrics.json and results.md into
        `folder` (a staging folder: `io.staged_outputs`)."""
        counts = [0, 0]  # queries, answered

        def counted() -> Iterator[dict[str, Any]]:
            for answer in self.answers:
                counts[0] += 1
                counts[1] += bool(answer["candidates"])
                yield answer

        write_jsonl(folder / "answers.jsonl", counted())
        self.metrics["ruleqa_answered"] = round(counts[1] / max(1, counts[0]), 4)
        write_json(folder / "metrics.json", self.metrics)
        with atomic_open(folder / "results.md") as handle:
            handle.write(self.results)

    @property
    def results(self) -> str:
        """results.md's text (once `write` has counted the answers)."""
        if "ruleqa_answered" not in self.metrics:
            raise RuntimeError("the report needs the answers written first (AppliedRules.write)")
        return results_markdown(self.metrics, self.settings)


def apply_mined_rules(
    settings: ApplySettings,
    corpus_splits: Sequence[str],
    layout: DataLayout,
    rule_splits: Sequence[str] = ("train",),
) -> AppliedRules:
    """The `apply_rules` stage on one dataset's files (`layout`): every mined rule applied to
    a seeded sample of the KG's test facts (link forecasting on a temporal KG, link prediction
    on a static one, over the facts of `rule_splits`, `mine_rules.splits`, the rules' own
    training facts), then RuleQA's test queries answered from the history the retrievers see
    (the facts of `corpus_splits`, `build_benchmark.corpus.splits`)."""
    facts = read_parquet(layout.facts)
    entities = read_parquet(layout.entities)
    relations = read_parquet(layout.relations)
    # columns, not millions of Rule objects (FB15k-237 with rules with constants: rule_table)
    names = pq.read_schema(layout.rules).names
    rules = RuleTable(read_parquet(layout.rules, [c for c in RULE_TABLE_COLUMNS if c in names]))
    temporal = bool(facts["time"].notna().any())
    applying = settings.for_data(temporal)
    started = time.perf_counter()
    clustering = (
        rule_clusters(rules, facts, len(relations), applying)
        if applying.aggregation == "nrnoisy_or"
        else None
    )
    clusters = clustering.labels if clustering else None
    # made once for both (FB15k-237 with rules with constants: 13.8 million rules and copies)
    applied = applied_rules(rules, len(relations), applying)
    result = forecast(
        facts,
        rules,
        len(relations),
        len(entities),
        applying,
        max_facts=settings.evaluate_facts,
        seed=settings.seed,
        clusters=clusters,
        history_splits=tuple(rule_splits),
        applied=applied,
    )
    seconds = time.perf_counter() - started
    metrics = {
        "dataset": layout.dataset,
        "temporal": temporal,
        "rules": len(rules),
        "test_facts": len(result.ranks) // 2,  # each fact is two queries
        "seconds": round(seconds, 1),
        "queries_per_minute": round(60 * len(result.ranks) / max(seconds, 1e-9)),
        **rounded_metrics(result.metrics),
        "published": PUBLISHED.get(layout.dataset),
    }
    if clustering:
        metrics["clusters"] = clustering.summary()
    history = facts[facts["split"].isin(corpus_splits)]
    answer = RuleAnswers(
        rules,
        history,
        len(relations),
        applying,
        entity_names=dict(zip(entities["id"], entities["name"], strict=True)),
        relation_names=dict(zip(relations["id"], relations["name"], strict=True)),
        time_unit=json.loads(layout.kg_stats.read_text())["time_unit"],
        keep=settings.candidates,
        clusters=clusters,
        applied=applied,
    )
    answers = answer.as_made(read_jsonl(layout.queries("test")))
    return AppliedRules(metrics, answers, settings)


class RuleAnswers:
    """The mined rules ready to answer RuleQA queries with explained candidates: the rules in
    TLogic's ids and the history's edges, built once (0.15 s for ICEWS14's 24,025 rules), so a
    caller that answers again and again (the served model, a question at a time) does not
    build them per call. `clusters` (nrnoisy_or): the rules' clusters as `rule_clusters`
    learned them on the KG's splits."""

    def __init__(
        self,
        rules: Sequence[Rule],
        history: pd.DataFrame,
        n_relations: int,
        settings: ApplySettings,
        *,
        entity_names: Mapping[int, str],
        relation_names: Mapping[int, str],
        time_unit: str | None = None,
        keep: int = 10,
        clusters: ClusterLabels | None = None,
        applied: RulesByHead | None = None,
    ) -> None:
        self.rules, self.n_relations, self.settings = rules, n_relations, settings
        self.entity_names, self.relation_names = entity_names, relation_names
        self.time_unit, self.keep, self.clusters = time_unit, keep, clusters
        self.applied = (
            applied if applied is not None else applied_rules(rules, n_relations, settings)
        )
        self.edges = edges_with_inverses(history, n_relations)

    def __call__(
        self,
        queries: Sequence[Mapping[str, Any]],
        *,
        progress: bool = True,
        chunk: int = FORECAST_QUERY_CHUNK,
    ) -> list[dict[str, Any]]:
        """For each RuleQA query (`head`, `relation`, `time`): its best `keep` candidates with
        score, the rule that scored it best (text) and that rule's body facts, written as the
        corpus writes documents (`Time 2014-06-23 A Make a visit B.`), best first.

        The queries are applied `chunk` at a time, each chunk's candidates reduced to their
        best `keep` before the next: a query's candidates depend on it alone, so the chunks
        change nothing but the memory (all of them at once grew with the query count, 7.7 GB
        for the 46,860 queries of ICEWS14 x 4, benchmarks/bench_scale.py)."""
        return list(self.as_made(queries, progress=progress, chunk=chunk))

    def as_made(
        self,
        queries: Sequence[Mapping[str, Any]],
        *,
        progress: bool = True,
        chunk: int = FORECAST_QUERY_CHUNK,
    ) -> Iterator[dict[str, Any]]:
        """The answers `__call__` lists, each chunk's as it is made (the stage writes them so,
        never holding them all)."""
        starts = range(0, len(queries), chunk)
        for start in tqdm(starts, desc="RuleQA answers", unit="chunk", disable=not progress):
            block = queries[start : start + chunk]
            frame = pd.DataFrame(
                {
                    "key": range(len(block)),
                    "sub": [int(q["head"]) for q in block],
                    "rel": [int(q["relation"]) for q in block],
                    "ts": [0 if q.get("time") is None else int(q["time"]) for q in block],
                }
            )
            found = apply_rules(
                frame, self.applied, self.edges, self.settings, clusters=self.clusters,
                progress=False,
            )  # fmt: skip
            yield from [self._explained(query, found[key]) for key, query in enumerate(block)]

    def _fact_text(self, sub: int, rel: int, obj: int, ts: int) -> str:
        if rel >= self.n_relations:  # an inverse edge, read forwards
            sub, rel, obj = obj, rel - self.n_relations, sub
        when = format_time(ts, self.time_unit) if self.settings.temporal else None
        names = self.entity_names
        return document_text(names[sub], self.relation_names[rel], names[obj], when)

    def _explained(self, query: Mapping[str, Any], candidates: Candidates) -> dict[str, Any]:
        names, relations = self.entity_names, self.relation_names
        return {
            "qid": str(query["qid"]),
            "candidates": [
                {
                    "entity": entity,
                    "name": names[entity],
                    "score": round(score, 6),
                    "rule": self.rules[candidates.rules[entity]].text(relations, names),
                    "evidence": [self._fact_text(*f) for f in candidates.explanations[entity]],
                }
                for entity, score in candidates.ranked()[: self.keep]
            ],
        }


def rule_answers(
    queries: Sequence[Mapping[str, Any]],
    rules: Sequence[Rule],
    history: pd.DataFrame,
    n_relations: int,
    settings: ApplySettings,
    *,
    entity_names: Mapping[int, str],
    relation_names: Mapping[int, str],
    time_unit: str | None = None,
    keep: int = 10,
    clusters: ClusterLabels | None = None,
    progress: bool = True,
    applied: RulesByHead | None = None,
) -> list[dict[str, Any]]:
    """`RuleAnswers` built for one call: the RuleQA queries' explained candidates
    (`applied`: the rules as `applied_rules` made them, when the caller has them)."""
    answer = RuleAnswers(
        rules, history, n_relations, settings, entity_names=entity_names,
        relation_names=relation_names, time_unit=time_unit, keep=keep, clusters=clusters,
        applied=applied,
    )  # fmt: skip
    return answer(queries, progress=progress)


def results_markdown(metrics: Mapping[str, Any], settings: ApplySettings) -> str:
    """The stage's report: our link-forecasting figures beside the published ones."""
    published = metrics.get("published") or {}
    kind = "link forecasting" if metrics["temporal"] else "link prediction"
    queries = f"{int(metrics['queries']):,}"
    rows = [["ours", *(f"{metrics[k]:.4f}" for k in FIGURES), queries]]
    rows += [
        [f"ours, {label}", *(f"{metrics[convention][k]:.4f}" for k in FIGURES), queries]
        for convention, label in (("ties_average", "ties averaged"), ("ties_last", "ties last"))
        if convention in metrics
    ]
    if published:
        rows.append([published["source"], *(f"{published[k]:.4f}" for k in FIGURES), "all"])
    lines = [f"# {metrics['dataset']}: rule application ({kind})", ""]
    lines += markdown.table_lines(
        [None, "MRR", "Hits@1", "Hits@3", "Hits@10", "queries"], rows, align="lrrrrr"
    )
    sample = settings.evaluate_facts
    lines += [
        "",
        f"- {metrics['rules']:,} mined rules, lengths {list(settings.lengths)}, window "
        f"{settings.window}, top-k {settings.top_k}, score a = {settings.a}, λ = {settings.lmbda}"
        + (", noisy-or exact" if settings.noisy_or == "exact" else "")
        + "; "
        f"{metrics['test_facts']:,} test facts"
        + (f" (a seeded sample of {sample:,})" if sample else " (all)")
        + f", both directions; {metrics['seconds']} s ({metrics['queries_per_minute']:,} "
        "queries a minute).",
        f"- Rules answered {100 * metrics['answered_by_rules']:.1f} % of the queries (the "
        "rest: the relation's most frequent training objects, TLogic's baseline"
        + (
            "; `baseline: below_rules`: the same frequencies also order the rules' tied "
            "candidates and rank the entities the rules miss after theirs"
            if settings.baseline == "below_rules"
            else ""
        )
        + "); RuleQA test queries with a rule-derived candidate: "
        f"{100 * metrics['ruleqa_answered']:.1f} %.",
        "- Ranks: 1 + the candidates scored higher, the answer first among its ties (TLogic's "
        "`best`, its published protocol); `ties averaged` at the mean of its first and last "
        "place among them (SAFRAN's evaluation, the protocol of AnyBURL's and SAFRAN's "
        "figures), `ties last` after all of them.",
    ]
    return "\n".join(lines) + "\n"
