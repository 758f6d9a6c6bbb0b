"""params.yaml `rule_retrieval`: the rule-retrieval evaluation (SIAR + R³ beside RuleRAG's
own rule selection), the one place each of its defaults lives.

The `cpu` profile (the section itself) is sized for `make run` on two cores with SmolLM2-135M:
a seeded sample of test queries and R³ over the top 10 candidates. The `paper` profile is the
paper's setting (App. B) on a GPU: Qwen2.5-7B-Instruct, every test query, R³ over the top 20,
bge-base-en as the dense retriever.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, get_args

from rulerag.settings import Count, Positive, Seed, apply_profile, load_settings

__all__ = [
    "ANALYZER_CHOICES",
    "Analyzer",
    "LLMSettings",
    "RuleRetrievalSettings",
    "rule_retrieval_settings",
]

Method = Literal["vanilla", "vanilla_r3", "siar", "siar_r3"]
QueryForm = Literal["si", "si_input"]
RuleForm = Literal["natural", "formal"]
#: BM25's text analysis: `english` (Pyserini's), `cjk` (character bigrams, for Chinese or
#: Japanese), or `auto`: the one the library's script calls for (`choose_analysis` in
#: rulerag.rule_retrieval.search), so a Chinese library is never searched as whole sentences
Analyzer = Literal["auto", "english", "cjk"]
ANALYZER_CHOICES: tuple[str, ...] = get_args(Analyzer)


@dataclass(frozen=True)
class LLMSettings:
    """The LLM that induces rules and re-ranks them."""

    # api: generation.api's endpoint and key
    kind: Literal["local", "api"] = field(
        default="local",
        metadata={"help": "local (a Hugging Face model) or api (generation.api's endpoint)"},
    )
    # alias, path or Hugging Face id (api: the served model's name)
    model: str = field(
        default="smollm2", metadata={"help": "the paper: Qwen2.5-7B/72B-Instruct, gpt-4o"}
    )
    max_new_tokens: Positive = field(
        default=64,
        metadata={"help": "the self-induced rule (small models may write a label line first)"},
    )
    rank_max_new_tokens: Positive = field(
        default=64, metadata={"help": 'R³\'s ranking "[3] > [1] > ..." (one line)'}
    )
    batch_size: Positive = 8
    dtype: str | None = None
    quantization: str | None = None


@dataclass(frozen=True)
class RuleRetrievalSettings:
    HELP: ClassVar[str] = (
        "Stage `rule_retrieval_eval`: rule retrieval as the SIAR + R³ paper measures it (its Table "
        "1), on RuleQA's test queries: Recall@k of the gold rules (the bank rules whose head is "
        "the query's relation) for each method x retriever x SIAR query form x rule form, beside "
        "RuleRAG's own selections (head: the oracle; similarity: Sentence-BERT with "
        "build_benchmark's N and θ). -> data/<dataset>/rule_retrieval/{results.md,csv, recall.png, "
        "selections.parquet, metrics.json}"
    )

    profile: str = field(
        default="cpu", metadata={"help": "cpu (this section) or a name under profiles"}
    )
    queries: Positive | None = field(
        default=16,
        metadata={
            "help": "test queries evaluated, a seeded sample (null: all; 16 keeps make run short)"
        },
    )
    seed: Seed = 12
    methods: tuple[Method, ...] = field(
        default=("vanilla", "vanilla_r3", "siar", "siar_r3"),
        metadata={
            "help": (
                "vanilla: the query searches; siar: the LLM's self-induced rule (SI) searches; "
                "*_r3: the LLM re-ranks the top_n candidates in one listwise prompt (RankGPT "
                "style)"
            )
        },
    )
    retrievers: tuple[str, ...] = field(
        default=("bm25", "minilm"),
        metadata={"help": "bm25, or a dense encoder alias / path / Hugging Face id"},
    )
    query_forms: tuple[QueryForm, ...] = field(
        default=("si", "si_input"),
        metadata={"help": "SIAR's search text: the SI alone, or SI followed by the query"},
    )
    rule_forms: tuple[RuleForm, ...] = field(
        default=("natural",),
        metadata={"help": 'natural ("... leads to ...") and/or formal ("r2(X, Y) <- r1(X, Y)")'},
    )
    ks: tuple[Positive, ...] = (1, 5, 10)
    top_k: Positive = field(default=10, metadata={"help": "rules kept per query (the paper: 10)"})
    top_n: Positive = field(
        default=10,
        metadata={"help": "candidates R³ re-ranks (the paper: 20; 10 keeps make run short)"},
    )
    shots: Count = field(
        default=3, metadata={"help": "self-induction demonstrations: F_R queries with their rule"}
    )
    analyzer: Analyzer = field(
        default="auto",
        metadata={
            "help": (
                "BM25 analysis: auto (by the rules' script), english (Pyserini's), cjk (bigrams)"
            )
        },
    )
    #: RuleRAG's own Sentence-BERT selection, as a row beside the others (θ and N of
    #: build_benchmark.rule_selection)
    similarity: bool = field(
        default=True, metadata={"help": "report RuleRAG's similarity selection as a row"}
    )
    llm: LLMSettings = field(default_factory=LLMSettings)
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if max(self.ks) > self.top_k:
            raise ValueError(f"ks {list(self.ks)} ask for more than top_k = {self.top_k} rules")
        if self.top_n < self.top_k:
            raise ValueError(f"top_n ({self.top_n}) must be at least top_k ({self.top_k})")


def rule_retrieval_settings(section: Mapping[str, Any] | None) -> RuleRetrievalSettings:
    """params.yaml `rule_retrieval`, its profile applied, strictly."""
    return load_settings(
        RuleRetrievalSettings, apply_profile(section, "rule_retrieval"), "rule_retrieval"
    )
