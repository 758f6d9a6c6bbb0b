"""Tests that run a stage script: `pipeline_steps.<stage>`'s `main` in-process (through the
`stage_project` fixture or `run_stage`) or `python -m pipeline_steps.<stage>` as a subprocess,
on small synthetic inputs under tmp_path. They check the glue between params.yaml, the library
entry, the files written and MLflow, which tests/unit (fast, pure tests of library code) does
not; each gets the marker `stage`, so `-m "not stage"` leaves them out."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test collected from this folder `stage` (the hook sees the whole session's
    items, so it picks this folder's by path)."""
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.stage)
