"""The `generate` stage against hostile or broken API servers (issue 45), on a fake server on
127.0.0.1 (the generator's own cases: tests/unit/test_api_hostile.py): SIGTERM while four
requests trickle in ends the stage at once, its run KILLED; a 200 whose body is not JSON is
retried, then one line (exit 2, no traceback)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest

from tests.support.fake_openai import FakeOpenAI
from tests.unit.test_api_hostile import (
    API_ROW,
    BOUND,
    HTML,
    KEY,
    TRICKLE,
    api_workers,
    sigterm_when,
)

# -- the generate stage ----------------------------------------------------------------------


@pytest.fixture
def api_row_project(tmp_path, monkeypatch, stage_project, clean_tracking_env) -> Iterator[dict]:
    """A dataset with six test queries and a BM25 rule-guided run, and the params of an api
    row `gpt` (concurrency 4) for the `generate` stage; the key set, MLflow's store here."""
    from rulerag.io import write_jsonl
    from tests.helpers import run_frame, write_bank

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("RULERAG_API_KEY", KEY)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    layout = stage_project.layout("toy")
    layout.benchmark.mkdir(parents=True)
    layout.output("bm25-rg").mkdir(parents=True)
    queries = [
        {"qid": f"t{i}", "query": f"what does X{i} visit ?", "answers": ["Kabul"],
         "rule_ids": ["R1"], "time": None}
        for i in range(6)
    ]  # fmt: skip
    write_jsonl(layout.queries("test"), queries)
    write_jsonl(layout.corpus, [{"id": "D0", "contents": "X0 visits Kabul ."}])
    write_bank(layout.rule_bank, {"R1": "[E1, visits, E2] leads to [E1, meets, E2]"})
    run_frame([("t0", "R1", 1, "D0", 2.0)]).to_parquet(layout.run("bm25-rg"))
    yield {
        "generation.retriever": "bm25",
        "generation.num_documents": 1,
        "generation.max_rules": 1,
        "generation.test_queries": None,
        "generation.configs": ["gpt"],
        "generation.grid.gpt": API_ROW,
        "build_benchmark.rule_selection.top_n": 3,
    }


@pytest.mark.slow  # an MLflow SQLite store is created
def test_sigterm_stops_the_generate_stage_at_once(api_row_project, stage_project, tmp_path):
    """The stage with an api row, concurrency 4, its server trickling: SIGTERM while four
    requests are in flight ends it at once (exit 143, its MLflow run KILLED, nothing
    published); it used to live on until every request in flight had ended."""
    import pipeline_steps.generate as stage
    from tests.helpers import stage_runs

    with FakeOpenAI([], default=TRICKLE) as server:
        api = {"base_url": server.url, "model": "fake", "shots": 0, "concurrency": 4}
        params = {**api_row_project, "generation.api": {**api, "timeout": 120}}
        sent = sigterm_when(lambda: len(server.requests) >= 4, timeout=120)
        code = stage_project.run(stage, "--dataset", "toy", "--config", "gpt", params=params)
        assert code == 128 + signal.SIGTERM
        assert time.monotonic() - sent[0] < BOUND  # its MLflow run sent meanwhile
        for worker in api_workers():
            worker.join(BOUND)
            assert not worker.is_alive()
        assert len(server.requests) == 4
    assert not (stage_project.layout("toy").row("gpt") / "predictions.jsonl").exists()
    (run,) = stage_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "generate")
    assert run.info.status == "KILLED"


@pytest.mark.slow  # an MLflow SQLite store is created
def test_the_generate_stage_fails_in_one_line_on_a_page_that_is_not_json(
    api_row_project, stage_project, capsys
):
    """A proxy's HTML page for every request: retried within the budget, then one line
    naming the endpoint, status and content type (exit 2, no traceback); it used to be
    `requests.exceptions.JSONDecodeError` with a traceback, at once."""
    import pipeline_steps.generate as stage

    with FakeOpenAI([], default=HTML) as server:
        api = {"base_url": server.url, "model": "fake", "shots": 0, "backoff": 0.0}
        params = {**api_row_project, "generation.api": {**api, "max_retries": 1}}
        code = stage_project.run(stage, "--dataset", "toy", "--config", "gpt", params=params)
        assert len(server.requests) >= 2  # retried
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("generate failed:")]
    assert f"{server.url}/chat/completions: HTTP 200 with a body that is not JSON" in line
    assert "text/html" in line and "after 2 attempts" in line and KEY not in err
