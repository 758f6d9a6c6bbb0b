"""benchmarks/compare_rows.py: two runs' rows paired query by query, against counts by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import compare_rows
from rulerag.layout import DataLayout


def write_row(root: Path, row: str, em: dict[str, int], metrics: dict[str, float]) -> None:
    folder = DataLayout.of(root, "nell995").row(row)
    folder.mkdir(parents=True)
    lines = [json.dumps({"qid": q, "em": float(v)}) for q, v in em.items()]
    (folder / "predictions.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "metrics.json").write_text(json.dumps(metrics))


def test_rows_are_paired_on_their_common_queries(tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    # q1-q6 both runs; q7 only before (not paired). after right alone: q2 q3 q4; before alone: q5
    write_row(before, "symbolic", {"q1": 1, "q2": 0, "q3": 0, "q4": 0, "q5": 1, "q6": 0, "q7": 1},
              {"em": 0.43, "token_f1": 0.5})  # fmt: skip
    write_row(after, "symbolic", {"q1": 1, "q2": 1, "q3": 1, "q4": 1, "q5": 0, "q6": 0},
              {"em": 0.67, "token_f1": 0.7})  # fmt: skip
    write_row(before, "rulerag_icl_rank", {"q1": 0}, {"token_f1": 0.1, "rank_mrr": 0.25,
              "gold_among_candidates": 0.5})  # fmt: skip
    write_row(after, "rulerag_icl_rank", {"q1": 1}, {"token_f1": 0.2, "rank_mrr": 0.5,
              "gold_among_candidates": 0.75})  # fmt: skip
    write_row(before, "standard_rag", {"q1": 1}, {"token_f1": 0.1})  # only one side: left out

    records = {r["row"]: r for r in compare_rows.compare(before, after, "nell995", None)}
    assert sorted(records) == ["rulerag_icl_rank", "symbolic"]
    sym = records["symbolic"]
    assert (sym["queries"], sym["em_before"], sym["em_after"]) == (6, 33.3, 66.7)
    assert (sym["only_after"], sym["only_before"]) == (3, 1)
    assert sym["p"] == pytest.approx(0.625)  # two-sided binomial, 3 of 4 discordant
    assert sym["mrr_before"] is None and sym["tf1_after"] == 70.0
    rank = records["rulerag_icl_rank"]
    assert (rank["mrr_before"], rank["mrr_after"], rank["gold_after"]) == (25.0, 50.0, 75.0)
    table = compare_rows.to_markdown(list(records.values()))
    assert "| `symbolic` | 6 | 33.3 → 66.7 | 3 / 1, p 0.625 | 50.0 → 70.0 | – | – |" in table


def test_a_named_row_missing_on_one_side_is_an_error_naming_its_folder(tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    write_row(before, "symbolic", {"q1": 1}, {"token_f1": 0.5})
    DataLayout.of(after, "nell995").generation.mkdir(parents=True)
    with pytest.raises(SystemExit, match=r"after/nell995/generation/symbolic: .*\(after\)"):
        compare_rows.compare(before, after, "nell995", ["symbolic"])
