"""Rule generalisation (the anonymous RuleRAG version, Sec. 6 "Generalization of the Learned
Rule Patterns", Figure 5): does RuleRAG-FT learn to use rules, or only the rules it saw?

The rule bank is split into disjoint, equal-size banks R_1..R_k (`split_bank`, seeded, by head
relation, so a query's rules, which are its relation's, all fall in one bank). RuleRAG-FT (an
RGFT query encoder and an RGFT generator adapter) is trained on R_i's F_R / F_G queries alone
and tested on R_j's test queries; Figure 5 plots its EM gain over Standard RAG on R_j for all
(i, j). The paper's finding: the diagonal is highest, the off-diagonal gains stay positive.

This module holds the pieces that do not train (the split, the query assignment, the table and
the heat map); `pipeline_steps/generalisation.py` trains and answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rulerag import markdown


def split_bank(bank: pd.DataFrame, parts: int, seed: int) -> dict[str, int]:
    """rule_id -> bank (1..parts): disjoint, equal-size banks of whole head relations.

    Head relations are shuffled with `seed` and dealt, largest first, to the bank with the
    fewest rules so far; each bank is then cut to the smallest bank's size by dropping its
    lowest-scoring rules, never a relation's last one (so every relation keeps a bank). Sizes
    are equal unless that rule forbids it (a bank of many one-rule relations).
    """
    relations = bank.groupby("head_relation").size()
    if len(relations) < parts:
        raise ValueError(
            f"the bank has rules for {len(relations)} head relations; {parts} disjoint banks "
            "need at least as many"
        )
    order = np.random.default_rng(seed).permutation(relations.index.to_numpy())
    shuffled = relations.loc[order]
    dealt = shuffled.sort_values(ascending=False, kind="stable")  # ties keep the shuffle
    load = [0] * parts
    part_of_relation: dict[Any, int] = {}
    for relation, size in dealt.items():
        target = int(np.argmin(load))
        part_of_relation[relation] = target + 1
        load[target] += int(size)
    parts_of = bank["head_relation"].map(part_of_relation)
    size = min(load)
    keep: dict[str, int] = {}
    for part in range(1, parts + 1):
        rules = bank[parts_of == part].sort_values(
            ["score", "rule_id"], ascending=[False, True], kind="stable"
        )
        first = ~rules.duplicated("head_relation")  # each relation's best rule stays
        ranked = pd.concat([rules[first], rules[~first]])
        for rule_id in ranked["rule_id"].head(max(size, int(first.sum()))):
            keep[str(rule_id)] = part
    return keep


def assign_queries(
    records: Iterable[Mapping[str, Any]], parts: Mapping[str, int]
) -> dict[int, list[dict[str, Any]]]:
    """Queries by bank: each query goes with its first selected rule's bank and keeps only its
    rules of that bank (a cut rule leaves it); a query with none is left out."""
    out: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        rules = [str(r) for r in record.get("rule_ids") or [] if str(r) in parts]
        if not rules:
            continue
        part = parts[rules[0]]
        kept = [r for r in rules if parts[r] == part]
        out.setdefault(part, []).append({**record, "rule_ids": kept})
    return out


def gains_table(em: Mapping[tuple[int, int], float], baseline: Mapping[int, float]) -> pd.DataFrame:
    """EM gain in points of RuleRAG-FT trained on bank i (rows) over Standard RAG, tested on
    bank j (columns)."""
    parts = sorted({i for i, _ in em} | {j for _, j in em})
    frame = pd.DataFrame(
        [[100 * (em[(i, j)] - baseline[j]) for j in parts] for i in parts],
        index=[f"R{i}" for i in parts],
        columns=[f"R{j}" for j in parts],
    )
    frame.index.name = "trained on"
    frame.columns.name = "tested on"
    return frame.round(1)


def long_form(em: Mapping[tuple[int, int], float], baseline: Mapping[int, float]) -> pd.DataFrame:
    """One row per (train bank, test bank): the DVC plot's data (a heat map: x, y, gain)."""
    rows = [
        {
            "trained_on": f"R{i}",
            "tested_on": f"R{j}",
            "em": round(100 * value, 1),
            "standard_rag_em": round(100 * baseline[j], 1),
            "gain": round(100 * (value - baseline[j]), 1),
        }
        for (i, j), value in sorted(em.items())
    ]
    return pd.DataFrame(rows)


def summary(gains: pd.DataFrame) -> dict[str, float]:
    """Mean gain on the diagonal (same bank) and off it (unseen banks)."""
    values = gains.to_numpy()
    diagonal = np.diag(values)
    off = values[~np.eye(len(values), dtype=bool)]
    return {
        "mean_gain_same_bank": round(float(diagonal.mean()), 2),
        "mean_gain_other_banks": round(float(off.mean()), 2) if off.size else 0.0,
        "other_bank_cells_positive": int((off > 0).sum()),
        "other_bank_cells": int(off.size),
    }


def plot_gains(gains: pd.DataFrame, path: Path, title: str) -> None:
    """Figure 5 as a heat map: gain over Standard RAG, train bank by test bank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = gains.to_numpy(dtype=float)
    bound = max(1.0, float(np.abs(values).max()))
    fig, ax = plt.subplots(figsize=(4.6, 3.8))
    image = ax.imshow(values, cmap="RdBu", vmin=-bound, vmax=bound)
    ax.set_xticks(range(values.shape[1]), gains.columns)
    ax.set_yticks(range(values.shape[0]), gains.index)
    ax.set_xlabel("tested on")
    ax.set_ylabel("RuleRAG-FT trained on")
    for (row, col), value in np.ndenumerate(values):
        ax.text(col, row, f"{value:+.1f}", ha="center", va="center", fontsize=9)
    fig.colorbar(image, ax=ax, label="EM gain over Standard RAG (points)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


def to_markdown(
    dataset: str,
    gains: pd.DataFrame,
    em: Mapping[tuple[int, int], float],
    baseline: Mapping[int, float],
    sizes: Mapping[int, Sequence[int]],
) -> str:
    """results.md: bank sizes, EM of every cell, the gains and their summary."""
    parts = sorted(baseline)
    lines = [f"# {dataset}: rule generalisation over {len(parts)} disjoint rule banks", ""]
    lines += markdown.table_lines(
        ["bank", "rules", "head relations", "F_R items", "F_G queries", "test queries"],
        [[f"R{part}", *sizes[part]] for part in parts],
        align="lrrrrr",
    )
    lines += ["", "EM in % (RuleRAG-FT trained on the row's bank, tested on the column's):", ""]
    lines += markdown.table_lines(
        ["trained on", *(f"R{j}" for j in parts)],
        [["Standard RAG", *(f"{100 * baseline[j]:.1f}" for j in parts)]]
        + [[f"R{i}", *(f"{100 * em[(i, j)]:.1f}" for j in parts)] for i in parts],
        align="l" + "r" * len(parts),
    )
    lines += ["", "Gain over Standard RAG in points (the paper's Figure 5):", ""]
    lines += markdown.table_lines(
        ["trained on", *gains.columns],
        [[name, *(f"{v:+.1f}" for v in row)] for name, row in gains.iterrows()],
        align="l" + "r" * len(gains.columns),
    )
    stats = summary(gains)
    lines += [
        "",
        f"Mean gain on the bank trained on: {stats['mean_gain_same_bank']:+.2f}; on the other "
        f"banks: {stats['mean_gain_other_banks']:+.2f} ({stats['other_bank_cells_positive']} "
        f"of {stats['other_bank_cells']} cells positive).",
    ]
    return "\n".join(lines) + "\n"
