"""params.yaml's `build_benchmark` section as typed settings (read strictly).

These classes hold the section's defaults; `BuildBenchmarkSettings.for_dataset` resolves the
knobs given by dataset (and `test_size: paper`) for one dataset, and `build.build_benchmark`
takes the result. The module imports nothing heavy, so the generator stages can read
`rule_selection.top_n` (the ceiling of `generation.max_rules`) without the builder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, get_args

from rulerag.settings import (
    Count,
    DatasetName,
    Fraction,
    NonNegative,
    Positive,
    Seed,
    load_settings,
)

__all__ = [
    "RETRIEVAL_SELECTIONS",
    "BuildBenchmarkSettings",
    "CorpusSettings",
    "RuleSelectionSettings",
    "StrataSettings",
    "build_benchmark_settings",
    "by_dataset",
]


#: which documents a corpus keeps (`build._filter_corpus`)
CorpusFilter = Literal["none", "rule_relations", "query_entities", "rule_neighbourhood"]
CORPUS_FILTERS: tuple[str, ...] = get_args(CorpusFilter)


@dataclass(frozen=True)
class CorpusSettings:
    """`build_benchmark.corpus`: which links become documents."""

    #: never a test link: the test queries' answers would be in the corpus as documents
    splits: tuple[Literal["train", "valid"], ...] = field(
        default=("train",), metadata={"help": "links that become documents (never a test link)"}
    )
    #: once or by dataset (`{default: ..., <dataset>: ...}`)
    filter: CorpusFilter | dict[DatasetName, CorpusFilter] = field(
        default="none",
        metadata={
            "help": (
                "Which links of those splits become documents, by dataset (`default` for the "
                "rest):\n"
                "  none               every link (ICEWS14: 63,685 docs; the paper's 77,508 = "
                "train+valid)\n"
                "  rule_relations     links whose relation occurs in a bank rule\n"
                "  query_entities     links touching the subject of a candidate query (NELL-995: "
                "17,398\n"
                "                     docs without finetune_from_train; paper 18,177)\n"
                "  rule_neighbourhood links a candidate query reaches through a selected rule's "
                "body\n"
                "                     atom (FB15k-237: 46,605 docs; paper 49,088)\n"
                "Candidate queries = every test/valid query whose relation has a bank rule, so the "
                "corpus does not change with test_size."
            )
        },
    )

    def __post_init__(self) -> None:
        if not self.splits:
            raise ValueError("splits: name at least one split (train: the paper's corpus)")


@dataclass(frozen=True)
class StrataSettings:
    """`build_benchmark.strata`: popularity strata of the query subject's train degree."""

    count: Positive = 3
    weights: tuple[NonNegative, ...] | None = None  # one per stratum; None = equal weights

    def __post_init__(self) -> None:
        if self.weights is None:
            return
        if len(self.weights) != self.count:
            raise ValueError(
                f"weights: {len(self.weights)} weights for {self.count} strata (count); give "
                "one per stratum, or null for equal weights"
            )
        if not sum(self.weights) > 0:
            raise ValueError("weights: all zero would draw no test query; give one above 0")


#: RuleRAG's own selections (the query's relation; Sentence-BERT above θ) and the rule-retrieval
#: methods of the SIAR + R³ paper (`rulerag.rule_retrieval`), which never look at the relation
SelectionMethod = Literal["head", "similarity", "vanilla", "vanilla_r3", "siar", "siar_r3"]
RETRIEVAL_SELECTIONS = ("vanilla", "vanilla_r3", "siar", "siar_r3")


@dataclass(frozen=True)
class RuleSelectionSettings:
    """`build_benchmark.rule_selection`: the rules selected per query.

    The retrieval methods search the bank (as a rule library) with the query (`vanilla`) or the
    LLM's self-induced rule (`siar`), optionally re-ranked by the LLM (`*_r3`); their LLM, its
    cache and the self-induction shots are `rule_retrieval`'s, so the evaluation stage and the
    benchmark share one model and one set of answers.
    """

    method: SelectionMethod = "head"
    top_n: Positive = field(default=3, metadata={"help": "rules kept per query (N)"})
    threshold: Fraction = field(default=0.7, metadata={"help": "similarity only"})
    encoder: str = field(
        default="minilm",
        metadata={"help": "any sentence-transformers id or path (similarity only)"},
    )
    retriever: str = field(
        default="bm25",
        metadata={"help": "rule retrievers: bm25, or a dense encoder alias / path / HF id"},
    )
    query_form: Literal["si", "si_input"] = field(
        default="si_input",
        metadata={"help": "siar*: search with the self-induced rule alone (si) or + query"},
    )
    rule_form: Literal["natural", "formal"] = field(
        default="natural", metadata={"help": "rule text searched and shown to R³: natural | formal"}
    )
    candidates: Positive = field(
        default=10, metadata={"help": "*_r3: search results R³ re-ranks (the paper: 20)"}
    )

    def __post_init__(self) -> None:
        if self.candidates < self.top_n:
            raise ValueError(
                f"candidates ({self.candidates}) must be at least top_n ({self.top_n})"
            )


