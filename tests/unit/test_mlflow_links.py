"""The MLflow UI addresses behind a stage task's extra link "MLflow run"."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from rulerag.orchestration.mlflow_links import (
    DEFAULT_MLFLOW_UI,
    MLFLOW_UI_ENV,
    experiment_runs_url,
    mlflow_ui_base,
    run_url,
    tags_filter,
)


def test_ui_base_defaults_to_make_mlflow_ui_and_drops_a_trailing_slash() -> None:
    assert mlflow_ui_base({}) == DEFAULT_MLFLOW_UI == "http://127.0.0.1:5000"
    assert mlflow_ui_base({MLFLOW_UI_ENV: ""}) == DEFAULT_MLFLOW_UI
    assert mlflow_ui_base({MLFLOW_UI_ENV: "https://mlflow.lab/prefix/"}) == (
        "https://mlflow.lab/prefix"
    )


@pytest.mark.parametrize("bad", ["127.0.0.1:5000", "ftp://host", "http://", "http://h/#/x"])
def test_ui_base_refuses_what_is_no_http_url_by_name(bad: str) -> None:
    with pytest.raises(ValueError, match=MLFLOW_UI_ENV):
        mlflow_ui_base({MLFLOW_UI_ENV: bad})


def test_tags_filter_quotes_keys_and_values_as_mlflow_search_wants() -> None:
    run_id = "manual__2026-11-27T06:22:24.471031+00:00"
    assert tags_filter({"rulerag.pipeline_run": run_id, "rulerag.stage_instance": "ingest@x"}) == (
        f"tags.`rulerag.pipeline_run` = '{run_id}' and tags.`rulerag.stage_instance` = 'ingest@x'"
    )
    assert tags_filter({"k": "it's"}) == 'tags.`k` = "it\'s"'
    with pytest.raises(ValueError, match="both quote"):
        tags_filter({"k": "'\""})
    with pytest.raises(ValueError, match="tag key"):
        tags_filter({"a`b": "x"})
    with pytest.raises(ValueError, match="at least one"):
        tags_filter({})


def test_urls_use_mlflow_3_routes_and_encode_the_filter() -> None:
    search = "tags.`rulerag.pipeline_run` = 'manual__2026+00:00' and tags.`t` = 'a&b#c'"
    url = experiment_runs_url("http://ui", "7", search)
    parts = urlsplit(url)
    assert parts.fragment.startswith("/experiments/7/runs?searchFilter=")
    query = parts.fragment.split("?", 1)[1]
    assert parse_qs(query) == {"searchFilter": [search]}  # '&', '#', '+' survive
    assert run_url("http://ui", "7", "abc123") == "http://ui/#/experiments/7/runs/abc123"
