"""Check a whole params.yaml against the schema (`rulerag.params_schema`) before anything runs.

`make run` calls `python -m rulerag.orchestration.params_check` before `dvc repro`, and the
Airflow DAG checks the params.yaml a run conf would produce the same way
(`run_conf.validate_run_conf`), so a bad value fails in seconds, naming its key, instead of
after the stages before it have run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rulerag.params_schema import SECTIONS, check_dataset_name, require_sections, section_loader
from rulerag.settings import SettingsError

__all__ = ["check_params", "main"]


def check_params(params: Mapping[str, Any], where: str = "params.yaml") -> None:
    """The whole file against the schema; SettingsError naming the first problem's key."""
    from rulerag.kg.registry import known_datasets

    require_sections(params, where)
    for section in SECTIONS:
        section_loader(section)(params[section])
    datasets = params["datasets"]
    if not isinstance(datasets, list) or not datasets:
        raise SettingsError(f"{where}: datasets must be a non-empty list of names")
    for name in params["ingest"].get("custom") or {}:
        check_dataset_name(name)
    known = known_datasets(params)
    for name in datasets:
        check_dataset_name(name)
        if name not in known:
            raise SettingsError(
                f"{where}: datasets: unknown dataset {name!r} (known: {', '.join(known)})"
            )


def main(argv: list[str] | None = None) -> int:
    """Check a params.yaml file (default: the project's); exit 2 with the problem."""
    import yaml

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default="params.yaml", type=Path)
    path = parser.parse_args(argv).path
    try:
        with open(path, encoding="utf-8") as handle:
            params = yaml.safe_load(handle) or {}
        check_params(params, str(path))
    except (SettingsError, yaml.YAMLError, OSError) as err:
        print(f"{path}: invalid: {err}", file=sys.stderr)
        return 2
    print(f"{path}: valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
