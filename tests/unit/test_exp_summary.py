"""The experiment summary's pure parts (the real `dvc exp show --json`: tests/pipeline)."""

from __future__ import annotations

import json

import pytest

from rulerag.orchestration.exp_summary import short_file, summary


def _entry(name: str, k: int, metrics: dict) -> dict:
    return {
        "rev": name,
        "name": name,
        "data": {
            "params": {"params.yaml": {"data": {"gen": {"k": k}}}},
            "metrics": {file: {"data": data} for file, data in metrics.items()},
        },
        "error": None,
    }


def test_short_names_say_what_a_metric_file_holds() -> None:
    assert short_file("data/icews14/generation/r2ag/metrics.json") == "icews14 generation/r2ag"
    assert short_file("data/nell995/rules/stats.json") == "nell995 rules/stats"
    assert short_file("metrics.json") == "metrics.json"


def test_new_rows_nested_keys_and_nothing_moved() -> None:
    base = _entry("main", 1, {"data/i/qa/metrics.json": {"em": 0.2, "by": {"mrr": float("nan")}}})
    moved = _entry(
        "exp",
        2,
        {
            "data/i/qa/metrics.json": {"em": 0.2, "by": {"mrr": 0.5}},
            "data/i/generation/r2ag/metrics.json": {"em": 0.1},
        },
    )
    same = _entry("same", 1, {"data/i/qa/metrics.json": {"em": 0.2}})
    base["experiments"] = [{"name": "exp", "revs": [moved]}, {"name": "same", "revs": [same]}]
    text = json.dumps([{"rev": "workspace", "data": {}}, base])
    out = summary(text)
    assert "| i qa | by.mrr | – | 0.5 |" in out  # NaN in the commit: no value there
    assert "| i generation/r2ag | em | – | 0.1 |" in out  # a row only the experiment has
    assert "| i qa | em |" not in out
    assert "## same (against main)\n\n- no params changed\n\nNo headline metric moved." in out
    with pytest.raises(ValueError, match="no experiment named gone"):
        summary(text, ["gone"])
    with pytest.raises(ValueError, match="no JSON"):
        summary("ERROR: not a dvc repo")
