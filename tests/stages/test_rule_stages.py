"""build_benchmark, rule_retrieval_eval and apply_rules run in-process on a synthetic KG, with
a rule-retrieval selection whose LLM is a local fake chat API: each stage's params go from its
params.yaml to the library as typed settings (the API endpoint reaches the selector and the
evaluation), and the stage writes what its library entry returns."""

from __future__ import annotations

import json

import pytest

from rulerag.benchmark.files import read_benchmark_files
from rulerag.io import read_jsonl, read_provenance
from rulerag.params import load_params
from rulerag.rule_retrieval.selector import RuleRetrievalSelection
from rulerag.tracking import TAG_STAGE_INSTANCE
from tests.helpers import StageProject, stage_runs
from tests.support.fake_openai import FakeOpenAI, fake_rule_llm
from tests.support.synthetic_kg import write_synthetic_dataset

pytestmark = pytest.mark.slow  # an MLflow SQLite store is created per test

PARAMS = {
    "build_benchmark.test_size": 30,
    "build_benchmark.rule_selection.method": "siar_r3",
    "build_benchmark.rule_selection.candidates": 3,
    "rule_retrieval.queries": 6,
    "rule_retrieval.methods": ["vanilla", "siar"],
    "rule_retrieval.retrievers": ["bm25"],
    "rule_retrieval.query_forms": ["si"],
    "rule_retrieval.ks": [1, 2],
    "rule_retrieval.top_k": 2,
    "rule_retrieval.top_n": 2,
    "rule_retrieval.similarity": False,
    "rule_retrieval.llm.kind": "api",
    "rule_retrieval.llm.model": "fake",
    "generation.api.backoff": 0.0,
    "generation.api.concurrency": 1,
    "apply_rules.evaluate_facts": 40,
    "apply_rules.min_body_support": 0,
}


def test_the_rule_stages_run_on_typed_params(
    stage_project: StageProject,
    monkeypatch: pytest.MonkeyPatch,
    mlflow_store: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import pipeline_steps.apply_rules as apply_rules
    import pipeline_steps.build_benchmark as build_benchmark
    import pipeline_steps.rule_retrieval_eval as rule_retrieval_eval

    monkeypatch.setenv("RULERAG_API_KEY", "sk-local-test")
    layout = stage_project.layout("toy")
    write_synthetic_dataset(layout, temporal=True)
    with FakeOpenAI([], reply=fake_rule_llm) as server:
        params = {**PARAMS, "generation.api.base_url": server.url}
        assert stage_project.run(build_benchmark, "--dataset", "toy", params=params) == 0
        asked_by_benchmark = len(server.requests)
        assert stage_project.run(rule_retrieval_eval, "--dataset", "toy", params=params) == 0
        # the stage's selection again, from the same typed params: every answer is cached
        typed = load_params(stage_project.root / "params.yaml")
        selectors = RuleRetrievalSelection(
            typed.rule_retrieval, typed.generation.api, layout.rule_llm_cache, None
        )
        asked = len(server.requests)
        again = read_benchmark_files(typed.build_benchmark, layout, selectors=selectors)
        assert len(server.requests) == asked
    assert stage_project.run(apply_rules, "--dataset", "toy", params=params) == 0
    printed = capsys.readouterr().out

    # build_benchmark: the retrieval selection asked the fake API, its answers are cached
    stats = json.loads((layout.benchmark / "stats.json").read_text())
    assert stats["selection"] == "siar_r3" and stats["seed"] == typed.build_benchmark.seed
    assert 0 < stats["selection_cost"]["llm_calls"] == asked_by_benchmark
    assert layout.rule_llm_cache.is_file()
    assert read_jsonl(layout.queries("test")) == json.loads(json.dumps(again.benchmark.test))
    assert read_jsonl(layout.corpus) == again.benchmark.corpus[["id", "contents"]].to_dict(
        "records"
    )
    section = typed.section_values("build_benchmark")
    assert read_provenance(layout.corpus_table) == {
        "stage": "build_benchmark",
        "dataset": "toy",
        "params": section,
    }
    assert f"build_benchmark@toy (corpus filter none):\n{again.table1()}" in printed

    # rule_retrieval_eval: its rows, the API's calls counted, the table printed
    metrics = json.loads((layout.rule_retrieval / "metrics.json").read_text())
    assert [r["row"] for r in metrics["rows"]] == [
        "RuleRAG head relation (oracle)", "vanilla retrieval", "+ SIAR (w/ SI)"
    ]  # fmt: skip
    assert metrics["llm"] == "api:fake" and metrics["queries"] == 6
    results = (layout.rule_retrieval / "results.md").read_text(encoding="utf-8")
    assert f"rule_retrieval_eval@toy:\n{results}" in printed
    assert "rule_retrieval_eval@toy: BM25 analysis english (auto: 0.0% CJK" in printed
    for name in ("results.csv", "claims.csv", "recall.png", "selections.parquet"):
        assert (layout.rule_retrieval / name).is_file()

    # apply_rules: the corpus splits' history, the report printed as written
    applied = json.loads((layout.rule_application / "metrics.json").read_text())
    assert (applied["dataset"], applied["temporal"], applied["test_facts"]) == ("toy", True, 40)
    assert len(read_jsonl(layout.rule_answers)) == len(again.benchmark.test)
    assert (layout.rule_application / "results.md").read_text(encoding="utf-8") in printed

    # MLflow: each stage's params as params.yaml writes them, apply_rules' instance tag
    (bench_run,) = stage_runs(mlflow_store, "build_benchmark")
    assert bench_run.data.params["rule_retrieval.llm.kind"] == "api"
    assert bench_run.data.params["corpus_filter"] == "none"
    assert bench_run.data.metrics["selection_cost_llm_calls"] == asked_by_benchmark
    (eval_run,) = stage_runs(mlflow_store, "rule_retrieval_eval")
    assert eval_run.data.metrics["bm25_natural_siar_si.recall_at_2"] == metrics["rows"][2]["R@2"]
    assert eval_run.data.params["rule_retrieval.analyzer"] == "auto"  # asked; and what ran:
    assert eval_run.data.params["rule_retrieval.analyzer_used"] == "english"
    (apply_run,) = stage_runs(mlflow_store, "apply_rules")
    assert apply_run.data.tags[TAG_STAGE_INSTANCE] == "apply_rules@toy"
    assert apply_run.data.metrics["test_facts"] == 40
