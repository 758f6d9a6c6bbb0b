"""Stage `report`'s work: every row folder's results, gathered into Table 2, the robustness
table, the paired claims and the figure.

Each row that ran has a folder (`DataLayout.row`: generation/<row>/, robustness rows
generation/robust/<row>/) with metrics.json and predictions.jsonl; `read_row` reads both, the
one reader for grid, R²AG and robustness rows. `grid_report` sets them in the paper's layout
(`report.results_table`, beside Table 2 and, for the robustness rows, Table 7), checks the
paper's claims row against row on the same queries (`claims.claims_table`) and returns what
`report/` holds (`GridReport.write`).

The evaluation floor sits below generation, so the settings the report reads are named by a
protocol (`GridSetup`) that `generation.settings.GenerationSettings` satisfies.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from rulerag.evaluation.claims import (
    PAPER_CLAIMS,
    R2AG_CLAIMS,
    ROBUST_CLAIMS,
    RULE_CLAIMS,
    claims_table,
    claims_to_markdown,
)
from rulerag.evaluation.report import PAPER_TABLE7, plot_results, results_table, to_markdown
from rulerag.io import atomic_open, iter_jsonl
from rulerag.layout import ROBUST, DataLayout

__all__ = ["REPORT_FILES", "GridReport", "GridSetup", "RowOutcome", "grid_report", "read_row"]

#: what `GridReport.write` puts in report/
REPORT_FILES = ("results.md", "results.csv", "results.png", "claims.csv")
#: every claim the report checks (a claim whose rows did not both run is left out)
CLAIMS = (*PAPER_CLAIMS, *RULE_CLAIMS, *R2AG_CLAIMS, *ROBUST_CLAIMS)
ROBUST_TITLE = "Robustness: the same rows on queries that need no rule"
ROBUST_NOTES = (
    "Each test query asked through one of its rules' body relation (same subject, time, "
    "answers and rules; a corpus document states the answer): the anonymous version's "
    "App. E. `paper` columns: its Table 7 (DPR + LLAMA2_7B). Paired tests: robust/<row> "
    "in the claims below.",
)
#: Table 2's metric columns -> their MLflow metric names
LOGGED = (("R@10", "recall_at_10"), ("EM", "em"), ("T-F1", "token_f1"))


class GridSetup(Protocol):
    """What the report reads of params.yaml's `generation` (its rows and the run's setup)."""

    configs: Sequence[str]
    robustness_rows: Sequence[str]
    profile: str
    model: str
    prompt_style: str
    max_rules: int | None
    retriever: str


@dataclass(frozen=True)
class RowOutcome:
    """A row's metrics.json and its EM per query (qid -> 0/1, from predictions.jsonl)."""

    metrics: dict[str, Any]
    em_by_query: dict[str, float]


def read_row(folder: Path) -> RowOutcome | None:
    """The results in a row's folder; None when the row has not run (no metrics.json)."""
    path = folder / "metrics.json"
    if not path.is_file():
        return None
    metrics = json.loads(path.read_text(encoding="utf-8"))
    em = {str(r["qid"]): float(r["em"]) for r in iter_jsonl(folder / "predictions.jsonl")}
    return RowOutcome(metrics, em)


@dataclass(frozen=True)
class GridReport:
    """What report/ holds: Table 2, the robustness table (if any row ran), the claims."""

    dataset: str
    rows: list[str]  # the grid and R²AG rows, in the table's order
    table: pd.DataFrame
    robust_table: pd.DataFrame | None
    claims: pd.DataFrame
    markdown: str  # results.md

    def write(self, folder: Path) -> None:
        """`REPORT_FILES` into `folder` (a staging folder: `io.staged_outputs`)."""
        with atomic_open(folder / "results.csv") as handle:
            self.table.to_csv(handle, index=False)
        with atomic_open(folder / "results.md") as handle:
            handle.write(self.markdown)
        with atomic_open(folder / "claims.csv") as handle:
            self.claims.to_csv(handle, index=False)
        plot_results(self.table, folder / "results.png", f"{self.dataset}: R@10 / EM / T-F1 (%)")

    def metrics(self) -> dict[str, float]:
        """`<row>.<metric>` for every figure of Table 2 and `claim.<better>_vs_<worse>.p`."""
        out: dict[str, float] = {}
        for record in self.table.to_dict("records"):
            for column, key in LOGGED:
                value = record[column]
                if value is not None and value == value:  # not NaN
                    out[f"{record['config']}.{key}"] = float(value)
        for record in self.claims.to_dict("records"):
            out[f"claim.{record['better']}_vs_{record['worse']}.p"] = record["p"]
        return out


def grid_report(layout: DataLayout, generation: GridSetup, r2ag_rows: Sequence[str]) -> GridReport:
    """The report of `generation.configs` and the R²AG rows `r2ag_rows` (then the robustness
    rows) from their folders under `layout`; a row that has not run stays in the table, empty,
    and is named in the notes."""
    rows = [*generation.configs, *r2ag_rows]
    metrics: dict[str, dict[str, Any]] = {}
    per_query_em: dict[str, dict[str, float]] = {}
    missing = []
    for config in rows:
        outcome = read_row(layout.row(config))
        if outcome is None:
            missing.append(config)
            continue
        metrics[config] = outcome.metrics
        per_query_em[config] = outcome.em_by_query
    robust: dict[str, dict[str, Any]] = {}
    for config in generation.robustness_rows:
        outcome = read_row(layout.row(config, ROBUST))
        if outcome is not None:
            robust[config] = outcome.metrics
            per_query_em[f"{ROBUST}/{config}"] = outcome.em_by_query
    name = layout.dataset
    claims = claims_table(per_query_em, CLAIMS)
    table = results_table(metrics, name, order=rows)
    markdown = to_markdown(
        table, f"{name}: RuleRAG result grid", _notes(generation, metrics, missing)
    )
    robust_table = None
    if robust:
        robust_table = results_table(robust, name, order=list(robust), paper_table=PAPER_TABLE7)
        markdown += "\n" + to_markdown(robust_table, ROBUST_TITLE, ROBUST_NOTES)
    if not claims.empty:
        markdown += "\n" + claims_to_markdown(claims)
    return GridReport(name, rows, table, robust_table, claims, markdown)


def _notes(
    generation: GridSetup, metrics: dict[str, dict[str, Any]], missing: Sequence[str]
) -> list[str]:
    """The lines under Table 2: the run's setup, its generators, the columns, missing rows."""
    queries = sorted({int(m["queries"]) for m in metrics.values() if m.get("queries")})
    generators = sorted({str(m.get("generator")) for m in metrics.values()})
    rules = generation.max_rules or "all selected"
    notes = [
        f"profile `{generation.profile}`, generator model `{generation.model}`, prompt style "
        f"`{generation.prompt_style}`, rules per prompt `{rules}`, "
        f"retriever `{generation.retriever}`, test queries per row: "
        f"{', '.join(map(str, queries)) or '–'}",
        f"generators: {', '.join(generators) or '–'}",
        "R@10, EM and T-F1 in percent; `paper` columns: RuleRAG (Chen et al., arXiv) Table 2, "
        "DPR retrievers and LLAMA2_7B generators on all test queries (–: the paper reports "
        "none).",
    ]
    if missing:
        notes.append(f"no results yet for: {', '.join(missing)}")
    return notes
