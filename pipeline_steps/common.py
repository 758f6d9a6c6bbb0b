"""What every stage script shares: the project folder, params.yaml, the way a stage fails,
numeric-metric selection."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from rulerag.errors import InputError
from rulerag.params_schema import check_dataset_name, require_sections
from rulerag.settings import SettingsError

#: the project root (the folder holding dvc.yaml); stages run with it as working directory
PROJECT_DIR = Path(__file__).resolve().parents[1]
#: models converted or downloaded by the stages (ignored by git; RULERAG_MODEL_CACHE overrides
#: it, as for the generator in rulerag/generation/models.py: a DAG task's workspace shares the
#: main workspace's)
MODEL_CACHE = Path(os.environ.get("RULERAG_MODEL_CACHE") or PROJECT_DIR / ".models")


def load_params(path: Path | None = None) -> dict[str, Any]:
    """Read params.yaml (DVC's single source of every knob); every section must be there (a
    stage then loads its own strictly), so a deleted section fails instead of meaning
    "built-in defaults"."""
    path = path or PROJECT_DIR / "params.yaml"
    with open(path, encoding="utf-8") as handle:
        params = yaml.safe_load(handle) or {}
    require_sections(params, str(path))
    return params


def run_stage(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run a stage's `main`; input the user can fix fails with its message and exit status 2.

    An `InputError` (a params.yaml key, a KG file, a cut-short stage output...) names what to
    fix, so it is printed without a traceback. Raised inside `rulerag.tracking.stage_run`, it
    has already marked the stage's MLflow run FAILED with the message. Any other exception is
    a bug and keeps its traceback.
    """
    stage = main.__module__.rpartition(".")[2]
    try:
        return main(argv)
    except InputError as err:
        print(f"{stage} failed: {err}", file=sys.stderr)
        return 2


def _dataset_name(text: str) -> str:
    try:
        return check_dataset_name(text)
    except SettingsError as err:  # argparse shows this message and exits 2
        raise argparse.ArgumentTypeError(str(err)) from None


def dataset_parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the `--dataset` every foreach-over-datasets stage takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--dataset", required=True, type=_dataset_name, help="dataset name (see params.yaml)"
    )
    return parser


def data_dir(dataset: str) -> Path:
    """The folder all of one dataset's stage outputs live under."""
    return PROJECT_DIR / "data" / dataset


def rule_llm_cache(dataset: str) -> Path:
    """The LLM answers of rule retrieval (self-induced rules, R³ rankings) for one dataset,
    shared by build_benchmark's selection and rule_retrieval_eval, so neither pays a prompt the
    other has sent; no stage output (a cache, kept across reruns)."""
    return data_dir(dataset) / "cache" / "rule_llm.sqlite"


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
