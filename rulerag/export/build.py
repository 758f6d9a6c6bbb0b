"""The `export` step: one dataset's RuleQA files -> data/<dataset>/export/.

    huggingface/       corpus, rules, test, f_r, f_g (Parquet or JSON Lines), README.md (the
                       dataset card), checksums.sha256            `datasets.load_dataset`
    dpr/               rgft.json, ssft.json                         DPR, Tevatron, s-t scripts
    rulerag_official/  train.json, test_prompts.txt, test_answers.tsv, entity2id.json
                                                                    RuleRAG_ICL_FT's scripts
    stats.json         rows of every file, beside the paper's Table 1
    manifest.json      size and sha256 of every file above

`export_dataset` reads what `build_benchmark`, `mine_rules`, `index` and `train_retriever`
wrote and searches twice: the F_R questions with the untuned retriever (`retriever`'s base query
encoder: DPR's hard negatives) and the F_G and test queries with its fine-tuned query encoder
(`documents_mode`, by default RuleRAG-FT's RGFT one) for the Table 8 prompts. `Export.write`
puts everything into a folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rulerag.errors import InputError
from rulerag.export.card import card_markdown, kg_source
from rulerag.export.dpr import DPR_VARIANTS, dpr_records
from rulerag.export.huggingface import (
    CHECKSUMS,
    ConfigTable,
    card_header,
    checksum_lines,
    frame_table,
    records_table,
    write_table,
)
from rulerag.export.official import write_official
from rulerag.export.settings import ExportSettings
from rulerag.generation.prompts import Sample
from rulerag.generation.samples import build_samples, selected_rules, united_lists
from rulerag.generation.settings import GenerationSettings
from rulerag.io import read_jsonl, read_parquet, verify_output, write_json, write_manifest
from rulerag.layout import DataLayout
from rulerag.retrieval.configs import parse_config
from rulerag.retrieval.data import Query, read_corpus, read_rule_items, read_rule_texts
from rulerag.retrieval.rule_guided import Searcher, retrieve, rule_query_texts
from rulerag.retrieval.runs import open_searcher
from rulerag.retrieval.settings import IndexSettings, RetrieveSettings
from rulerag.retrieval.training import make_items

__all__ = ["HUGGINGFACE", "DPR", "OFFICIAL", "Export", "export_dataset"]

HUGGINGFACE, DPR, OFFICIAL = "huggingface", "dpr", "rulerag_official"
#: config -> its key in benchmark/stats.json
_STATS_KEYS = {"corpus": "corpus", "rules": "rules", "test": "test", "f_r": "f_r", "f_g": "f_g"}


@dataclass
class Export:
    """Everything `export` writes for one dataset, in memory."""

    dataset: str
    settings: ExportSettings
    tables: list[ConfigTable]
    benchmark_stats: dict[str, Any]
    dpr: dict[str, list[dict[str, Any]]]
    train: list[Sample]
    test: list[Sample]
    test_records: list[dict[str, Any]]
    entities: dict[str, int]
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)

    def write(self, folder: Path, build: Mapping[str, Any]) -> dict[str, Any]:
        """Write the three folders, stats.json and manifest.json into `folder`; `build` is the
        card's provenance (`command`, `commit`, `params`). Returns stats.json's content."""
        folder = Path(folder)
        fmt = self.settings.format
        hf = folder / HUGGINGFACE
        hf.mkdir(parents=True)
        for table in self.tables:
            write_table(table, hf, fmt)
        source = kg_source(self.dataset)
        header = card_header(
            self.tables, fmt, source.benchmark, f"{source.kg} source licenses (see card)"
        )
        card = card_markdown(
            self.dataset, header, self.tables, self.benchmark_stats, {**build, "format": fmt}
        )
        (hf / "README.md").write_text(card, encoding="utf-8")
        (hf / CHECKSUMS).write_text(checksum_lines(hf), encoding="utf-8")
        dpr = folder / DPR
        dpr.mkdir()
        for variant, records in self.dpr.items():
            text = json.dumps(records, ensure_ascii=False, indent=1)
            (dpr / f"{variant}.json").write_text(text + "\n", encoding="utf-8")
        official = write_official(
            folder / OFFICIAL, self.train, self.test, self.test_records, self.entities
        )
        stats = self.stats(official)
        write_json(folder / "stats.json", stats)
        files = sorted(
            p.relative_to(folder).as_posix()
            for p in folder.rglob("*")
            if p.is_file() and p.name != "manifest.json"
        )
        write_manifest(folder, files)
        return stats

    def stats(self, official: Mapping[str, int]) -> dict[str, Any]:
        """stats.json: rows per config, DPR records and hard negatives, official files' records,
        the paper's Table 1 row."""
        dpr = {}
        for variant, records in self.dpr.items():
            hard = sum(len(r["hard_negative_ctxs"]) for r in records)
            dpr[variant] = {
                "records": len(records),
                "hard_negatives_per_record": round(hard / len(records), 3) if records else 0.0,
                **self.dropped.get(variant, {}),
            }
        return {
            "dataset": self.dataset,
            "format": self.settings.format,
            "configs": {t.name: t.rows for t in self.tables},
            "dpr": dpr,
            "official": dict(official),
            "paper": dict(self.benchmark_stats.get("paper") or {}),
        }

    def table1(self) -> str:
        """The exported rows beside the paper's Table 1, as aligned text."""
        paper = self.benchmark_stats.get("paper") or {}
        lines = [f"{'':10}{'exported':>10}{'paper':>10}"]
        for table in self.tables:
            expected = paper.get(_STATS_KEYS[table.name])
            shown = f"{expected:,}" if expected is not None else "-"
            lines.append(f"{table.name:10}{table.rows:>10,}{shown:>10}")
        return "\n".join(lines)


