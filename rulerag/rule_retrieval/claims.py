"""The SIAR + R³ paper's claims about its Table 1 as paired tests on the same queries.

Every method ranks rules for the same queries, so "SIAR finds the gold rule more often than
vanilla retrieval" is a paired question: per query, is a gold rule in the top k of one method
and not the other? The exact McNemar test on those discordant queries (the one the Table 2
report uses, `rulerag.evaluation.claims.paired_em`) says whether a gap is more than noise; with
a few dozen CPU-scale queries most gaps are not, which the Recall columns alone do not show.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from rulerag import markdown
from rulerag.evaluation.claims import p_text, paired_em

__all__ = ["RULE_CLAIMS", "claims_markdown", "rule_claims"]

#: (better, worse, text): rows as (method, query form) within one retriever and rule form;
#: `similarity` is RuleRAG's own selection (retriever "-"), compared with every retriever
RULE_CLAIMS: tuple[tuple[tuple[str, str], tuple[str, str], str], ...] = (
    (("siar", "si"), ("vanilla", ""), "SIAR (w/ SI) above vanilla retrieval"),
    (("siar", "si_input"), ("vanilla", ""), "SIAR (w/ SI + input) above vanilla retrieval"),
    (("vanilla_r3", ""), ("vanilla", ""), "R³ improves vanilla retrieval"),
    (("siar_r3", "si"), ("siar", "si"), "R³ improves SIAR (w/ SI)"),
    (("siar_r3", "si_input"), ("siar", "si_input"), "R³ improves SIAR (w/ SI + input)"),
    (("vanilla", ""), ("similarity", ""), "vanilla retrieval above RuleRAG similarity (θ, N)"),
)


def _hits(group: pd.DataFrame, gold: dict[str, frozenset[str]], k: int) -> dict[str, float]:
    return {
        qid: float(bool(gold[qid] & set(list(rules)[:k])))
        for qid, rules in zip(group["qid"], group["rule_ids"], strict=True)
    }


def rule_claims(
    picked: pd.DataFrame,
    qids: Sequence[str],
    gold: Sequence[frozenset[str]],
    k: int,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """One row per claim and (retriever, rule form) whose two rows exist: Recall@k of both
    (percent), the queries only one of them recalls, the exact McNemar p and a verdict
    (`holds`: higher with p < alpha; `same direction`: higher without that evidence; `no`)."""
    gold_of = dict(zip(qids, gold, strict=True))
    hits: dict[tuple[str, str, str, str], dict[str, float]] = {}
    for (retriever, form, method, query_form), group in picked.groupby(
        ["retriever", "rule_form", "method", "query_form"], sort=False
    ):
        hits[(retriever, form, method, query_form or "")] = _hits(group, gold_of, k)
    blocks = [(r, f) for r, f, _, _ in hits if r != "-"]
    rows = []
    for retriever, form in dict.fromkeys(blocks):
        for better, worse, text in RULE_CLAIMS:

            def key(row: tuple[str, str], retriever: str = retriever, form: str = form):
                return ("-", "natural", *row) if row[0] == "similarity" else (retriever, form, *row)

            if key(better) not in hits or key(worse) not in hits:
                continue
            result = paired_em(hits[key(better)], hits[key(worse)])
            rows.append(
                {
                    "retriever": retriever,
                    "rule_form": form,
                    "claim": text,
                    f"R@{k} better": round(100 * result.em_a, 2),
                    f"R@{k} worse": round(100 * result.em_b, 2),
                    "only better": result.a_only,
                    "only worse": result.b_only,
                    "p": float(f"{result.p_value:.4g}"),
                    "verdict": result.verdict(alpha),
                }
            )
    return pd.DataFrame(rows)


def claims_markdown(claims: pd.DataFrame, k: int) -> str:
    """The claims as a Markdown table under the results."""
    if claims.empty:
        return ""
    lines = [
        "",
        f"Paired on the same queries (a gold rule in the top {k}; exact McNemar):",
        "",
    ]
    lines += markdown.table_lines(
        ["retriever", "claim", "R@k", "only this / only the other", "p", "verdict"],
        [
            [
                f"{row['retriever']} ({row['rule_form']})",
                row["claim"],
                f"{row[f'R@{k} better']:.1f} vs {row[f'R@{k} worse']:.1f}",
                f"{row['only better']} / {row['only worse']}",
                p_text(row["p"]),
                row["verdict"],
            ]
            for row in claims.to_dict("records")
        ],
    )
    return "\n".join(lines) + "\n"
