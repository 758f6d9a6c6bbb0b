"""Shared test fixtures: where the real KG mirror is, a disposable copy of the project, and a
project folder to run stage scripts in-process."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

# the shared assertions (`one_line_failure`, `assert_brute_force_counts`) explain a failure as
# the tests' own do: registered before the first import of the module
pytest.register_assert_rewrite("tests.helpers")

from rulerag.orchestration.project_copy import copy_project, kg_mirror_dir  # noqa: E402
from tests.helpers import StageProject, process_running  # noqa: E402


@pytest.fixture(scope="session")
def kg_mirror() -> Path:
    path = kg_mirror_dir()
    if not (path / "icews14").is_dir():
        pytest.skip(f"no KG mirror at {path} (set RULERAG_DATA_DIR)")
    return path


@pytest.fixture
def stage_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StageProject:
    """Stage scripts run in-process read and write under `tmp_path` instead of the project."""
    import pipeline_steps.common as common

    monkeypatch.setattr(common, "PROJECT_DIR", tmp_path)
    monkeypatch.setattr(common, "DATA_DIR", tmp_path / "data")
    monkeypatch.setattr(common, "MODEL_CACHE", tmp_path / ".models")
    return StageProject(tmp_path)


@pytest.fixture
def http() -> Iterator[requests.Session]:
    """A session that ignores proxy settings from the environment (test servers are local)."""
    with requests.Session() as session:
        session.trust_env = False
        yield session


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    return copy_project(tmp_path / "project")


@pytest.fixture
def clean_tracking_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No tracking settings from the developer's shell (store, pipeline run, fail-fast, an
    Airflow task's identity and UI address) leak into a test of rulerag.tracking."""
    from rulerag import tracking

    for key in ("MLFLOW_TRACKING_URI", tracking.PIPELINE_RUN_ENV, tracking.TRACKING_PROJECT_ENV,
                *tracking.FAIL_FAST_ENV, *tracking.AIRFLOW_ENV):  # fmt: skip
        monkeypatch.delenv(key, raising=False)


@pytest.fixture
def mlflow_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_tracking_env: None) -> str:
    """A throw-away MLflow store, SQLite under tmp_path, that stage runs in the test log to
    (`MLFLOW_TRACKING_URI`, no other tracking settings from the shell); its URI."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


@pytest.fixture
def spawned() -> Iterator[list[int]]:
    """The pids a test started or saw started; what still runs of them is killed after it
    (a stage or command the test meant to see stopped, when the test fails)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if process_running(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One intra-op torch thread for a module of tests on tiny models: their many small
    operations gain nothing from a second thread, and `make test` runs two workers on two
    cores, where spinning OpenMP threads slow each other down several-fold."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


#: the longest test (the whole graph on a slice, ~18 of the run's ~22 minutes on one worker):
#: collected first, so xdist hands it out first and the other worker takes everything else
#: beside it, instead of idling while it runs last
LONGEST_FIRST = ("tests/pipeline/test_full_pipeline.py::test_dvc_repro_runs_every_stage",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move LONGEST_FIRST to the front; the rest keep their order."""
    first = [item for item in items if item.nodeid in LONGEST_FIRST]
    if first:
        items[:] = first + [item for item in items if item.nodeid not in LONGEST_FIRST]
