"""The library's floors hold: import-linter's contracts in pyproject.toml are kept, every part of
`rulerag` sits on a floor, and the check fails when an import runs back up one."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def contracts() -> list[dict]:
    config = tomllib.loads((PROJECT / "pyproject.toml").read_text(encoding="utf-8"))
    return config["tool"]["importlinter"]["contracts"]


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.is_file():
        pytest.skip(f"no lint-imports beside {sys.executable} (make setup installs it)")
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        env={"PATH": str(LINT_IMPORTS.parent), "PYTHONPATH": str(root)},
        timeout=300,
    )


def test_every_part_of_the_library_is_on_a_floor() -> None:
    """A new package or top-level module must be given its floor (else nothing checks it)."""
    (layers,) = [c["layers"] for c in contracts() if c["type"] == "layers"]
    named = {part.strip() for layer in layers for part in layer.split("|")}
    parts = {
        f"rulerag.{path.stem if path.is_file() else path.name}"
        for path in (PROJECT / "rulerag").iterdir()
        if (path.suffix == ".py" and path.stem != "__init__")
        or (path.is_dir() and (path / "__init__.py").is_file())
    }
    assert parts - named == set(), "give these a floor in pyproject.toml"
    assert named - parts == set(), "these floors name nothing that exists"


def test_the_contracts_are_kept() -> None:
    result = lint_imports(PROJECT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "broken" not in result.stdout.split("Contracts:")[-1].replace("0 broken", "")


def test_an_import_back_up_a_floor_breaks_the_contract(tmp_path: Path) -> None:
    """Mutation check: rules importing the retrievers (a floor above) must fail the lint."""
    for name in ("rulerag", "pipeline_steps"):
        shutil.copytree(PROJECT / name, tmp_path / name, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy2(PROJECT / "pyproject.toml", tmp_path / "pyproject.toml")
    rule = tmp_path / "rulerag" / "rules" / "rule.py"  # outside data/<dataset>/: the package
    rule.write_text(rule.read_text() + "\nimport rulerag.retrieval.dense  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "rulerag.rules.rule -> rulerag.retrieval.dense" in result.stdout
