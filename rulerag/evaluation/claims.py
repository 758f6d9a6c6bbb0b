"""The paper's claims about Table 2 as paired tests on the same test queries.

Two rows of the grid answer the same seeded queries, so whether one row's EM is really above
another's is a paired question: only the queries where exactly one of them is right carry
information. The exact McNemar test (a two-sided binomial test on those discordant queries)
says how likely a split at least that lopsided is if the rows were equally good. With 100
queries a gap of a few EM points is usually noise (p well above 0.05), which the plain EM
columns do not show; the report prints this table below Table 2.

A claim "holds" when the first row's EM is higher and p < `alpha`; "same direction" when it is
higher without that evidence; "no" otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from rulerag import markdown

__all__ = [
    "PAPER_CLAIMS",
    "R2AG_CLAIMS",
    "ROBUST_CLAIMS",
    "RULE_CLAIMS",
    "Claim",
    "PairedResult",
    "claims_table",
    "claims_to_markdown",
    "p_text",
    "paired_em",
]


@dataclass(frozen=True)
class Claim:
    """`better` should have a higher EM than `worse` (both grid configuration names)."""

    better: str
    worse: str
    text: str


#: What the paper's Table 2 shows, row against row (section 5 of the paper).
PAPER_CLAIMS: tuple[Claim, ...] = (
    Claim("rulerag_ft", "standard_rag", "RuleRAG-FT above Standard RAG"),
    Claim("rulerag_ft", "rulerag_icl", "RuleRAG-FT above RuleRAG-ICL"),
    Claim("rulerag_icl", "standard_rag", "RuleRAG-ICL above Standard RAG"),
    Claim("rulerag_cok", "cok", "RuleRAG-CoK above CoK (anonymous version's Table 2)"),
    Claim("standard_rag", "ve", "Standard RAG above VE (anonymous version's Table 2)"),
    Claim(
        "rulerag_ft",
        "rgft_retriever_ssft_generator",
        "rule ablation: RGFT- above SSFT-generator (RGFT-retriever for both)",
    ),
    Claim(
        "rulerag_ft",
        "ssft_retriever_rgft_generator",
        "rule ablation: RGFT- above SSFT-retriever (RGFT-generator for both)",
    ),
    Claim(
        "rulerag_ft",
        "ssft_retriever_ssft_generator",
        "rule ablation: rules in both fine-tunings above neither",
    ),
    Claim(
        "rulerag_ft",
        "rgft_retriever_rg_generator",
        "RGFT ablation: fine-tuning the generator helps",
    ),
    Claim(
        "rulerag_ft",
        "rg_retriever_rgft_generator",
        "RGFT ablation: fine-tuning the retriever helps",
    ),
)


#: What the R²AG paper claims (§4: retrieval information helps a frozen LLM, and R²AG on top of
#: fine-tuning helps further), each against its twin row without the R²-Former.
R2AG_CLAIMS: tuple[Claim, ...] = (
    Claim("r2ag", "standard_rag", "R²AG: retrieval information helps a frozen generator"),
    Claim("rulerag_r2ag", "rulerag_icl", "R²AG on RuleRAG-ICL's retrieval and prompt helps"),
    Claim("rulerag_r2ag_ft", "rulerag_ft", "R²AG + LoRA above RuleRAG-FT (RGFT retrieval)"),
)


#: Robustness (anonymous version, App. E): on queries that need no rule, rules should not hurt
#: (`robust/<row>`: the row on the robustness queries).
ROBUST_CLAIMS: tuple[Claim, ...] = (
    Claim(
        "robust/rulerag_icl",
        "robust/standard_rag",
        "no rule needed: RuleRAG-ICL above Standard RAG",
    ),
    Claim(
        "robust/rulerag_ft", "robust/standard_rag", "no rule needed: RuleRAG-FT above Standard RAG"
    ),
    Claim(
        "robust/rulerag_ft", "robust/rulerag_icl", "no rule needed: RuleRAG-FT above RuleRAG-ICL"
    ),
)


#: Rules that answer (issue 15): rule application alone, and its evidence in the prompt.
RULE_CLAIMS: tuple[Claim, ...] = (
    Claim("symbolic", "standard_rag", "rules alone above Standard RAG"),
    Claim("symbolic", "rulerag_icl", "rules alone above RuleRAG-ICL"),
    Claim("rulerag_icl_evidence", "rulerag_icl", "rule-derived evidence helps RuleRAG-ICL"),
    Claim("standard_rag_rank", "standard_rag", "ranking candidates helps Standard RAG"),
    Claim("rulerag_icl_rank", "rulerag_icl", "ranking candidates helps RuleRAG-ICL"),
    Claim("rulerag_icl_rank", "standard_rag_rank", "ranked: RuleRAG-ICL above Standard RAG"),
    Claim("symbolic", "rulerag_icl_rank", "rules alone above RuleRAG-ICL ranking"),
)


@dataclass(frozen=True)
class PairedResult:
    """Two rows on their common queries: EMs, discordant counts and the McNemar p-value."""

    queries: int
    em_a: float
    em_b: float
    a_only: int  # queries row a answers exactly and row b does not
    b_only: int
    p_value: float

    def verdict(self, alpha: float = 0.05) -> str:
        """`holds`: row a is higher with p < alpha; `same direction`: higher without that
        evidence; `no` otherwise."""
        if self.em_a <= self.em_b:
            return "no"
        return "holds" if self.p_value < alpha else "same direction"


def paired_em(a: Mapping[str, float], b: Mapping[str, float]) -> PairedResult:
    """Compare two rows' per-query EM (qid -> 0/1) on the queries both answered.

    Raises ValueError when they share no query (different samples cannot be paired).
    """
    from scipy.stats import binomtest

    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError("the two rows share no query: they cannot be compared pairwise")
    hits_a = [bool(a[q]) for q in common]
    hits_b = [bool(b[q]) for q in common]
    a_only = sum(x and not y for x, y in zip(hits_a, hits_b, strict=True))
    b_only = sum(y and not x for x, y in zip(hits_a, hits_b, strict=True))
    discordant = a_only + b_only
    p_value = binomtest(a_only, discordant, 0.5).pvalue if discordant else 1.0
    return PairedResult(
        queries=len(common),
        em_a=sum(hits_a) / len(common),
        em_b=sum(hits_b) / len(common),
        a_only=a_only,
        b_only=b_only,
        p_value=float(p_value),
    )


def claims_table(
    per_query_em: Mapping[str, Mapping[str, float]],
    claims: Sequence[Claim] = PAPER_CLAIMS,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """One row per claim whose two configurations both have predictions."""
    rows = []
    for claim in claims:
        if claim.better not in per_query_em or claim.worse not in per_query_em:
            continue
        result = paired_em(per_query_em[claim.better], per_query_em[claim.worse])
        rows.append(
            {
                "claim": claim.text,
                "better": claim.better,
                "worse": claim.worse,
                "queries": result.queries,
                "EM better": round(100 * result.em_a, 1),
                "EM worse": round(100 * result.em_b, 1),
                "only better right": result.a_only,
                "only worse right": result.b_only,
                "p": result.p_value,
                "verdict": result.verdict(alpha),
            }
        )
    columns = [
        "claim",
        "better",
        "worse",
        "queries",
        "EM better",
        "EM worse",
        "only better right",
        "only worse right",
        "p",
        "verdict",
    ]
    return pd.DataFrame(rows, columns=columns)


def p_text(p: float) -> str:
    """A p-value as the reports print it."""
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def claims_to_markdown(table: pd.DataFrame, alpha: float = 0.05) -> str:
    """The claims as a Markdown section (empty string when no claim could be checked)."""
    if table.empty:
        return ""
    lines = [
        "## The paper's claims, paired on the same queries",
        "",
        f"Exact McNemar test on the queries only one row answers; `holds` = higher EM with "
        f"p < {alpha}, `same direction` = higher EM without that evidence.",
        "",
    ]
    lines += markdown.table_lines(
        ["claim", "queries", "EM", "EM (other)", "only this right", "only other right", "p"]
        + ["verdict"],
        [
            [
                f"{r['claim']} (`{r['better']}` vs `{r['worse']}`)",
                r["queries"],
                f"{r['EM better']:.1f}",
                f"{r['EM worse']:.1f}",
                r["only better right"],
                r["only worse right"],
                p_text(r["p"]),
                r["verdict"],
            ]
            for r in table.to_dict("records")
        ],
        align="lrrrrrrl",
    )
    return "\n".join(lines) + "\n"
