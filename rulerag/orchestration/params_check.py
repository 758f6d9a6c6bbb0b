"""Check a whole params.yaml before anything runs: `rulerag.params.parse_params`, the same code
every stage reads its params with (each section strictly, then the rules between sections).

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

from rulerag.params import Params, parse_params, read_params_file
from rulerag.settings import SettingsError

__all__ = ["check_params", "main"]


def check_params(params: Mapping[str, Any], where: str = "params.yaml") -> Params:
    """The whole file against the schema; SettingsError naming the first problem's key."""
    return parse_params(params, where, check_all=True)


def main(argv: list[str] | None = None) -> int:
    """Check a params.yaml file (default: the project's); exit 2 with the problem."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("path", nargs="?", default="params.yaml", type=Path)
    path = parser.parse_args(argv).path
    try:
        check_params(read_params_file(path), str(path))
    except (SettingsError, OSError) as err:
        print(f"{path}: invalid: {err}", file=sys.stderr)
        return 2
    print(f"{path}: valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
