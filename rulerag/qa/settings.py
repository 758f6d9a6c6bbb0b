"""params.yaml `qa`: ordinary QA sets equipped with RuleQA's rules (stage `qa_rag`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rulerag.settings import DatasetName, Name, SettingsError, UniqueDatasetNames, load_settings


@dataclass(frozen=True)
class QASettings:
    HELP: ClassVar[str] = (
        'Stage `qa_rag` (the anonymous version\'s Table 3, "Generalization on More Datasets"): '
        "ordinary QA sets (ASQA, PopQA, HotpotQA, NQ as distributed: questions.jsonl [+ "
        'corpus.jsonl], or questions with their own contexts; README "Existing RAG datasets") '
        "equipped with a RuleQA bank's rules by Sentence-BERT similarity "
        "(build_benchmark.rule_selection's encoder, top_n N and threshold θ: the paper's N 3, θ "
        "0.7), searched and answered by `rows` of the grid."
    )

    #: QA set names; each is a folder <dir>/<name>/ (questions.jsonl [+ corpus.jsonl])
    datasets: UniqueDatasetNames = field(
        default=(), metadata={"help": "QA set names: folders <dir>/<name>/; [] = the stage is off"}
    )
    #: where the QA sets are; None = <RULERAG_DATA_DIR>/qa (the local mirror)
    dir: str | None = field(
        default=None, metadata={"help": "null = $RULERAG_DATA_DIR/qa (the local mirror)"}
    )
    #: the RuleQA dataset whose bank (data/<name>/rules/bank.parquet, from mine_rules) gives the
    #: rules matched to the questions; one name, so that dvc.yaml can declare the dependency
    rule_bank: DatasetName = field(
        default="icews14",
        metadata={"help": "the RuleQA set whose bank (mine_rules) gives the rules"},
    )
    #: bm25 or an index.dense encoder; None = generation.retriever
    retriever: str | None = field(
        default=None,
        metadata={"help": "bm25 or an index.dense encoder; null = generation.retriever"},
    )
    #: generation.grid rows to answer with (untrained retrieval: standard / rg, base generator)
    rows: tuple[Name, ...] = field(
        default=("standard_rag", "rulerag_icl"),
        metadata={"help": "grid rows with untrained retrieval and the base / API generator"},
    )

    def __post_init__(self) -> None:
        if self.rule_bank in self.datasets:
            raise ValueError(
                f"qa.datasets holds qa.rule_bank {self.rule_bank!r}: a KG is no QA set"
            )
        if not self.rows:
            raise ValueError("qa.rows: name at least one generation.grid row")

    def check_rows(self, grid: Mapping[str, Any], decoding: str = "generate") -> None:
        """`rows` against generation's grid (`check_qa_rows`)."""
        check_qa_rows(self.rows, grid, decoding)


def qa_settings(section: Mapping[str, Any] | None) -> QASettings:
    return load_settings(QASettings, section, "qa")


def check_qa_rows(rows: Sequence[str], grid: Mapping[str, Any], decoding: str = "generate") -> None:
    """The rows a QA set can answer: retrieval without training (`standard` / `rg` or none),
    the base or API generator, generated answers (`decoding`: generation.decoding, what a row
    without its own takes). Trained rows would need F_R / F_G of the QA set, rank and evidence
    rows the rules' own candidates (a KG to apply them to)."""
    for name in rows:
        if name not in grid:
            raise SettingsError(f"qa.rows: {name!r} is not a generation.grid row ({sorted(grid)})")
        row = grid[name]
        mode = (row.retrieval or "").rsplit("-", 1)[-1]
        problems = []
        if row.retrieval and mode not in ("standard", "rg"):
            problems.append(f"retrieval {row.retrieval!r} is trained")
        if row.generator not in ("base", "api"):
            problems.append(f"generator {row.generator!r}")
        if row.evidence or (row.decoding or decoding) != "generate":
            problems.append("it needs rule-application candidates")
        if getattr(row, "method", None):
            problems.append("a VE / CoK chain takes its demonstrations from F_R items")
        if problems:
            raise SettingsError(f"qa.rows: {name!r} cannot answer a QA set: {'; '.join(problems)}")
