"""The result grid in the layout of the paper's Table 2, with the paper's figures beside.

One row per configuration (named as in params' `generation.grid`), grouped as in the paper:
Standard Prompting, Standard RAG, RuleRAG-ICL, RuleRAG-FT, Rule ablation (SSFT), RGFT ablation.
Columns: R@10, EM and T-F1 in percent (as the paper prints them), then the paper's values for
the same row and dataset where known. Configurations not in the paper (an API generator, say)
are appended under "Other".

Paper figures: the EM and R@10 (DPR retrievers: standard, RG, RGFT) of Standard RAG,
RuleRAG-ICL and RuleRAG-FT on RuleQA-I (ICEWS14), RuleQA-F (FB15k-237) and RuleQA-N
(NELL-995) are filled in; the rest of Table 2 could not be checked offline and is left blank
rather than guessed. Add them to `PAPER_TABLE2`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = [
    "METRIC_COLUMNS",
    "PAPER_TABLE2",
    "TABLE2_ROWS",
    "plot_results",
    "results_table",
    "to_markdown",
]

#: (config name, group, row label), in the paper's order.
TABLE2_ROWS: tuple[tuple[str, str, str], ...] = (
    ("standard_prompting", "Standard Prompting", "generator alone (no retrieval)"),
    ("standard_rag", "Standard RAG", "retriever + generator"),
    ("rg_retriever_generator", "RuleRAG-ICL", "RG-retriever + generator"),
    ("rulerag_icl", "RuleRAG-ICL", "RG-retriever + RG-generator"),
    ("rulerag_ft", "RuleRAG-FT", "RGFT-retriever + RGFT-generator"),
    ("ssft_retriever_ssft_generator", "Rule ablation", "SSFT-retriever + SSFT-generator"),
    ("rgft_retriever_ssft_generator", "Rule ablation", "RGFT-retriever + SSFT-generator"),
    ("rgft_retriever_rg_generator", "RGFT ablation", "RGFT-retriever + RG-generator"),
    ("rg_retriever_rgft_generator", "RGFT ablation", "RG-retriever + RGFT-generator"),
)

#: Our metric names -> Table 2's column names.
METRIC_COLUMNS: tuple[tuple[str, str], ...] = (
    ("recall_at_10", "R@10"),
    ("em", "EM"),
    ("token_f1", "T-F1"),
)

#: dataset -> config -> {"R@10", "EM", "T-F1"} in percent; None where not known.
PAPER_TABLE2: dict[str, dict[str, dict[str, float | None]]] = {
    "icews14": {
        "standard_rag": {"R@10": 14.1, "EM": 5.2, "T-F1": None},
        "rulerag_icl": {"R@10": 24.2, "EM": 9.8, "T-F1": None},
        "rulerag_ft": {"R@10": 45.1, "EM": 20.5, "T-F1": None},
    },
    "fb15k237": {
        "standard_rag": {"R@10": 18.9, "EM": 11.0, "T-F1": None},
        "rulerag_icl": {"R@10": 29.9, "EM": 19.0, "T-F1": None},
        "rulerag_ft": {"R@10": 95.1, "EM": 34.9, "T-F1": None},
    },
    "nell995": {
        "standard_rag": {"R@10": 19.3, "EM": 9.8, "T-F1": None},
        "rulerag_icl": {"R@10": 26.5, "EM": 15.2, "T-F1": None},
        "rulerag_ft": {"R@10": 92.5, "EM": 42.0, "T-F1": None},
    },
}


def _percent(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else round(100.0 * number, 1)


def results_table(
    metrics: Mapping[str, Mapping[str, Any]],
    dataset: str,
    order: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Table 2 for one dataset from each configuration's metrics.json content.

    `order` (params' `generation.configs`) decides which configurations appear and in which
    order when given; else the paper's rows first, then any others by name. Rows without
    metrics are kept, empty, so a missing run is visible.
    """
    known = {name: (group, label) for name, group, label in TABLE2_ROWS}
    names = (
        list(order)
        if order is not None
        else [n for n, _g, _l in TABLE2_ROWS if n in metrics]
        + sorted(n for n in metrics if n not in known)
    )
    paper = PAPER_TABLE2.get(dataset, {})
    rows = []
    for name in names:
        group, label = known.get(name, ("Other", name))
        found = metrics.get(name) or {}
        row: dict[str, Any] = {
            "group": group,
            "configuration": label,
            "config": name,
            "queries": found.get("queries"),
        }
        for key, column in METRIC_COLUMNS:
            row[column] = _percent(found.get(key))
        for _key, column in METRIC_COLUMNS:
            row[f"paper {column}"] = (paper.get(name) or {}).get(column)
        rows.append(row)
    columns = [
        "group",
        "configuration",
        "config",
        "queries",
        *[c for _k, c in METRIC_COLUMNS],
        *[f"paper {c}" for _k, c in METRIC_COLUMNS],
    ]
    return pd.DataFrame(rows, columns=columns)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def to_markdown(table: pd.DataFrame, title: str, notes: Sequence[str] = ()) -> str:
    """The table as GitHub Markdown (no extra dependency); a group's name is printed once."""
    headers = [c for c in table.columns if c != "config"]
    lines = [f"# {title}", ""]
    lines.append("| " + " | ".join(headers) + " |")
    lines.append(
        "|" + "|".join("---" if h in {"group", "configuration"} else "---:" for h in headers) + "|"
    )
    previous = None
    for record in table.to_dict("records"):
        cells = []
        for header in headers:
            value = record[header]
            if header == "group":
                value, previous = ("" if value == previous else value), value
            cells.append(_cell(value))
        lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines.append("")
        lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"


def plot_results(table: pd.DataFrame, path: Path, title: str) -> None:
    """Grouped bars of R@10, EM and T-F1 per configuration; the paper's EM as black ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(table["config"])
    x = range(len(labels))
    width = 0.27
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(labels) + 2), 4.2))
    colours = {"R@10": "#9ecae1", "EM": "#3182bd", "T-F1": "#fd8d3c"}
    for offset, (_key, column) in zip((-width, 0.0, width), METRIC_COLUMNS, strict=True):
        values = [v if v is not None and not pd.isna(v) else 0.0 for v in table[column]]
        ax.bar([i + offset for i in x], values, width, label=column, color=colours[column])
    paper_em = list(table["paper EM"])
    marked = [(i, v) for i, v in zip(x, paper_em, strict=True) if v is not None and not pd.isna(v)]
    if marked:
        ax.scatter(
            [i for i, _ in marked],
            [v for _, v in marked],
            marker="_",
            s=400,
            color="black",
            label="paper EM",
            zorder=3,
        )
    ax.set_xticks(list(x), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("%")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
