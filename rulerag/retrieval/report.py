"""Recall@k of every retrieval configuration of one dataset, side by side, with the paper's.

The `retrieve` stages each write one configuration's metrics.json; this gathers them into one
long table (config, k, strict and loose recall), a Markdown table in the layout of the paper's
retriever comparison (Recall@10 of Standard / RG / RGFT dense retrievers beside the paper's),
and a plot with one line per configuration (Recall@k over k), which is what people compare.
`retrieval_report` is the `retrieval_report` stage's one call; `RetrievalReport.write` puts
recall_at_k.csv, results.md and recall_at_k.png into data/<dataset>/retrieval/report/.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rulerag import markdown
from rulerag.errors import InputError
from rulerag.io import atomic_open, atomic_path
from rulerag.layout import DataLayout
from rulerag.retrieval.configs import parse_config
from rulerag.retrieval.settings import RetrieveSettings

__all__ = [
    "PAPER_CONTRIEVER_RECALL_AT_10",
    "PAPER_RECALL_AT_10",
    "RetrievalReport",
    "plot_recall",
    "recall_table",
    "retrieval_report",
    "to_markdown",
]

#: The paper's Recall@10 (percent) of its dense retriever (DPR) by mode, per dataset
#: (RuleRAG, Table 2: Standard RAG, RuleRAG-ICL, RuleRAG-FT; SSFT-DPR from its Rule Ablation).
PAPER_RECALL_AT_10: dict[str, dict[str, float]] = {
    "icews14": {"standard": 14.1, "rg": 24.2, "rgft": 45.1, "ssft": 38.4},
    "yago": {"standard": 3.8, "rg": 6.6, "rgft": 55.7, "ssft": 46.5},
    "wiki": {"standard": 7.4, "rg": 22.6, "rgft": 49.9, "ssft": 39.3},
    "fb15k237": {"standard": 18.9, "rg": 29.9, "rgft": 95.1, "ssft": 79.0},
    "nell995": {"standard": 19.3, "rg": 26.5, "rgft": 92.5, "ssft": 80.7},
}
#: The paper's Recall@10 (percent) with Contriever, untrained (RuleRAG, Table 4): the fair
#: reference for a strong training-free encoder such as MiniLM, where rules gain little.
PAPER_CONTRIEVER_RECALL_AT_10: dict[str, dict[str, float]] = {
    "icews14": {"standard": 41.2, "rg": 45.5},
    "yago": {"standard": 52.7, "rg": 55.2},
    "wiki": {"standard": 62.2, "rg": 63.2},
    "fb15k237": {"standard": 80.6, "rg": 83.9},
    "nell995": {"standard": 87.6, "rg": 88.5},
}


def recall_table(metrics: Mapping[str, Mapping[str, Any]], ks: Sequence[int]) -> pd.DataFrame:
    """Long format: one row per (config, k) with `recall` and `loose_recall` (fractions)."""
    rows = []
    for config, figures in metrics.items():
        for k in ks:
            if f"recall_at_{k}" in figures:
                rows.append(
                    {
                        "config": config,
                        "k": int(k),
                        "recall": float(figures[f"recall_at_{k}"]),
                        "loose_recall": float(figures.get(f"loose_recall_at_{k}", float("nan"))),
                    }
                )
    return pd.DataFrame(rows, columns=["config", "k", "recall", "loose_recall"])


def to_markdown(dataset: str, table: pd.DataFrame, ks: Sequence[int]) -> str:
    """Strict Recall@k per configuration (percent), loose Recall@10, and the paper's R@10 of
    the same mode for dense configurations."""
    paper = PAPER_RECALL_AT_10.get(dataset, {})
    contriever = PAPER_CONTRIEVER_RECALL_AT_10.get(dataset, {})
    header = [
        "configuration",
        *[f"R@{k}" for k in ks],
        "loose R@10",
        "paper R@10 (DPR)",
        "paper R@10 (Contriever)",
    ]
    rows = []
    for config, group in table.groupby("config", sort=False):
        by_k = group.set_index("k")
        cells = [f"{100 * by_k.at[k, 'recall']:.1f}" if k in by_k.index else "–" for k in ks]
        loose = by_k.at[10, "loose_recall"] if 10 in by_k.index else float("nan")
        parsed = parse_config(str(config))
        refs = (
            [None, None] if parsed.sparse else [paper.get(parsed.mode), contriever.get(parsed.mode)]
        )
        rows.append(
            [
                config,
                *cells,
                "–" if pd.isna(loose) else f"{100 * loose:.1f}",
                *("–" if ref is None else f"{ref:.1f}" for ref in refs),
            ]
        )
    lines = [f"# {dataset}: retrieval, Recall@k (%)", ""]
    lines += markdown.table_lines(header, rows, align="l" + "r" * (len(header) - 1))
    lines += [
        "",
        "R@k: the united list of a query's (query, rule) searches ranked by score and cut at k,",
        "so configurations compare at equal k. Loose R@10: the answer anywhere in the union of",
        "the per-rule top-10 lists (how the paper counts rule-guided recall). The paper's",
        "figures: DPR from its Table 2, untrained Contriever from its Table 4 (the fair",
        "reference for an untrained encoder such as MiniLM: rules gain 1-4 points there).",
        "",
    ]
    return "\n".join(lines)


def plot_recall(dataset: str, table: pd.DataFrame, path: Path) -> None:
    """Recall@k over k, one line per configuration (strict), log-scaled k."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for config, group in table.groupby("config", sort=False):
        style = "--" if str(config).startswith("bm25") else "-"
        ax.plot(group["k"], 100 * group["recall"], style, marker="o", label=str(config))
    ax.set_xscale("log")
    ks = sorted(table["k"].unique())
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("k (documents)")
    ax.set_ylabel("Recall@k (%)")
    ax.set_title(f"{dataset}: Recall@k by retrieval configuration")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")  # the path may be a temporary name
    plt.close(fig)


