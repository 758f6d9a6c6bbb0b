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
5. applies the mined rules to the query (`rules.answers.rule_answers`: TLogic's semantics, each
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
from rulerag.rules.answers import rule_answers
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
        self.searcher = self.plain = None
        if self.retrieval:
            config = parse_config(self.retrieval)
            self.searcher = self._searcher(config.name, model_cache)
            plain = f"{config.index}-standard"
            self.plain = self.searcher if plain == config.name else self._searcher(plain, None)
            self.plain_name = plain
            self.rule_queries = rule_query_texts(self.rule_texts, params.retrieve.rule_query)
        self.generator = make_generator(layout.root, self.grid, generation, self.retrieval)
        facts = read_parquet(layout.facts)
        self.history = facts[facts["split"].isin(params.build_benchmark.corpus.splits)]
        self.rules = frame_rules(read_parquet(layout.rules))
        self.applying = params.apply_rules.for_data(self.time_unit is not None)
        self.n_relations = len(relations)

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
        run = self._search(records, self.searcher, use_rules=True)
        plain = self._search(records, self.plain, use_rules=False)
        shown = {r["qid"]: self._shown_rules(r) for r in records}
        lists = united_lists(run, self.grid.rules, shown) if run is not None else {}
        documents = {q: [d for d, _ in pairs] for q, pairs in lists.items()}
        settings = self.params.generation
        samples = build_samples(
            records,
            rule_texts=self.rule_texts,
            documents=documents if run is not None else None,
            corpus=self.corpus,
            num_documents=settings.num_documents,
            max_rules=settings.max_rules,
            keep_retrieved=max(settings.recall_k),
        )
        prompts = [prompt_format(settings, s).render_sample(self.grid.prompt, s) for s in samples]
        generations = self.generator.generate(prompts)
        candidates = self._candidates(records)
        return [
            self._output(q, r, run, plain, lists.get(r["qid"], []), g, c)
            for q, r, g, c in zip(questions, records, generations, candidates, strict=True)
        ]

    def _shown_rules(self, record: Mapping[str, Any]) -> list[str]:
        """The rules the row's prompt shows and its documents come from (the grid's)."""
        return selected_rules(record, self.rule_texts, self.params.generation.max_rules)

    def _search(
        self, records: Sequence[Mapping[str, Any]], searcher: Any, *, use_rules: bool
    ) -> pd.DataFrame | None:
        if searcher is None:
            return None
        queries = [
            Query(r["qid"], r["query"], rule_ids=tuple(self._shown_rules(r) if use_rules else ()))
            for r in records
        ]
        config = parse_config(self.retrieval if use_rules else self.plain_name)
        run, _ = retrieve(
            queries,
            searcher,
            self.params.retrieve.top_k,
            self.rule_queries,
            config.use_rules and use_rules,
        )
        return run

    def _candidates(self, records: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]]:
        answers = rule_answers(
            records,
            self.rules,
            self.history,
            self.n_relations,
            self.applying,
            entity_names=self.entity_names,
            relation_names=self.relation_names,
            time_unit=self.time_unit,
            keep=self.params.serve.candidates,
            progress=False,
        )
        return [a["candidates"] for a in answers]

    def _output(
        self,
        question: Question,
        record: Mapping[str, Any],
        run: pd.DataFrame | None,
        plain: pd.DataFrame | None,
        pairs: Sequence[tuple[str, str]],
        generation: str,
        candidates: list[dict[str, Any]],
    ) -> dict[str, Any]:
        n = self.params.serve.documents
        qid = record["qid"]
        with_rules = []
        if run is not None:
            best = run[run["qid"] == qid].groupby("doc_id")["score"].max()
            with_rules = [
                {
                    "id": doc,
                    "text": self.corpus[doc],
                    "score": round(float(best[doc]), 4),
                    "rule_id": rule,
                }
                for doc, rule in pairs[:n]
                if doc in self.corpus
            ]
        without = []
        if plain is not None:
            united = unite(plain[plain["qid"] == qid], n)
            without = [
                {"id": doc, "text": self.corpus[doc], "score": round(float(score), 4)}
                for doc, score in zip(united["doc_id"], united["score"], strict=True)
                if doc in self.corpus
            ]
        answer = extract_answer(generation)
        gold = question.gold
        return {
            "input": question.given,
            "link": question.link.as_dict(),
            "qid": question.test_qid,
            "gold": gold,
            "rules": [
                {"rule_id": r, "text": self.rule_texts[r], "confidence": self.confidence[r]}
                for r in self._shown_rules(record)
            ],
            "documents": {"with_rules": with_rules, "without_rules": without},
            "answer": answer,
            "generation": generation,
            "correct": None if gold is None else bool(exact_match(answer, gold)),
            "candidates": candidates,
        }

    @property
    def examples(self) -> list[dict[str, str]]:
        """The RuleQA test queries a person may pick: id and text."""
        return [{"qid": str(t["qid"]), "query": str(t["query"])} for t in self.tests]
