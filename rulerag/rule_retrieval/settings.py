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
from typing import Any, Literal, get_args

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

    kind: Literal["local", "api"] = "local"  # api: generation.api's endpoint and key
    model: str = "smollm2"  # alias, path or Hugging Face id (api: the served model's name)
    max_new_tokens: Positive = 64  # the self-induced rule (a label line may come first)
    rank_max_new_tokens: Positive = 64  # R³'s ranking `[3] > [1] > ...` (one line)
    batch_size: Positive = 8
    dtype: str | None = None
    quantization: str | None = None


@dataclass(frozen=True)
class RuleRetrievalSettings:
    profile: str = "cpu"
    queries: Positive | None = 16  # test queries evaluated (a seeded sample); null = all
    seed: Seed = 12
    methods: tuple[Method, ...] = ("vanilla", "vanilla_r3", "siar", "siar_r3")
    retrievers: tuple[str, ...] = ("bm25", "minilm")  # bm25 or a dense encoder
    query_forms: tuple[QueryForm, ...] = ("si", "si_input")
    rule_forms: tuple[RuleForm, ...] = ("natural",)
    ks: tuple[Positive, ...] = (1, 5, 10)
    top_k: Positive = 10  # rules kept per query (the paper: 10)
    top_n: Positive = 10  # candidates R³ re-ranks (the paper: 20)
    shots: Count = 3  # self-induction demonstrations (F_R queries with their rule)
    analyzer: Analyzer = "auto"  # BM25's text analysis
    #: RuleRAG's own Sentence-BERT selection, as a row beside the others (θ and N of
    #: build_benchmark.rule_selection)
    similarity: bool = True
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
