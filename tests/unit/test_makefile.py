"""What the Makefile exports to every stage it runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
SHOW = "show-pipeline-run: ; @echo $$RULERAG_PIPELINE_RUN $$RULERAG_PIPELINE_RUN"


def _pipeline_run() -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "RULERAG_PIPELINE_RUN"}
    done = subprocess.run(
        ["make", "-s", "-C", str(PROJECT), "--eval", SHOW, "show-pipeline-run"],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_pipeline_run_tag_is_unique_per_invocation_and_fixed_within_it() -> None:
    """`make-<UTC time>-<8 hex digits>`, the same wherever one invocation expands it (the
    old `$$$$` reached the stages as a literal `$$`, shared by every run in a second)."""
    first, again = _pipeline_run()
    assert first == again
    assert re.fullmatch(r"make-\d{8}T\d{6}-[0-9a-f]{8}", first), first
    assert _pipeline_run()[0] != first


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_airflow_starts_as_many_workers_as_the_dag_uses() -> None:
    """The DAG runs one task at a time; Airflow's default parallelism (32 LocalExecutor
    workers, 6 GiB) would only hold memory."""
    done = subprocess.run(
        ["make", "-n", "-C", str(PROJECT), "airflow"], capture_output=True, text=True, check=True
    )
    assert "AIRFLOW__CORE__PARALLELISM=1" in done.stdout
    assert "AIRFLOW__API__HOST=127.0.0.1" in done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("args", [[], ["AIRFLOW_HOST=127.0.0.2", "AIRFLOW_PORT=8181"]])
def test_make_airflow_links_to_the_address_it_serves(args: list[str]) -> None:
    """The MLflow runs' links back to Airflow (rulerag/tracking/links.py reads
    AIRFLOW__API__BASE_URL, else its default) name the host and port `make airflow` serves:
    a link to localhost from a browser logged in on 127.0.0.1 landed on the login page."""
    from rulerag.tracking.links import DEFAULT_AIRFLOW_URL, airflow_base_url

    done = subprocess.run(
        ["make", "-n", "-C", str(PROJECT), "airflow", *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    env = dict(re.findall(r"\b(AIRFLOW__API__(?:HOST|PORT|BASE_URL))=(\S+)", done.stdout))
    served = f"http://{env['AIRFLOW__API__HOST']}:{env['AIRFLOW__API__PORT']}"
    assert airflow_base_url({"AIRFLOW__API__BASE_URL": env["AIRFLOW__API__BASE_URL"]}) == served
    if not args:
        assert airflow_base_url({}) == DEFAULT_AIRFLOW_URL == served


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_mlflow_ui_serves_the_project_store_from_where_it_is() -> None:
    """`make mlflow-ui` is `python -m rulerag.tracking ui` on this folder (the server that
    tests/pipeline/test_tracking_store.py checks after a move), and rewrites nothing first."""
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(PROJECT), "mlflow-ui"],
        capture_output=True,
        text=True,
        check=True,
    )
    last = done.stdout.strip().splitlines()[-1]
    assert last.endswith(f"/python -m rulerag.tracking ui --project-dir {PROJECT}"), last
    assert "reroot" not in done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_kfp_compiles_in_the_kfp_venv_with_the_projects_interpreter_first() -> None:
    """The KFP SDK's venv runs the compiler on this checkout's code; the project's venv comes
    first on PATH, since the graph is read by the project's interpreter (docs/operations.md)."""
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(PROJECT), "kfp",
         "KFP_DATASETS=icews14 wiki"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(f"PATH={PROJECT}/.venv/bin:$PATH PYTHONPATH={PROJECT} "), last
    assert " .venv/kfp/bin/python -m rulerag.orchestration.kfp_pipeline compile " in last
    assert last.endswith("--output 'kfp/rulerag-pipeline.yaml' --datasets icews14 wiki"), last


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_a_bare_make_lists_every_target_and_runs_nothing() -> None:
    """`make` and `make help`: every phony target with its one line (a bare `make` used to run
    `setup` without a word)."""
    bare = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(PROJECT)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    listed = {line.split()[0] for line in bare.stdout.splitlines() if line.strip()}
    text = (PROJECT / "Makefile").read_text()
    phony = set()
    for block in re.findall(r"^\.PHONY:((?:.*\\\n)*.*)$", text, flags=re.M):
        phony |= set(block.replace("\\\n", " ").split())
    assert phony and phony <= listed, sorted(phony - listed)
    assert all(len(line.split(None, 1)) == 2 for line in bare.stdout.splitlines() if line.strip())
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(PROJECT)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "pip" not in dry.stdout and "venv" not in dry.stdout