def export_dataset(
    layout: DataLayout,
    settings: ExportSettings,
    index: IndexSettings,
    retrieve: RetrieveSettings,
    generation: GenerationSettings,
    model_cache: Path | None = None,
) -> Export:
    """Read the dataset's benchmark, bank and entities, search for hard negatives and prompt
    documents, and return what `Export.write` writes. The rule's form in searches and in RGFT
    questions is `retrieve.rule_query` (as training and retrieval use it), the rules per prompt
    are `generation.max_rules` (as the generation grid shows them)."""
    where = f"export@{layout.dataset}"
    stats_path = layout.benchmark / "stats.json"
    if not stats_path.is_file():
        raise InputError(f"{where}: no {stats_path}; run build_benchmark")
    verify_output(stats_path)
    stats = json.loads(stats_path.read_text(encoding="utf-8"))
    records = {name: read_jsonl(layout.queries(name)) for name in ("test", "f_r", "f_g")}
    tables = [
        frame_table("corpus", read_parquet(layout.corpus_table)),
        frame_table("rules", read_parquet(layout.rule_bank)),
        *(records_table(name, records[name]) for name in ("test", "f_r", "f_g")),
    ]
    for table in tables:
        expected = stats.get(_STATS_KEYS[table.name])
        if expected != table.rows:
            raise InputError(
                f"{where}: {table.name} has {table.rows} rows, but {stats_path} says {expected}; "
                "rerun build_benchmark"
            )
    corpus = read_corpus(layout.corpus)
    contents = dict(zip(corpus.ids, corpus.contents, strict=True))
    bank = read_rule_texts(layout.rule_bank)
    search_rules = rule_query_texts(bank, retrieve.rule_query)

    negatives = _searcher(settings.untuned, layout, index, model_cache, where)
    doc_ids = list(negatives.corpus_ids)
    texts = [contents[d] for d in doc_ids]
    rule_items = read_rule_items(layout.queries("f_r"))
    answers = {item.qid: item.answers for item in rule_items}
    doc_row = {doc_id: i for i, doc_id in enumerate(doc_ids)}
    dpr, dropped = {}, {}
    for variant, use_rules in DPR_VARIANTS.items():
        items, dropped[variant] = make_items(rule_items, doc_row, use_rules, retrieve=retrieve)
        rows, _ = negatives.search([item.text for item in items], settings.search_depth)
        dpr[variant] = dpr_records(items, answers, doc_ids, texts, rows, settings.hard_negatives)
    del negatives

    prompts = _searcher(settings.fine_tuned, layout, index, model_cache, where)
    use_rules = parse_config(settings.fine_tuned).use_rules
    answered = [r for r in records["f_g"] if r.get("answers")]
    train = _samples(
        answered, prompts, use_rules, bank, search_rules, contents, settings, generation
    )
    test = _samples(
        records["test"], prompts, use_rules, bank, search_rules, contents, settings, generation
    )
    entities = read_parquet(layout.entities, columns=["id", "name"])
    names = dict(zip(entities["name"].astype(str), entities["id"].astype(int), strict=True))
    return Export(
        layout.dataset,
        settings,
        tables,
        stats,
        dpr,
        train,
        test,
        records["test"],
        names,
        dropped,
    )


def _searcher(
    name: str, layout: DataLayout, index: IndexSettings, model_cache: Path | None, where: str
) -> Searcher:
    """The retrieval configuration `name`'s searcher, or an InputError naming the stage that
    makes what it lacks."""
    config = parse_config(name)
    if not layout.index(config.index).is_dir():
        raise InputError(
            f"{where}: no {config.index} index at {layout.index(config.index)}; run the index stage"
        )
    if config.trained and not layout.model(config.model_name or "").is_dir():
        raise InputError(
            f"{where}: no {config.model_name} query encoder at "
            f"{layout.model(config.model_name or '')}; run train_retriever"
        )
    return open_searcher(config, layout, index, model_cache)


def _samples(
    records: Sequence[Mapping[str, Any]],
    searcher: Searcher,
    use_rules: bool,
    bank: Mapping[str, str],
    search_rules: Mapping[str, str],
    contents: Mapping[str, str],
    settings: ExportSettings,
    generation: GenerationSettings,
) -> list[Sample]:
    """Prompt inputs of `records`: each query searched with the rules its prompt shows (the
    first `generation.max_rules` selected ones the bank holds), the lists united, the best
    `documents`."""
    shown = {str(r["qid"]): selected_rules(r, bank, generation.max_rules) for r in records}
    queries = [
        Query(str(r["qid"]), str(r["query"]), rule_ids=tuple(shown[str(r["qid"])])) for r in records
    ]
    run, _ = retrieve(queries, searcher, settings.documents, search_rules, use_rules)
    lists = united_lists(run, "all", shown)
    documents = {qid: [doc for doc, _ in pairs] for qid, pairs in lists.items()}
    return build_samples(
        records,
        rule_texts=bank,
        documents=documents,
        corpus=contents,
        num_documents=settings.documents,
        max_rules=generation.max_rules,
        keep_retrieved=settings.documents,
    )
