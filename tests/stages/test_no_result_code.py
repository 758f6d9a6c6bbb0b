"""The rule behind dvc.yaml's code deps, on real stages: code that `NO_RESULT_CODE` leaves out
(MLflow tracking, the deadline on its calls) decides no result, so an edit to it must not rerun
anything. `ingest` then `mine_rules` run on a small custom KG under each way tracking can go:
a store that takes everything, no store at all (the run is spooled), a send abandoned at its
deadline (spooled too), and stage scripts logging other metrics, params and tags and no
artifacts. Every file they write under data/ is the same, byte for byte, each time; each way is
checked to have really happened (a spool file, a run with the extra metric), so the test
cannot pass by tracking the same way four times."""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from tests.helpers import StageProject, ingest_chain_kg, stage_runs
from tests.support.code_deps import NO_RESULT_CODE

pytestmark = pytest.mark.slow  # an MLflow SQLite store, four runs of two stages


def data_files(root: Path) -> dict[str, bytes]:
    """Every file under `root`/data, by its path there."""
    data = root / "data"
    return {p.relative_to(data).as_posix(): p.read_bytes() for p in data.rglob("*") if p.is_file()}


def spooled(root: Path) -> list[Path]:
    """The runs kept in the spool (`rulerag.tracking.spool`): one folder with a run.json each."""
    return sorted((root / ".mlflow-spool").glob("*/run.json"))


def closed_port() -> int:
    """A local port nothing listens on (connections to it are refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_left_out_code_is_what_this_test_exercises() -> None:
    """A new entry of NO_RESULT_CODE needs a way to go wrong below, not only a reason."""
    assert set(NO_RESULT_CODE) == {"rulerag/tracking", "rulerag/deadline.py"}


def test_stage_outputs_are_byte_identical_however_tracking_goes(
    tmp_path: Path,
    stage_project: StageProject,
    monkeypatch: pytest.MonkeyPatch,
    clean_tracking_env: None,
) -> None:
    import pipeline_steps.ingest as ingest
    import pipeline_steps.mine_rules as mine_rules
    import rulerag.tracking.run as tracking_run
    from rulerag.tracking import StageRun

    root = stage_project.root
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = ingest_chain_kg(tmp_path, stage_project, links=40)
    shutil.rmtree(root / "data")  # the ingest stage writes the KG itself below

    @contextmanager
    def healthy() -> Iterator[None]:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
        yield

    @contextmanager
    def no_store() -> Iterator[None]:
        before = len(spooled(root))
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{closed_port()}")
        yield
        assert len(spooled(root)) == before + 2, "both runs were spooled"

    @contextmanager
    def abandoned_send() -> Iterator[None]:
        """A store slower than the deadline (rulerag.deadline.within gives up on the send)."""
        before = len(spooled(root))
        monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
        send = tracking_run.send_run

        def slow_send(*args: object, **kwargs: object) -> str:
            time.sleep(1.0)
            return send(*args, **kwargs)

        with monkeypatch.context() as patch:
            patch.setenv(tracking_run.SEND_DEADLINE_ENV, "0.05")
            patch.setattr(tracking_run, "send_run", slow_send)
            yield
        assert len(spooled(root)) == before + 2, "both sends were abandoned and spooled"

    @contextmanager
    def other_logging() -> Iterator[None]:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
        log_metrics, log_params = StageRun.log_metrics, StageRun.log_params

        def more_metrics(self: StageRun, metrics: dict, step: int | None = None) -> None:
            log_metrics(self, {**metrics, "no_result_extra": 7.0}, step)

        def other_params(self: StageRun, params: dict) -> None:
            log_params(self, {**params, "no_result.param": "x"})

        with monkeypatch.context() as patch:
            patch.setattr(StageRun, "log_metrics", more_metrics)
            patch.setattr(StageRun, "log_params", other_params)
            patch.setattr(StageRun, "log_artifact", lambda self, *a, **k: None)
            patch.setattr(StageRun, "log_input", lambda self, *a, **k: None)
            patch.setattr(StageRun, "set_tags", lambda self, tags: None)
            yield
        runs = stage_runs(store, "mine_rules")
        assert any("no_result_extra" in run.data.metrics for run in runs)

    ways: dict[str, Callable[[], AbstractContextManager[None]]] = {
        "a healthy store": healthy,
        "no store (spooled)": no_store,
        "a send abandoned at its deadline (spooled)": abandoned_send,
        "other metrics, params and tags, no artifacts": other_logging,
    }
    written: dict[str, dict[str, bytes]] = {}
    for way, tracking in ways.items():
        with tracking():
            for stage in (ingest, mine_rules):
                assert stage_project.run(stage, "--dataset", "mykg", params=overrides) == 0, way
        written[way] = data_files(root)
        shutil.rmtree(root / "data")

    first, *others = ways
    expected = written[first]
    assert {"mykg/kg/facts.parquet", "mykg/rules/rules.parquet"} <= set(expected)
    for way in others:
        assert set(written[way]) == set(expected), way
        changed = sorted(name for name in expected if written[way][name] != expected[name])
        assert not changed, f"with {way}, {changed} differ from their bytes with {first}"
