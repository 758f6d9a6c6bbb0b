"""What every stage script shares: the project folder, params.yaml, numeric-metric selection."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

#: the project root (the folder holding dvc.yaml); stages run with it as working directory
PROJECT_DIR = Path(__file__).resolve().parents[1]
#: models converted or downloaded by the stages (ignored by git; RULERAG_MODEL_CACHE overrides
#: it for the generator, see rulerag/generation/models.py)
MODEL_CACHE = PROJECT_DIR / ".models"


def load_params(path: Path | None = None) -> dict[str, Any]:
    """Read params.yaml (DVC's single source of every knob)."""
    path = path or PROJECT_DIR / "params.yaml"
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def dataset_parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the `--dataset` every foreach-over-datasets stage takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--dataset", required=True, help="dataset name (see params.yaml)")
    return parser


def data_dir(dataset: str) -> Path:
    """The folder all of one dataset's stage outputs live under."""
    return PROJECT_DIR / "data" / dataset


def numeric_metrics(stats: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Flatten the numbers of a stats dict into MLflow metric names (`splits.train` -> ...)."""
    out: dict[str, float] = {}
    for key, value in stats.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(numeric_metrics(value, f"{name}_"))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = float(value)
    return out
