"""What the project transcribed from the RuleRAG paper is the paper's text: the prompt tables
(Appendix A.9, Tables 8 and 10) and every figure of Table 2 that the report prints beside ours.

The papers are in `../shared/papers/` beside the project (a development checkout); elsewhere
these tests skip."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rulerag.evaluation.report import PAPER_BENCHMARKS, PAPER_TABLE2, TABLE2_ROWS
from tests.paper_prompts import TABLE8, TABLE10

pytestmark = pytest.mark.data

PAPER = (
    Path(__file__).resolve().parents[2].parent / "shared" / "papers" / "001_e3cd2d7216e99635.txt"
)


@pytest.fixture(scope="module")
def table_rows() -> list[str]:
    if not PAPER.is_file():
        pytest.skip(f"no paper text at {PAPER}")
    lines = PAPER.read_text(encoding="utf-8").splitlines()
    return [line[1:-1].strip() for line in lines if line.startswith("|") and line.endswith("|")]


def _contains_run(rows: list[str], wanted: tuple[str, ...]) -> bool:
    n = len(wanted)
    return any(tuple(rows[i : i + n]) == wanted for i in range(len(rows) - n + 1))


def test_prompt_tables_are_the_papers(table_rows: list[str]) -> None:
    assert _contains_run(table_rows, TABLE8)
    assert _contains_run(table_rows, TABLE10)


#: Table 2's row labels in the paper's text, in `TABLE2_ROWS` order (retriever | generator).
PAPER_ROW_LABELS = (
    "Standard Prompting | None | LLAMA2_7B",
    "VE (3-shot) | DPR | LLAMA2_7B",
    "CoK (3-shot) | DPR | LLAMA2_7B",
    "Standard RAG | DPR | LLAMA2_7B",
    "RuleRAG-ICL | RG-DPR | LLAMA2_7B",
    "RG-DPR | RG-LLAMA2_7B",
    "RuleRAG-FT | RGFT-DPR | RGFT-LLAMA2_7B",
    "variants of RuleRAG-FT | SSFT-DPR | RGFT-LLAMA2_7B",
    "RGFT-DPR | SSFT-LLAMA2_7B",
    "SSFT-DPR | SSFT-LLAMA2_7B",
    "variants of RuleRAG-FT | RG-DPR | RGFT-LLAMA2_7B",
    "RGFT-DPR | RG-LLAMA2_7B",
)


def test_table2_figures_are_the_papers(table_rows: list[str]) -> None:
    # Table 2 is the first table with R@10 / EM / T-F1 for all five benchmarks
    start = next(i for i, row in enumerate(table_rows) if row.startswith("Standard Prompting"))
    body = table_rows[start : start + 14]
    skipped = ("Rule Ablation", "RGFT Ablation")  # group headers, not rows
    rows = [r for r in body if not r.startswith(skipped)]
    arxiv_rows = [row for row in TABLE2_ROWS if row[0] != "rulerag_cok"]  # anonymous only
    assert len(rows) == len(arxiv_rows) == len(PAPER_ROW_LABELS)
    for (config, _group, _label), label, row in zip(
        arxiv_rows, PAPER_ROW_LABELS, rows, strict=True
    ):
        assert row.startswith(label), (config, row)
        cells = [c.strip() for c in row[len(label) :].split("|") if c.strip()]
        assert len(cells) == 3 * len(PAPER_BENCHMARKS), row
        ours = [
            PAPER_TABLE2[dataset][config][column]
            for _benchmark, dataset in PAPER_BENCHMARKS
            for column in ("R@10", "EM", "T-F1")
        ]
        theirs = [None if c == "-" else float(c) for c in cells]
        assert ours == theirs, config
    assert re.search(r"RuleQA-I \| RuleQA-Y \| RuleQA-W \| RuleQA-F \| RuleQA-N", " | ".join(
        table_rows[start - 2 : start]))  # fmt: skip


def test_rulerag_cok_figures_are_the_anonymous_versions() -> None:
    """RuleRAG-CoK is only in the anonymous version's Table 2 (tab-separated in its text)."""
    anonymous = PAPER.with_name("000_c4b76ba56dec01b6.txt")
    if not anonymous.is_file():
        pytest.skip(f"no paper text at {anonymous}")
    (line,) = [
        row for row in anonymous.read_text(encoding="utf-8").splitlines()
        if row.startswith("RuleRAG-CoK\tRG-DPR")
    ]  # fmt: skip
    cells = line.split("\t")[3:]
    theirs = [None if c == "-" else float(c) for c in cells if c.strip()]
    ours = [
        PAPER_TABLE2[dataset]["rulerag_cok"][column]
        for _benchmark, dataset in PAPER_BENCHMARKS
        for column in ("R@10", "EM", "T-F1")
    ]
    assert ours == theirs