@dataclass(frozen=True)
class BuildBenchmarkSettings:
    """params.yaml `build_benchmark`."""

    HELP: ClassVar[str] = (
        "Stage `build_benchmark`: KG + rule bank -> data/<dataset>/benchmark/ (RuleQA-style): "
        "corpus.jsonl/.parquet, test.jsonl, f_r.jsonl, f_g.jsonl, stats.json."
    )

    seed: Seed = 12
    corpus: CorpusSettings = field(default_factory=CorpusSettings)
    #: paper = the paper's |Q| for the KG (all queries for a KG the paper has no row of); an
    #: integer; None = all
    test_size: Positive | Literal["paper"] | None = field(
        default="paper",
        metadata={"help": "paper = the paper's |Q| for the KG; an integer; null = all"},
    )
    strata: StrataSettings = field(
        default_factory=StrataSettings,
        metadata={
            "help": (
                "Popularity strata of the query subject's train degree (equal-frequency, 0 = long "
                "tail); each stratum contributes to Q in proportion to its weight."
            )
        },
    )
    rule_selection: RuleSelectionSettings = field(
        default_factory=RuleSelectionSettings,
        metadata={
            "help": (
                "Rules per query. head: the bank rules of the query's relation, best by confidence "
                "(the paper's main setting); similarity: Sentence-BERT cosine above threshold (the "
                "paper's alternative, N=3, θ=0.7); vanilla | vanilla_r3 | siar | siar_r3: a rule "
                "retriever over the bank that never sees the relation (the SIAR + R³ paper; its "
                "LLM, shots and analyzer are rule_retrieval's, answers cached in "
                "data/<dataset>/cache/). Only the sampled test queries and the F_R / F_G pool are "
                "asked: on a CPU an LLM method costs ~2-4 s per query."
            )
        },
    )
    max_oracle_docs: Positive = field(
        default=5, metadata={"help": "oracle documents kept per F_R item, answer-bearing first"}
    )
    #: train queries moved into the F_R / F_G pool, once or by dataset (`{default: ...}`)
    finetune_from_train: Count | dict[DatasetName, Count] = field(
        default=0,
        metadata={
            "help": (
                "F_R / F_G come from the valid split. NELL-995's has 543 links (94 F_R items, 150 "
                "F_G), far below the paper's 4,351 / 4,764: move this many train queries (all "
                "their links leave the corpus) into the fine-tuning pool, by dataset. NELL-995 "
                "with 2000: F_R 709, F_G 1,150, corpus 29,515 (the moved queries' subjects join "
                "the query_entities filter)."
            )
        },
    )

    def for_dataset(
        self, dataset: str, paper: Mapping[str, int] | None = None
    ) -> BuildBenchmarkSettings:
        """These settings for one dataset, as `build.build_benchmark` takes them: its corpus
        filter and fine-tuning pool picked from their `{default: ..., <dataset>: ...}`
        mappings, and `test_size: paper` the paper's |Q| for the KG (`paper`: its Table 1
        row; none = every query)."""
        size = self.test_size
        if size == "paper":
            size = (paper or {}).get("test")
        return dataclasses.replace(
            self,
            corpus=dataclasses.replace(
                self.corpus, filter=by_dataset(self.corpus.filter, dataset, CorpusSettings.filter)
            ),
            test_size=None if size is None else int(size),
            finetune_from_train=int(
                by_dataset(
                    self.finetune_from_train, dataset, BuildBenchmarkSettings.finetune_from_train
                )
            ),
        )

    def for_one_dataset(self) -> bool:
        """Whether these are settings for one dataset (`for_dataset`): nothing is left to pick
        by dataset and `test_size` is a number or None."""
        return (
            isinstance(self.corpus.filter, str)
            and self.test_size != "paper"
            and isinstance(self.finetune_from_train, int)
        )


def build_benchmark_settings(section: Mapping[str, Any] | None) -> BuildBenchmarkSettings:
    """params.yaml's `build_benchmark` section as typed settings, strictly."""
    return load_settings(BuildBenchmarkSettings, section, "build_benchmark")


def by_dataset(value: Any, dataset: str, fallback: Any) -> Any:
    """A setting given once or per dataset (`{default: ..., <dataset>: ...}`); a mapping naming
    neither the dataset nor `default` gives `fallback`."""
    if isinstance(value, Mapping):
        return value.get(dataset, value.get("default", fallback))
    return value