@dataclass
class RetrievalReport:
    """The retrieval configurations of one dataset side by side (what `retrieval_report`
    writes), with the metrics.json of each that it was made from."""

    dataset: str
    ks: list[int]
    metrics: dict[str, dict[str, Any]]  # configuration -> its metrics.json
    table: pd.DataFrame  # `recall_table`
    markdown: str  # `to_markdown`

    #: the files `write` puts in its folder (all logged to MLflow)
    FILES = ("recall_at_k.csv", "results.md", "recall_at_k.png")

    def write(self, folder: Path) -> None:
        """recall_at_k.csv, results.md and recall_at_k.png into `folder`, each atomically."""
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_open(folder / "recall_at_k.csv") as handle:
            self.table.to_csv(handle, index=False)
        with atomic_open(folder / "results.md") as handle:
            handle.write(self.markdown)
        with atomic_path(folder / "recall_at_k.png") as tmp:
            plot_recall(self.dataset, self.table, tmp)

    def recall_metrics(self) -> dict[str, float]:
        """Each configuration's strict Recall@k as MLflow metrics (`minilm-rg_recall_at_10`)."""
        return {
            f"{name}_recall_at_{k}": figures[f"recall_at_{k}"]
            for name, figures in self.metrics.items()
            for k in self.ks
            if f"recall_at_{k}" in figures
        }


def retrieval_report(layout: DataLayout, settings: RetrieveSettings) -> RetrievalReport:
    """The `retrieval_report` stage: the metrics.json of every configuration the retrieve
    stages produce (`RetrieveSettings.config_names`), as one table beside the paper's.
    A missing one is an `InputError` naming it."""
    ks = list(settings.ks)
    metrics = {}
    for name in settings.config_names():
        source = layout.retrieval_metrics(name)
        if not source.is_file():
            raise InputError(f"retrieval_report@{layout.dataset}: {source} missing")
        metrics[name] = json.loads(source.read_text(encoding="utf-8"))
    table = recall_table(metrics, ks)
    return RetrievalReport(
        layout.dataset, ks, metrics, table, to_markdown(layout.dataset, table, ks)
    )
