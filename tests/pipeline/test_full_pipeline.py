"""Every stage of dvc.yaml for real, through `dvc repro`, on a small slice of ICEWS14.

The slice is a user KG (`ingest.custom`: the first lines of TLogic's ICEWS14 files) and the
parameters are shrunk (a few test queries, a few training steps), so the whole graph (ingest
→ rules → benchmark → BM25 / MiniLM indexes → RGFT / SSFT retrievers → retrieval runs → LoRA
generators → the Table 2 grid → reports) runs in minutes on a CPU. What is checked: every stage
produced its outputs, the figures are in range, `dvc status` is clean afterwards, and every
stage logged one MLflow run under the shared pipeline tag.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from rulerag.layout import DataLayout

pytestmark = [pytest.mark.slow, pytest.mark.data]

BIN = Path(sys.executable).parent
SLICE = {"train.txt": 4000, "valid.txt": 900, "test.txt": 600}

SMALL = {
    "mine_rules": {"temporal": {"walks_per_relation": 50, "lengths": [1]}},
    "build_benchmark": {"test_size": 24},
    "index": {"sparse": {"parity_queries": 20}},
    "train_retriever": {"max_steps": 4, "eval_every": 2, "checkpoint_every": 2},
    "retrieve": {"f_g_queries": 24},
    "generation": {
        "test_queries": 8,
        "batch_size": 8,
        "train": {"samples": 8, "dev_samples": 4, "eval_steps": 2, "logging_steps": 1},
    },
    "rule_retrieval": {"queries": 4, "llm": {"max_new_tokens": 16, "rank_max_new_tokens": 24}},
    # Figure 5 (off by default): two banks, a few steps and samples each
    "generalisation": {
        "datasets": ["slice"],
        "banks": 2,
        "retriever_steps": 2,
        "generator_samples": 4,
        "dev_samples": 2,
        "test_queries": 4,
    },
    "r2ag": {
        "rows": ["r2ag", "rulerag_r2ag"],  # off by default (make run's budget); on here
        "train": {"samples": 8, "dev_samples": 4, "eval_steps": 2, "logging_steps": 1},
    },
}


def merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) else value
    return out


@pytest.fixture
def sliced_kg(kg_mirror: Path, tmp_path: Path) -> Path:
    source = kg_mirror / "icews14" / "TLogic_icews14"
    target = tmp_path / "icews_slice"
    target.mkdir()
    for name, lines in SLICE.items():
        with open(source / name, encoding="utf-8") as handle:
            head = [next(handle) for _ in range(lines)]
        (target / name.replace(".txt", ".tsv")).write_text("".join(head), encoding="utf-8")
    return target


def test_dvc_repro_runs_every_stage(project_copy: Path, sliced_kg: Path) -> None:
    params_file = project_copy / "params.yaml"
    params = merge(yaml.safe_load(params_file.read_text()), SMALL)
    params["datasets"] = ["slice"]
    params["ingest"]["custom"] = {"slice": {"path": str(sliced_kg), "time_format": "%Y-%m-%d"}}
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "RULERAG_PIPELINE_RUN": "test-full-pipeline",
        "MLFLOW_TRACKING_URI": f"sqlite:///{project_copy / 'mlflow.db'}",
        "RULERAG_MODEL_CACHE": str(Path(__file__).resolve().parents[2] / ".models"),
        "DVC_NO_ANALYTICS": "1",
    }

    def dvc(*args: str, **kwargs) -> subprocess.CompletedProcess[str]:
        """`dvc <args>` in the project copy, output captured as text (`env`: the default
        environment unless given)."""
        kwargs.setdefault("env", env)
        return subprocess.run(
            [str(BIN / "dvc"), *args],
            cwd=project_copy,
            capture_output=True,
            text=True,
            **kwargs,
        )

    done = dvc("repro", timeout=1500)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]

    layout = DataLayout.of(project_copy / "data", "slice")
    stages = [
        line.split()[0] for line in dvc("stage", "list", "--name-only", check=True).stdout.split()
    ]
    # ingest, mine_rules, build_benchmark, apply_rules 4; index 2; train_retriever 2;
    # retrieve 4 + 2; retrieval_report 1; train_generator 2; generate 14; train_r2ag 2;
    # generate_r2ag 2; rule_retrieval_eval 1; report 1; generalisation 1; package_model 1
    assert len(stages) == 39, stages

    for config in (
        "bm25-standard",
        "bm25-rg",
        "minilm-standard",
        "minilm-rg",
        "minilm-ssft",
        "minilm-rgft",
    ):
        metrics = json.loads(layout.retrieval_metrics(config).read_text())
        assert 0.0 <= metrics["recall_at_1"] <= metrics["recall_at_10"] <= 1.0, config
        assert metrics["queries"] == 24
        run = pd.read_parquet(layout.run(config))
        assert set(run.columns) == {"qid", "rule", "rank", "doc_id", "score"}
        fg = pd.read_parquet(layout.run(config, "f_g"))
        assert fg["qid"].nunique() <= 24
        if config.endswith("-rg") or config.endswith("-rgft"):
            assert metrics["loose_recall_at_10"] >= metrics["recall_at_10"]
    assert (layout.model("minilm-rgft") / "model.safetensors").is_file()
    assert "minilm-rgft" in (layout.retrieval_report / "results.md").read_text()

    for variant in ("rgft", "ssft"):
        assert (layout.adapter(variant) / "adapter_config.json").is_file()
    table = pd.read_csv(layout.report / "results.csv")
    assert len(table) == 16 and table["EM"].between(0, 100).all()  # 14 grid rows + 2 R²AG
    assert list(table["config"][-2:]) == ["r2ag", "rulerag_r2ag"]
    for variant, rules in (("r2ag", False), ("rulerag_r2ag", True)):
        trained = json.loads(layout.train_stats(variant, "train_r2ag").read_text())
        assert trained["train_samples"] == 8 and trained["feature_encoder"] == (
            "minilm-rg" if rules else "minilm-standard"
        )
        assert (layout.r2ag_model(variant) / "former.safetensors").is_file()
        twin = "rulerag_icl" if rules else "standard_rag"
        ours = [json.loads(x) for x in (layout.row(variant) / "predictions.jsonl")
                .read_text().splitlines()]  # fmt: skip
        theirs = [json.loads(x) for x in (layout.row(twin) / "predictions.jsonl")
                  .read_text().splitlines()]  # fmt: skip
        assert [r["qid"] for r in ours] == [r["qid"] for r in theirs]
        for a, b in zip(ours, theirs, strict=True):
            assert a["doc_ids"] == b["doc_ids"]  # the same documents, only R²AG differs
            assert a["prompt"].count("similarity: <R> ") == min(5, len(a["doc_ids"]))
            assert ("# Rules:" in a["prompt"]) == rules
    for line in (layout.row("rulerag_ft") / "predictions.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert {"prompt", "prediction", "answers", "em", "token_f1"} <= set(record)
        assert record["prompt"].startswith("# Instruct: For the query in the form of")
    assert (layout.report / "results.png").stat().st_size > 0
    claims = pd.read_csv(layout.report / "claims.csv")
    assert len(claims) == 17 and claims["p"].between(0, 1).all()  # every claim both rows ran
    assert {"r2ag", "rulerag_r2ag"} <= set(claims["better"])
    assert "paired on the same queries" in (layout.report / "results.md").read_text()

    applied = json.loads((layout.rule_application / "metrics.json").read_text())
    assert applied["temporal"] and 0 < applied["mrr"] <= 1 and applied["queries"] > 0
    assert applied["hits_at_1"] <= applied["hits_at_3"] <= applied["hits_at_10"]
    answers = [json.loads(x) for x in layout.rule_answers.read_text().splitlines()]
    assert len(answers) == 24 and any(a["candidates"] for a in answers)
    for answer in answers:
        for candidate in answer["candidates"]:
            assert " leads to " in candidate["rule"] and candidate["evidence"]
    assert "| TLogic" not in (layout.rule_application / "results.md").read_text()  # no paper row

    gains = pd.read_csv(layout.generalisation / "gains.csv", index_col=0)
    assert list(gains.index) == ["R1", "R2"] and list(gains.columns) == ["R1", "R2"]
    cells = pd.read_csv(layout.generalisation / "cells.csv")
    assert len(cells) == 4 and cells["em"].between(0, 100).all()
    assert ((cells["gain"] - (cells["em"] - cells["standard_rag_em"])).abs() <= 0.11).all()
    assert "Gain over Standard RAG" in (layout.generalisation / "results.md").read_text()
    assert not (layout.generalisation / "work").exists()  # the per-bank models are removed

    rule_retrieval = pd.read_csv(layout.rule_retrieval / "results.csv")
    methods = set(zip(rule_retrieval["retriever"], rule_retrieval["method"], strict=True))
    assert {("-", "head"), ("bm25", "siar_r3"), ("minilm", "vanilla")} <= methods
    assert rule_retrieval["R@10"].between(0, 100).all()
    assert "SIAR-R³ (w/ SI + input)" in (layout.rule_retrieval / "results.md").read_text()
    claims = pd.read_csv(layout.rule_retrieval / "claims.csv")
    assert len(claims) == 12 and claims["p"].between(0, 1).all()  # 6 claims x 2 retrievers

    status = dvc("status", "--json", check=True)
    assert json.loads(status.stdout) == {}, status.stdout
    _served_model_answers_as_the_grid_row(project_copy, layout, env)

    # A DVC experiment on one grid row's knob reruns that row (and what reads every row: the
    # report, the generalisation split), not the other rows, retrievers or adapters.
    knob = "generation.grid.rulerag_ft.prompt=plain"
    exp = dvc("exp", "run", "--name", "plain-ft", "-S", knob, timeout=900)
    assert exp.returncode == 0, exp.stdout[-4000:] + exp.stderr[-4000:]
    assert "Running stage 'generate@slice-rulerag_ft'" in exp.stdout
    assert "Running stage 'report@slice'" in exp.stdout
    for skipped in (
        "generate@slice-rulerag_icl",
        "generate@slice-standard_rag",
        "generate_r2ag@slice-r2ag",
        "train_generator@slice-rgft",
        "train_retriever@slice-minilm-rgft",
        "train_r2ag@slice-r2ag",
    ):
        assert f"Running stage '{skipped}'" not in exp.stdout
    listed = dvc("exp", "show", "--json", check=True)
    assert '"plain-ft"' in listed.stdout

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name("rulerag/slice")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    assert {r.data.tags["rulerag.pipeline_run"] for r in runs} == {"test-full-pipeline"}
    # one parent run for the pipeline run: every stage run under it, the report's grid on it
    (parent,) = [r for r in runs if r.data.tags.get("rulerag.run_kind") == "pipeline"]
    runs = [r for r in runs if r is not parent]
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {parent.info.run_id}
    reports = [r for r in runs if r.data.tags["rulerag.stage"] == "report"]  # repro, exp run
    report = max(reports, key=lambda r: r.info.start_time)
    assert {key: parent.data.metrics.get(key) for key in report.data.metrics} == (
        report.data.metrics
    )
    assert parent.data.params["datasets"] == '["slice"]' and parent.info.status == "FINISHED"
    logged = {r.data.tags["rulerag.stage"] for r in runs}
    assert logged == {s.split("@")[0] for s in stages}, logged
    # the trained models are in the Model Registry, each version linked to its training run
    registered = {m.name for m in client.search_registered_models()}
    assert {"rulerag-slice-generator-rgft", "rulerag-slice-retriever-minilm-rgft"} <= registered
    by_id = {r.info.run_id: r for r in runs}
    (version,) = client.search_model_versions("name='rulerag-slice-generator-rgft'")
    trained = by_id[version.run_id]
    assert trained.data.tags["rulerag.stage_instance"] == "train_generator@slice-rgft"
    assert float(version.tags["metric.steps"]) == trained.data.metrics["steps"]

    _rule_retrieval_selection_runs_the_benchmark(project_copy, env, dvc)


def _served_model_answers_as_the_grid_row(project: Path, layout: DataLayout, env: dict) -> None:
    """package_model registered rulerag-slice with `champion` on it. Loaded as `make serve`
    loads it, it answers the grid's rulerag_ft queries (asked by id, in the grid's order, in one
    call) with the row's own generations and documents, and a question in words links to its
    test query. `mlflow models serve` of `models:/rulerag-slice@champion` (through the tracking
    server `make mlflow-ui` starts) answers the same JSON, and a bad input with a 400."""
    from rulerag.serving.loading import load_served
    from tests.helpers import free_port, mlflow_ui

    packaged = json.loads((layout.packaged / "metrics.json").read_text())
    assert packaged["row"] == "rulerag_ft" and packaged["model_bytes"] > 0
    rows = [json.loads(x) for x in (layout.row("rulerag_ft") / "predictions.jsonl")
            .read_text().splitlines()]  # fmt: skip
    model = load_served("models:/rulerag-slice@champion", project)
    answers = model.predict([{"qid": r["qid"]} for r in rows])
    assert [a["generation"] for a in answers] == [r["generation"] for r in rows]
    for answer, row in zip(answers, rows, strict=True):
        assert [d["id"] for d in answer["documents"]["with_rules"]] == row["doc_ids"][:10]
        assert [r["rule_id"] for r in answer["rules"]] == row["rule_ids"]
        assert answer["gold"] == row["answers"] and answer["qid"] == row["qid"]
    (worded,) = model.predict([{"question": rows[0]["query"]}])
    assert worded["qid"] == rows[0]["qid"] and worded["link"]["subject"]["method"] == "exact"

    port = free_port()
    log = project.parent / "mlflow-serve.log"  # a file, not a pipe: its progress bars fill one
    with mlflow_ui(project) as url, open(log, "w", encoding="utf-8") as output:
        served = subprocess.Popen(
            [str(BIN / "mlflow"), "models", "serve", "-m", "models:/rulerag-slice@champion",
             "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port), "-w", "1"],
            env={**env, "MLFLOW_TRACKING_URI": url},
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_for(f"{base}/ping", served, 300, log)
            body = {"dataframe_records": [{"qid": r["qid"]} for r in rows[:2]]}
            status, reply = _post(f"{base}/invocations", body)
            assert status == 200, reply
            assert reply["predictions"] == json.loads(json.dumps(answers[:2]))
            status, reply = _post(f"{base}/invocations", {"dataframe_records": [{"qid": "x"}]})
            assert status == 400 and "no RuleQA test query" in reply["message"], reply
        finally:
            from rulerag.orchestration.processes import stop_group

            stop_group(served, grace=30)


def _wait_for(url: str, server: subprocess.Popen, seconds: float, log: Path) -> None:
    import time
    import urllib.request

    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"{url} did not answer:\n{log.read_text(errors='replace')[-4000:]}")
            time.sleep(1)


def _post(url: str, body: dict) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _rule_retrieval_selection_runs_the_benchmark(project_copy: Path, env: dict, dvc) -> None:
    """build_benchmark with `siar_r3` against a local fake chat API: every test query's rules
    are the R³ order of the BM25 search for its self-induced rule + query, ground truth rebuilt
    here; a forced rerun sends no prompt (the cache); retrieval then searches with those rules."""
    from rulerag.retrieval.rule_guided import NO_RULE
    from rulerag.rule_retrieval.library import RuleLibrary
    from rulerag.rule_retrieval.methods import search_text
    from rulerag.rule_retrieval.prompts import SI_INSTRUCTION
    from rulerag.rule_retrieval.search import BM25RuleIndex
    from tests.support.fake_openai import FakeOpenAI

    induced = "Make statement leads to Consult"

    def reply(prompt: str) -> str:
        return induced if prompt.startswith(SI_INSTRUCTION) else "[2] > [1] > [2] > [99]"

    layout = DataLayout.of(project_copy / "data", "slice")
    params_file = project_copy / "params.yaml"
    with FakeOpenAI([], reply=reply) as server:
        params = yaml.safe_load(params_file.read_text())
        params["build_benchmark"]["rule_selection"].update(method="siar_r3", candidates=5)
        params["rule_retrieval"]["llm"].update(kind="api", model="fake-model")
        params["generation"]["api"]["base_url"] = server.url
        params_file.write_text(yaml.safe_dump(params, sort_keys=False))
        api_env = {**env, "RULERAG_API_KEY": "sk-local-test"}
        done = dvc("repro", "-s", "build_benchmark@slice", env=api_env, timeout=600)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        sent = len(server.requests)
        again = dvc("repro", "-s", "-f", "build_benchmark@slice", env=api_env, timeout=600)
        assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
        assert len(server.requests) == sent  # every answer came from the cache

    stats = json.loads((layout.benchmark / "stats.json").read_text())
    assert stats["selection"] == "siar_r3" and stats["selection_cost"]["llm_calls"] == 0
    test = [json.loads(line) for line in layout.queries("test").open()]
    f_g = [json.loads(line) for line in layout.queries("f_g").open()]
    asked = {q["query"] for q in test + f_g}
    si_prompts = {r["body"]["messages"][-1]["content"] for r in server.requests}
    assert sum(p.startswith(SI_INSTRUCTION) for p in si_prompts) >= len(asked)
    bank = pd.read_parquet(layout.rule_bank)
    relations = pd.read_parquet(layout.relations)
    names = dict(zip(relations["id"], relations["name"], strict=True))
    library = RuleLibrary.from_bank(bank, names)
    index = BM25RuleIndex(library.natural)
    for query in test:
        (found,) = index.search([search_text(query["query"], induced, "si_input")], 5)
        order = [1, 0, *range(2, len(found))] if len(found) > 1 else list(range(len(found)))
        assert query["rule_ids"] == [library.ids[found[i]] for i in order][:3], query["qid"]

    done = dvc("repro", "-s", "retrieve@slice-bm25-rg", timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    run = pd.read_parquet(layout.run("bm25-rg"))
    searched = run.groupby("qid")["rule"].agg(set).to_dict()
    for query in test:  # q ∘ r for each selected rule, the query alone when it has none
        assert searched[query["qid"]] == (set(query["rule_ids"]) or {NO_RULE}), query["qid"]
