"""The rule-retrieval figure: Recall@k of every method, one bar group per retriever."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

__all__ = ["plot_recall"]


def plot_recall(results: pd.DataFrame, k: int, path: Path, title: str) -> None:
    """Horizontal bars of Recall@k (%) per row, grouped by retriever and rule form."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [
        row["row"]
        if row["retriever"] == "-"
        else f"{row['retriever']} ({row['rule_form']}): {row['row']}"
        for row in results.to_dict("records")
    ]
    values = results[f"R@{k}"].tolist()
    colours = [
        "tab:gray" if r == "-" else ("tab:blue" if r == "bm25" else "tab:orange")
        for r in results["retriever"]
    ]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(labels) + 1.2))
    ax.barh(range(len(labels)), values, color=colours)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"Recall@{k} of the gold rules (%)")
    ax.set_title(title, fontsize=9)
    for i, v in enumerate(values):
        ax.text(v + 0.5, i, f"{v:.1f}", va="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
