"""A result grid without running it: row folders as `generate` and `robustness` write them,
two rows with hand-countable per-query EM on the test queries and on their robustness twins,
and the generation settings that name those rows.

The report's unit tests compute every figure of `grid_report` by hand from these rows; the
`report` stage's test checks that the stage writes exactly what `grid_report` returns for
them."""

from __future__ import annotations

from pathlib import Path

import yaml

from rulerag.generation.grid import RowResult
from rulerag.generation.settings import GenerationSettings, generation_settings
from rulerag.io import staged_outputs
from rulerag.layout import ROBUST, DataLayout
from tests.helpers import PROJECT

#: the grid's rows; rulerag_ft has not run
CONFIGS = ["standard_rag", "rulerag_icl", "rulerag_ft"]
#: the rows that have robustness twins
ROBUST_ROWS = ["standard_rag", "rulerag_icl"]


def write_row(folder: Path, em: dict[str, int], token_f1: float, recall: float) -> None:
    """A row folder as `generate` writes it: per-query EM in predictions.jsonl, the means in
    metrics.json (with its manifest)."""
    records = [{"qid": qid, "em": float(hit), "prediction": "x"} for qid, hit in em.items()]
    metrics = {
        "queries": len(em),
        "em": sum(em.values()) / len(em),
        "token_f1": token_f1,
        "recall_at_10": recall,
        "generator": "base:smollm2",
    }
    with staged_outputs(folder, "generate") as staging:
        RowResult(records, metrics).write(staging)


def two_row_grid(data_dir: Path, dataset: str = "icews14") -> DataLayout:
    """`standard_rag` and `rulerag_icl` on 4 test queries (EM 1/4 and 3/4; rulerag_icl alone
    is right on q2, q3) and on 3 robustness queries (EM 0/3 and 3/3), under `data_dir`."""
    layout = DataLayout.of(data_dir, dataset)
    write_row(layout.row("standard_rag"), {"q1": 1, "q2": 0, "q3": 0, "q4": 0}, 0.5, 0.75)
    write_row(layout.row("rulerag_icl"), {"q1": 1, "q2": 1, "q3": 1, "q4": 0}, 0.8, 1.0)
    write_row(layout.row("standard_rag", ROBUST), {"r1": 0, "r2": 0, "r3": 0}, 0.1, 0.5)
    write_row(layout.row("rulerag_icl", ROBUST), {"r1": 1, "r2": 1, "r3": 1}, 1.0, 0.5)
    return layout


def grid_settings() -> GenerationSettings:
    """The project's `generation` section with `CONFIGS` as the grid's rows and `ROBUST_ROWS`
    as its robustness rows."""
    section = yaml.safe_load((PROJECT / "params.yaml").read_text())["generation"]
    return generation_settings({**section, "configs": CONFIGS, "robustness_rows": ROBUST_ROWS})
