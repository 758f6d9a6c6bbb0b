"""The trained RuleRAG path, live: a question in, the answer and everything that explains it out.

`Answerer` holds what one grid row (`serve.row`, RuleRAG-FT by default) answers with, loaded
once from a folder laid out as data/<dataset>/ (`package_model` packs the files it needs;
`DataLayout` names them): the KG's names, the rule bank, the corpus, the row's retriever (the
RGFT query encoder over the corpus index), the generator with its adapter, and the mined rules
with the history they are applied to. Per question it

1. links the input to the KG (`questions.QuestionReader`);
2. takes the rules the row's prompt shows (a test query's benchmark rules, else the bank's best
   for the relation, as `build_benchmark` selects them);
3. searches with the row's retriever (one search per (query, rule), `rule_guided.retrieve`) and,
   beside it, with the plain query alone (Standard RAG's untuned encoder, or BM25): the
   documents the rules brought in, and those plain retrieval would have;
4. renders the row's prompt and generates (`LocalGenerator.generate`, the grid's own batching);
5. applies the mined rules to the query (`rules.answers.RuleAnswers`: TLogic's semantics, each
   candidate with the rule and body facts that explain it).

Steps 2-4 are the grid's own functions (`samples.united_lists`, `samples.build_samples`,
`prompts.PromptFormat.render_sample`), so the RuleRAG test queries asked together in the grid's
order get the grid's prompts and, with the same batches, its generations (the parity test).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rulerag.errors import InputError
from rulerag.evaluation.metrics import exact_match, extract_answer
from rulerag.generation.generators import make_generator
from rulerag.generation.grid_names import grid_config, retrieval_name
from rulerag.generation.samples import (
    build_samples,
    prompt_format,
    selected_rules,
    united_lists,
)
from rulerag.io import read_jsonl, read_parquet
from rulerag.layout import DataLayout
from rulerag.params import Params
from rulerag.retrieval.configs import parse_config
from rulerag.retrieval.data import Query, read_corpus
from rulerag.retrieval.rule_guided import retrieve, rule_query_texts, unite
from rulerag.retrieval.runs import open_searcher
from rulerag.rules.answers import RuleAnswers
from rulerag.rules.bank import frame_rules
from rulerag.rules.selection import select_by_head
from rulerag.serving.linking import Linker
from rulerag.serving.questions import Question, QuestionReader

__all__ = ["Answerer"]


class Answerer:
    """One grid row's generator, retriever and rules, answering questions (module doc)."""

    def __init__(self, root: Path, params: Params, *, model_cache: Path | None = None) -> None:
        layout = DataLayout(Path(root))
        self.layout, self.params = layout, params
        serve, generation = params.serve, params.generation
        self.grid = grid_config(serve.row, generation)
        self.retrieval = (
            retrieval_name(self.grid.retrieval, generation.retriever)
            if self.grid.retrieval
            else None
        )
        entities = read_parquet(layout.entities)
        relations = read_parquet(layout.relations)
        stats = json.loads(layout.kg_stats.read_text(encoding="utf-8"))
        self.entity_names = dict(zip(entities["id"], entities["name"], strict=True))
        self.relation_names = dict(zip(relations["id"], relations["name"], strict=True))
        self.time_unit = stats.get("time_unit")
        bank = read_parquet(layout.rule_bank)
        self.rule_texts = dict(
            zip(bank["rule_id"].astype(str), bank["text"].astype(str), strict=True)
        )
        self.confidence = dict(
            zip(
                bank["rule_id"].astype(str),
                bank["confidence"].fillna(bank["score"]).astype(float),
                strict=True,
            )
        )
        top_n = params.build_benchmark.rule_selection.top_n
        relation_ids = sorted(self.relation_names)
        heads = dict(zip(relation_ids, select_by_head(relation_ids, bank, top_n), strict=True))
        self.tests = read_jsonl(layout.queries("test"))
        self.reader = QuestionReader(
            Linker.from_kg(entities, relations, stats, threshold=serve.fuzzy_threshold),
            self.tests,
            heads,
        )
        corpus = read_corpus(layout.corpus)
        self.corpus = dict(zip(corpus.ids, corpus.contents, strict=True))
        self.searcher = self.plain = self.config = None
        self.rule_queries: dict[str, str] = {}
        if self.retrieval:
            self.rule_queries = rule_query_texts(self.rule_texts, params.retrieve.rule_query)
            self.config = parse_config(self.retrieval)
            self.searcher = self._searcher(self.config.name, model_cache)
            plain = f"{self.config.index}-standard"
            self.plain = self.searcher if plain == self.config.name else self._searcher(plain, None)
        self.generator = make_generator(layout.root, self.grid, generation, self.retrieval)
        facts = read_parquet(layout.facts)
        # the mined rules and the history they are applied to, built once (not per question)
        self.rule_answers = RuleAnswers(
            frame_rules(read_parquet(layout.rules)),
            facts[facts["split"].isin(params.build_benchmark.corpus.splits)],
            len(relations),
            params.apply_rules.for_data(self.time_unit is not None),
            entity_names=self.entity_names,
            relation_names=self.relation_names,
            time_unit=self.time_unit,
            keep=serve.candidates,
        )

    def _searcher(self, name: str, model_cache: Path | None) -> Any:
        try:
            return open_searcher(parse_config(name), self.layout, self.params.index, model_cache)
        except FileNotFoundError as err:
            raise InputError(f"the packaged model lacks {name}'s files: {err}") from None

    # -- answering -------------------------------------------------------------------------
    def answer(self, inputs: Sequence[Any]) -> list[dict[str, Any]]:
        """One output per input, in order (see `rulerag.serving` for the fields); a bad input
        fails the whole call with an `InputError` before anything is searched."""
        questions = self.reader.read(inputs)
        records = [{**q.record, "qid": str(i)} for i, q in enumerate(questions)]
        settings = self.params.generation
        # the rules the row's prompt shows and its documents come from (the grid's)
        shown = {r["qid"]: selected_rules(r, self.rule_texts, settings.max_rules) for r in records}
        guided = self.config is not None and self.config.use_rules
        run = self._search(records, self.searcher, shown if guided else None)
        plain = self._search(records, self.plain, None)
        lists = united_lists(run, self.grid.rules, shown) if run is not None else {}
        samples = build_samples(
            records,
            rule_texts=self.rule_texts,
            documents=None if run is None else {q: [d for d, _ in p] for q, p in lists.items()},
            corpus=self.corpus,
            num_documents=settings.num_documents,
            max_rules=settings.max_rules,
            keep_retrieved=max(settings.recall_k),
        )
        prompts = [prompt_format(settings, s).render_sample(self.grid.prompt, s) for s in samples]
        generations = self.generator.generate(prompts)
        candidates = self.rule_answers(records, progress=False)
        n = self.params.serve.documents
        best = {} if run is None else run.groupby(["qid", "doc_id"])["score"].max().to_dict()
        without: dict[str, list[dict[str, Any]]] = {r["qid"]: [] for r in records}
        if plain is not None:
            for qid, doc, score in unite(plain, n)[["qid", "doc_id", "score"]].itertuples(
                index=False
            ):
                if doc in self.corpus:
                    without[qid].append(
                        {"id": doc, "text": self.corpus[doc], "score": round(float(score), 4)}
                    )
        outputs = []
        for question, record, generation, found in zip(
            questions, records, generations, candidates, strict=True
        ):
            qid = record["qid"]
            with_rules = [
                {
                    "id": doc,
                    "text": self.corpus[doc],
                    "score": round(float(best[(qid, doc)]), 4),
                    "rule_id": rule,
                }
                for doc, rule in lists.get(qid, [])[:n]
                if doc in self.corpus
            ]
            outputs.append(
                self._output(question, shown[qid], with_rules, without[qid], generation, found)
            )
        return outputs

    def _search(
        self,
        records: Sequence[Mapping[str, Any]],
        searcher: Any,
        shown: Mapping[str, Sequence[str]] | None,
    ) -> pd.DataFrame | None:
        """The run of `searcher` for the records: one search per (query, shown rule), or per
        query alone when `shown` is None (the plain retrieval, or a row without rules)."""
        if searcher is None:
            return None
        queries = [
            Query(r["qid"], r["query"], rule_ids=tuple(shown[r["qid"]] if shown else ()))
            for r in records
        ]
        top_k = self.params.retrieve.top_k
        run, _ = retrieve(queries, searcher, top_k, self.rule_queries, shown is not None)
        return run

    def _output(
        self,
        question: Question,
        rule_ids: Sequence[str],
        with_rules: list[dict[str, Any]],
        without_rules: list[dict[str, Any]],
        generation: str,
        candidates: Mapping[str, Any],
    ) -> dict[str, Any]:
        answer = extract_answer(generation)
        gold = question.gold
        return {
            "input": question.given,
            "link": question.link.as_dict(),
            "qid": question.test_qid,
            "gold": gold,
            "rules": [
                {"rule_id": r, "text": self.rule_texts[r], "confidence": self.confidence[r]}
                for r in rule_ids
            ],
            "documents": {"with_rules": with_rules, "without_rules": without_rules},
            "answer": answer,
            "generation": generation,
            "correct": None if gold is None else bool(exact_match(answer, gold)),
            "candidates": candidates["candidates"],
        }

    @property
    def examples(self) -> list[dict[str, str]]:
        """The RuleQA test queries a person may pick: id and text."""
        return [{"qid": str(t["qid"]), "query": str(t["query"])} for t in self.tests]
