"""params.yaml's `export` section as typed settings (read strictly).

The export is for people who will not run this pipeline, so its knobs are few: the file format
of the Hugging Face folder, the dense retriever whose untuned top list gives DPR's hard
negatives and whose fine-tuned query encoder fills the generator prompts (the paper: "we
leverage the fine-tuned retrievers to retrieve relevant documents for each query in F_G"),
and the prompt's documents (its rules per prompt are `generation.max_rules`, read from the
generation settings).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, get_args

from rulerag.retrieval.configs import SPARSE_INDEXES, TRAINED_MODES
from rulerag.settings import Count, Name, Positive, UniqueDatasetNames, load_settings

__all__ = ["EXPORT_FORMATS", "ExportSettings", "export_settings"]

ExportFormat = Literal["parquet", "jsonl"]
EXPORT_FORMATS: tuple[str, ...] = get_args(ExportFormat)
DocumentsMode = Literal["rgft", "ssft"]


@dataclass(frozen=True)
class ExportSettings:
    """params.yaml `export` (stage `export`, data/<dataset>/export/)."""

    HELP: ClassVar[str] = (
        "Stage `export` (`make export`): RuleQA in the formats others read, for people who will "
        "not run this pipeline (docs/export.md). Reads the benchmark, the bank, the entities, "
        "`retriever`'s index and its fine-tuned query encoder; searches F_R (hard negatives, "
        "untuned encoder) and F_G + test (prompt documents, fine-tuned encoder) once each: 6.5 min "
        "(10 min CPU) for ICEWS14 on 2 cores, so it is opt-in (`make export` switches it on, as a "
        "DVC experiment). -> data/<dataset>/export/{huggingface/ (datasets.load_dataset folder + "
        "card + checksums),\n"
        "   dpr/{rgft,ssft}.json, rulerag_official/ (train.json, test_prompts.txt, "
        "test_answers.tsv,\n"
        "   entity2id.json), stats.json, manifest.json}"
    )

    # [] = the stage is off: `make export` switches it on, as an export costs minutes of
    # encoding that a `make run` need not pay
    datasets: UniqueDatasetNames = field(
        default=(),
        metadata={
            "help": "datasets exported (of `datasets`); [] = off. make export: EXPORT_DATASETS"
        },
    )
    format: ExportFormat = field(
        default="parquet", metadata={"help": "the Hugging Face folder's files: parquet or jsonl"}
    )
    # its index and untuned query encoder give DPR's hard negatives, its fine-tuned one
    # (`documents_mode`) the prompts' documents
    retriever: Name = field(
        default="minilm",
        metadata={
            "help": "an encoder of retrieve.finetune: untuned -> hard negatives, tuned -> prompts"
        },
    )
    documents_mode: DocumentsMode = field(
        default="rgft",
        metadata={
            "help": "the fine-tuned query encoder of the prompts: rgft (RuleRAG-FT's) or ssft"
        },
    )
    hard_negatives: Count = field(
        default=10,
        metadata={
            "help": "per DPR record: the untuned top list minus the query's oracle documents"
        },
    )
    search_depth: Positive = field(
        default=30, metadata={"help": "documents searched per DPR question"}
    )
    documents: Positive = field(
        default=10, metadata={"help": "documents per prompt (the paper profile's 10)"}
    )
    #: keys that other sections now say, for the unknown-key error: the rules per prompt are
    #: the generator's (`export_dataset` reads them from the generation settings)
    MOVED_KEYS: ClassVar[Mapping[str, str]] = {"max_rules": "generation.max_rules"}

    def __post_init__(self) -> None:
        if self.format not in EXPORT_FORMATS:
            raise ValueError(f"format must be one of {EXPORT_FORMATS}, not {self.format!r}")
        if self.retriever in SPARSE_INDEXES:
            raise ValueError(
                f"retriever must be a dense encoder (BM25 has no query encoder to fine-tune), "
                f"not {self.retriever!r}"
            )
        if self.documents_mode not in TRAINED_MODES:
            raise ValueError(f"documents_mode must be one of {TRAINED_MODES}")
        if self.hard_negatives > self.search_depth:
            raise ValueError(
                f"hard_negatives ({self.hard_negatives}) exceeds search_depth "
                f"({self.search_depth}): the hard negatives come from the searched documents"
            )

    @property
    def untuned(self) -> str:
        """The retrieval configuration of the hard negatives (`minilm-standard`)."""
        return f"{self.retriever}-standard"

    @property
    def fine_tuned(self) -> str:
        """The retrieval configuration of the prompts' documents (`minilm-rgft`)."""
        return f"{self.retriever}-{self.documents_mode}"


def export_settings(section: Mapping[str, Any] | None) -> ExportSettings:
    """params.yaml's `export` section as typed settings, strictly."""
    return load_settings(ExportSettings, section, "export")
