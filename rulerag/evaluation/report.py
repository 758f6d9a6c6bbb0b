"""The result grid in the layout of the paper's Table 2, with the paper's figures beside.

One row per configuration (named as in params' `generation.grid`), grouped as in the paper:
Standard Prompting, Standard RAG, RuleRAG-ICL, RuleRAG-FT, Rule ablation (SSFT), RGFT ablation.
Columns: R@10, EM and T-F1 in percent (as the paper prints them), then the paper's values for
the same row and dataset. Configurations not in the paper (an API generator, say) are
appended under "Other".

Paper figures: every cell of Table 2 of the RuleRAG paper (arXiv version; DPR retrievers and
LLAMA2_7B generators) for the five RuleQA benchmarks, transcribed in `PAPER_TABLE2_TEXT`
(a data test compares it with the paper's text). The VE and CoK rows are not runs of this grid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rulerag import markdown

__all__ = [
    "EXTRA_ROWS",
    "METRIC_COLUMNS",
    "PAPER_TABLE2",
    "PAPER_TABLE2_TEXT",
    "TABLE2_ROWS",
    "plot_results",
    "results_table",
    "to_markdown",
]

#: (config name, group, row label), in the paper's order.
TABLE2_ROWS: tuple[tuple[str, str, str], ...] = (
    ("standard_prompting", "Standard Prompting", "generator alone (no retrieval)"),
    ("ve", "CoT", "verify-and-edit (3-shot)"),
    ("cok", "CoT", "chain-of-knowledge (3-shot)"),
    ("standard_rag", "Standard RAG", "retriever + generator"),
    ("rg_retriever_generator", "RuleRAG-ICL", "RG-retriever + generator"),
    ("rulerag_icl", "RuleRAG-ICL", "RG-retriever + RG-generator"),
    ("rulerag_ft", "RuleRAG-FT", "RGFT-retriever + RGFT-generator"),
    ("rulerag_cok", "RuleRAG-CoK", "chain-of-knowledge with rule-guided search and prompts"),
    ("ssft_retriever_rgft_generator", "Rule ablation", "SSFT-retriever + RGFT-generator"),
    ("rgft_retriever_ssft_generator", "Rule ablation", "RGFT-retriever + SSFT-generator"),
    ("ssft_retriever_ssft_generator", "Rule ablation", "SSFT-retriever + SSFT-generator"),
    ("rg_retriever_rgft_generator", "RGFT ablation", "RG-retriever + RGFT-generator"),
    ("rgft_retriever_rg_generator", "RGFT ablation", "RGFT-retriever + RG-generator"),
)

#: Rows of methods the RuleRAG paper does not run, with their group and label (no paper figures).
EXTRA_ROWS: tuple[tuple[str, str, str], ...] = (
    ("symbolic", "Rules alone", "applied rules' best candidate (no LM)"),
    ("rulerag_icl_evidence", "Rules as evidence", "RuleRAG-ICL + rule-derived evidence"),
    ("standard_rag_rank", "Answer ranking", "Standard RAG, candidates ranked by the LM"),
    ("rulerag_icl_rank", "Answer ranking", "RuleRAG-ICL, candidates ranked by the LM"),
    ("r2ag", "R²AG", "retriever + R²-Former + frozen generator"),
    ("rulerag_r2ag", "R²AG", "RG-retriever + R²-Former + frozen RG-generator"),
    ("r2ag_ft", "R²AG", "retriever + R²-Former + LoRA generator"),
    ("rulerag_r2ag_ft", "R²AG", "RGFT-retriever + R²-Former + LoRA RG-generator"),
)

#: Our metric names -> Table 2's column names.
METRIC_COLUMNS: tuple[tuple[str, str], ...] = (
    ("recall_at_10", "R@10"),
    ("em", "EM"),
    ("token_f1", "T-F1"),
)

#: The paper's Table 2 (RuleRAG arXiv version, DPR + LLAMA2_7B; the rulerag_cok line from the
#: anonymous version's Table 2, whose other rows are the same), one line per row in
#: `TABLE2_ROWS` order: R@10 / EM / T-F1 for RuleQA-I, -Y, -W, -F, -N ("-": not reported).
PAPER_TABLE2_TEXT = """
standard_prompting             -    1.5  19.4   -    0.4  12.4   -    1.5  27.7   -    1.0  24.9   -    0.1  10.4
ve                             -    3.1  10.7   -    0.8  6.5    -    4.2  25.2   -    7.4  12.7   -    4.8  14.1
cok                            -    4.0  12.5   -    1.9  10.4   -    5.7  29.0   -    9.8  18.7   -    7.4  21.6
standard_rag                   14.1 5.2  24.4   3.8  2.6  18.5   7.4  4.8  35.8   18.9 11.0 33.1   19.3 9.8  29.6
rg_retriever_generator         24.2 5.5  25.1   6.6  4.3  19.2   22.6 10.9 37.1   29.9 13.1 33.1   26.5 11.1 30.6
rulerag_icl                    24.2 9.8  29.1   6.6  6.1  20.9   22.6 12.7 39.1   29.9 19.0 35.7   26.5 15.2 32.8
rulerag_ft                     45.1 20.5 38.9   55.7 44.6 41.6   49.9 41.6 47.5   95.1 34.9 48.4   92.5 42.0 57.9
rulerag_cok                    -    5.1  17.9   -    2.6  14.5   -    8.4  32.2   -    11.8 26.1   -    9.2  25.7
ssft_retriever_rgft_generator  38.4 18.7 38.4   46.5 41.5 38.4   39.3 36.9 42.4   79.0 31.5 47.3   80.7 42.0 55.2
rgft_retriever_ssft_generator  45.1 15.3 27.5   55.7 43.7 33.2   49.9 29.4 34.1   95.1 14.2 29.6   92.5 29.8 42.4
ssft_retriever_ssft_generator  38.4 13.8 27.3   46.5 37.4 33.8   39.3 28.8 34.3   79.0 12.0 27.1   80.7 27.5 41.9
rg_retriever_rgft_generator    24.2 13.3 37.7   6.6  13.9 25.6   22.6 14.7 30.5   29.9 21.6 36.7   26.5 15.4 34.9
rgft_retriever_rg_generator    45.1 14.2 33.1   55.7 33.9 36.5   49.9 38.7 43.4   95.1 33.5 41.9   92.5 37.2 47.6
"""  # noqa: E501
#: RuleQA benchmark -> our dataset name, in Table 2's column order.
PAPER_BENCHMARKS: tuple[tuple[str, str], ...] = (
    ("RuleQA-I", "icews14"),
    ("RuleQA-Y", "yago"),
    ("RuleQA-W", "wiki"),
    ("RuleQA-F", "fb15k237"),
    ("RuleQA-N", "nell995"),
)


#: The anonymous version's Table 7 (robustness, App. E): the same rows on queries that need no
#: rule, DPR + LLAMA2_7B, in `PAPER_TABLE2_TEXT`'s layout.
PAPER_TABLE7_TEXT = """
standard_rag                   4.6  10.7 34.9   2.7  3.6  19.7   0.6  2.3  30.2   15.2 11.0 27.6   20.6 12.8 25.9
rulerag_icl                    11.8 11.9 35.5   5.3  9.5  23.4   5.9  2.4  32.5   26.0 17.0 39.9   24.9 17.6 36.3
rulerag_ft                     39.8 16.6 36.3   46.8 28.7 33.8   34.9 15.9 34.1   94.1 35.9 48.9   33.7 20.4 37.5
"""  # noqa: E501


def _parse_table2(text: str) -> dict[str, dict[str, dict[str, float | None]]]:
    """dataset -> config -> {"R@10", "EM", "T-F1"} from a table in `PAPER_TABLE2_TEXT`'s
    layout."""
    table: dict[str, dict[str, dict[str, float | None]]] = {d: {} for _b, d in PAPER_BENCHMARKS}
    for line in text.strip().splitlines():
        config, *cells = line.split()
        if len(cells) != 3 * len(PAPER_BENCHMARKS):
            raise ValueError(f"PAPER_TABLE2_TEXT: {config} has {len(cells)} cells")
        values = [None if c == "-" else float(c) for c in cells]
        for i, (_benchmark, dataset) in enumerate(PAPER_BENCHMARKS):
            r10, em, f1 = values[3 * i : 3 * i + 3]
            table[dataset][config] = {"R@10": r10, "EM": em, "T-F1": f1}
    return table


#: dataset -> config -> {"R@10", "EM", "T-F1"} in percent; None where the paper has none.
PAPER_TABLE2: dict[str, dict[str, dict[str, float | None]]] = _parse_table2(PAPER_TABLE2_TEXT)
#: the same for Table 7 (robustness)
PAPER_TABLE7: dict[str, dict[str, dict[str, float | None]]] = _parse_table2(PAPER_TABLE7_TEXT)


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
    paper_table: Mapping[str, Mapping[str, Mapping[str, float | None]]] | None = None,
) -> pd.DataFrame:
    """Table 2 for one dataset from each configuration's metrics.json content.

    `order` (params' `generation.configs`) decides which configurations appear and in which
    order when given; else the paper's rows first, then any others by name. Rows without
    metrics are kept, empty, so a missing run is visible. `paper_table` (default Table 2)
    gives the paper's columns.
    """
    known = {name: (group, label) for name, group, label in (*TABLE2_ROWS, *EXTRA_ROWS)}
    names = (
        list(order)
        if order is not None
        else [n for n, _g, _l in TABLE2_ROWS if n in metrics]
        + sorted(n for n in metrics if n not in known)
    )
    paper = (PAPER_TABLE2 if paper_table is None else paper_table).get(dataset, {})
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
    rows = []
    previous = None
    for record in table.to_dict("records"):
        cells = []
        for header in headers:
            value = record[header]
            if header == "group":
                value, previous = ("" if value == previous else value), value
            cells.append(_cell(value))
        rows.append(cells)
    align = "".join("l" if h in {"group", "configuration"} else "r" for h in headers)
    lines += markdown.table_lines(headers, rows, align)
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
