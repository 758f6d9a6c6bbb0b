"""Stages reading and writing their files when something is wrong with them (issue 28, part 4):
a rule bank with fewer rows than its manifest records, a cut-short Parquet input, a full disk
and a read-only data folder each end in one line naming the file, exit 2 and a FAILED MLflow
run, never a traceback or a benchmark built from a smaller bank. (The io functions: tests/
unit/test_io.py.)"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from rulerag.io import write_manifest, write_parquet
from rulerag.tracking import TAG_ERROR
from tests.helpers import StageProject, one_line_failure, refuse_writes_under, stage_runs
from tests.support.synthetic_kg import write_synthetic_dataset

pytestmark = pytest.mark.slow  # an MLflow SQLite store is created per test

CUSTOM = "a\tr\tb\nb\tr\tc\nc\tr\ta\na\ts\tc\n"


def _custom_kg(tmp_path: Path) -> dict[str, object]:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.tsv").write_text(CUSTOM)
    return {"ingest.custom": {"mykg": {"path": str(source)}}}


def test_build_benchmark_refuses_a_bank_with_fewer_rows_than_recorded(
    mlflow_store: str, stage_project: StageProject, capsys: pytest.CaptureFixture[str]
) -> None:
    """A valid bank.parquet with fewer rules than mine_rules wrote was read silently: the
    benchmark was built from it, exit 0."""
    import pipeline_steps.build_benchmark as stage

    layout = stage_project.layout("toy")
    _, bank = write_synthetic_dataset(layout, temporal=True)
    write_manifest(layout.kg)  # as ingest and mine_rules leave their folders
    write_manifest(layout.rules_dir)
    write_parquet(layout.rule_bank, bank.head(1), {"stage": "mine_rules"})
    assert stage_project.run(stage, "--dataset", "toy") == 2
    one_line_failure(capsys.readouterr().err, "build_benchmark", str(layout.rule_bank), "rerun")
    assert not layout.benchmark.exists()
    (run,) = stage_runs(mlflow_store, "build_benchmark")
    assert run.info.status == "FAILED" and "bank.parquet" in run.data.tags[TAG_ERROR]


def test_a_cut_short_parquet_input_is_one_line(
    tmp_path: Path,
    mlflow_store: str,
    stage_project: StageProject,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """mine_rules on a facts.parquet cut short ended in Arrow's `ArrowInvalid` traceback."""
    import pipeline_steps.ingest as ingest
    import pipeline_steps.mine_rules as mine_rules

    params = _custom_kg(tmp_path)
    assert stage_project.run(ingest, "--dataset", "mykg", params=params) == 0
    facts = stage_project.layout("mykg").facts
    facts.write_bytes(facts.read_bytes()[:300])
    assert stage_project.run(mine_rules, "--dataset", "mykg", params=params) == 2
    one_line_failure(capsys.readouterr().err, "mine_rules", str(facts), "300 bytes", "rerun")
    (run,) = stage_runs(mlflow_store, "mine_rules")
    assert run.info.status == "FAILED"


def test_a_full_disk_is_one_line_naming_the_file(
    tmp_path: Path,
    mlflow_store: str,
    stage_project: StageProject,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ENOSPC while ingest wrote facts.parquet ended in an `OSError` traceback."""
    import pyarrow.parquet as pq

    import pipeline_steps.ingest as ingest

    def full(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, "Error writing bytes to file. No space left on device")

    monkeypatch.setattr(pq, "write_table", full)
    assert stage_project.run(ingest, "--dataset", "mykg", params=_custom_kg(tmp_path)) == 2
    facts = stage_project.layout("mykg").facts
    one_line_failure(capsys.readouterr().err, "ingest", f"{facts}: cannot write it", "No space")
    assert sorted(p.name for p in facts.parent.iterdir()) == []
    (run,) = stage_runs(mlflow_store, "ingest")
    assert run.info.status == "FAILED" and "No space left" in run.data.tags[TAG_ERROR]


def test_a_read_only_data_folder_is_one_line_naming_it(
    tmp_path: Path,
    mlflow_store: str,
    stage_project: StageProject,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A data folder the stage may not write into ended in an `OSError` traceback."""
    import pipeline_steps.ingest as ingest

    layout = stage_project.layout("mykg")
    layout.root.mkdir(parents=True)
    refuse_writes_under(layout.root, monkeypatch)
    assert stage_project.run(ingest, "--dataset", "mykg", params=_custom_kg(tmp_path)) == 2
    line = one_line_failure(capsys.readouterr().err, "ingest", f"{layout.kg}: cannot write it")
    assert "must be writable" in line
    (run,) = stage_runs(mlflow_store, "ingest")
    assert run.info.status == "FAILED"
