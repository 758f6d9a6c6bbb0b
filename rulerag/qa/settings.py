"""params.yaml `qa`: ordinary QA sets equipped with RuleQA's rules (stage `qa_rag`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rulerag.params_schema import check_dataset_name
from rulerag.settings import load_settings


@dataclass(frozen=True)
class QASettings:
    #: QA set names; each is a folder <dir>/<name>/ (questions.jsonl [+ corpus.jsonl])
    datasets: tuple[str, ...] = ()
    #: where the QA sets are; None = <RULERAG_DATA_DIR>/qa (the local mirror)
    dir: str | None = None
    #: the RuleQA dataset whose bank (data/<name>/rules/bank.parquet, from mine_rules) gives the
    #: rules matched to the questions; one name, so that dvc.yaml can declare the dependency
    rule_bank: str = "icews14"
    #: bm25 or an index.dense encoder; None = generation.retriever
    retriever: str | None = None
    #: generation.grid rows to answer with (untrained retrieval: standard / rg, base generator)
    rows: tuple[str, ...] = ("standard_rag", "rulerag_icl")

    def __post_init__(self) -> None:
        for name in (*self.datasets, self.rule_bank):
            check_dataset_name(name)
        if self.rule_bank in self.datasets:
            raise ValueError(
                f"qa.datasets holds qa.rule_bank {self.rule_bank!r}: a KG is no QA set"
            )
        if not self.rows:
            raise ValueError("qa.rows: name at least one generation.grid row")


def qa_settings(section: Mapping[str, Any] | None) -> QASettings:
    return load_settings(QASettings, section, "qa")
