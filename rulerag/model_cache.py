"""Where converted and extracted offline models live, decided in one place.

`RULERAG_MODEL_CACHE` when it is set; else `<project>/.models` when this package sits in the
project's checkout (a pyproject.toml naming `rulerag` beside it), so the stages, the tests and
`make run` share one converted SmolLM2; else the user's cache, `$XDG_CACHE_HOME/rulerag/models`
(`~/.cache/rulerag/models`). The last case is a registered MLflow model: its pyfunc carries a
copy of this package among its artifacts, and a folder beside that copy lies inside the
artifact store. Loading a model must never write there (a 517 MB converted base model once
landed in `mlartifacts/.../model/code/.models/`).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

#: the variable that names the folder outright
CACHE_ENV = "RULERAG_MODEL_CACHE"
#: this package's folder (a checkout's `rulerag/`, or the copy inside an MLflow model)
PACKAGE_DIR = Path(__file__).resolve().parent


def _is_project_checkout(root: Path) -> bool:
    try:
        meta = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return (meta.get("project") or {}).get("name") == "rulerag"


def default_model_cache(package_dir: Path = PACKAGE_DIR) -> Path:
    """The model cache folder when the caller names none (see the module's docstring)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    if _is_project_checkout(package_dir.parent):
        return package_dir.parent / ".models"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rulerag" / "models"
