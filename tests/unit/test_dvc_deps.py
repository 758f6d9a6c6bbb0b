"""dvc.yaml's code deps follow what each stage script really imports.

A module a stage imports but does not list lets its outputs go stale after an edit; a listed
module it never imports reruns it (perhaps hours of training) for nothing. Everything here is
derived from the code (`tests.support.code_deps`), so a new import, a moved module or
a new stage is checked with no edit to this file. The closure itself is first tested on a tiny
package with the cases the project relies on (lazy imports, `from pkg import sub`, cycles).
"""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path

import pytest

from rulerag.orchestration.dvc_graph import StageInstance, build_graph, load_yaml
from tests.support.code_deps import (
    CodeClosure,
    foreign_stage_imports,
    import_closure,
    missing_code_deps,
    project_packages,
    stage_closure,
    stage_modules,
    unused_code_deps,
)
from tests.support.sync_code_deps import example_params

PROJECT = Path(__file__).resolve().parents[2]
PACKAGES = project_packages(PROJECT)


@functools.cache
def project_stages() -> dict[str, StageInstance]:
    """One instance per stage of the real dvc.yaml: code deps do not vary by item. Opt-in
    matrix axes that are empty by default (`r2ag.rows`, `generation.robustness_rows`,
    `qa.datasets`, `generalisation.datasets`, `export.datasets`) are filled so their stages
    are seen."""
    params = example_params(PROJECT)
    stages: dict[str, StageInstance] = {}
    for instance in build_graph(PROJECT / "dvc.yaml", params):
        stages.setdefault(instance.stage, instance)
    return stages


@functools.cache
def closure_of(stage: str) -> CodeClosure:
    return stage_closure(project_stages()[stage].cmd, PROJECT, PACKAGES)


STAGES = sorted(project_stages())


def test_every_stage_of_dvc_yaml_is_checked() -> None:
    """An empty foreach/matrix axis would hide a stage from the checks below."""
    declared = set(load_yaml(PROJECT / "dvc.yaml")["stages"])
    assert declared == set(STAGES)
    assert {"rulerag", "pipeline_steps"} <= PACKAGES


@pytest.mark.parametrize("stage", STAGES)
def test_every_imported_module_is_a_dep(stage: str) -> None:
    missing = missing_code_deps(closure_of(stage), project_stages()[stage].deps)
    assert not missing, f"stage {stage}: dvc.yaml deps miss\n  " + "\n  ".join(missing)


@pytest.mark.parametrize("stage", STAGES)
def test_no_code_dep_the_stage_does_not_import(stage: str) -> None:
    unused = unused_code_deps(closure_of(stage), project_stages()[stage].deps, PROJECT, PACKAGES)
    assert not unused, f"stage {stage}: dvc.yaml lists code it never runs\n  " + "\n  ".join(unused)


@pytest.mark.parametrize("stage", STAGES)
def test_no_stage_script_imports_another(stage: str) -> None:
    scripts = {m for s in project_stages().values() for m in stage_modules(s.cmd)}
    own = stage_modules(project_stages()[stage].cmd)
    found = foreign_stage_imports(closure_of(stage), own, scripts)
    assert not found, f"stage {stage}: " + "; ".join(found)


# ---------------------------------------------------------------------------------------------
# The closure and the checks on a synthetic project
# ---------------------------------------------------------------------------------------------


def make_project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return make_project(
        tmp_path,
        {
            "steps/__init__.py": "",
            "steps/common.py": "import json\n",
            "steps/one.py": """
                from steps.common import json
                from pkg import sub
                from pkg.attrs import VALUE

                def main():
                    import pkg.lazy.inner
                    return sub, VALUE
            """,
            "steps/two.py": "import steps.one\n",
            "pkg/__init__.py": "",
            "pkg/sub.py": "from . import cycle_a\n",
            "pkg/attrs.py": "VALUE = 1\n",
            "pkg/cycle_a.py": "from pkg import cycle_b\n",
            "pkg/cycle_b.py": "import pkg.cycle_a\n",
            "pkg/lazy/__init__.py": "",
            "pkg/lazy/inner.py": """
                from pathlib import Path
                from typing import TYPE_CHECKING

                if TYPE_CHECKING:
                    from pkg import typing_only
                CONFIG = Path(__file__).resolve().parent / "configs" / "settings.json"
            """,
            "pkg/lazy/configs/settings.json": "{}\n",
            "pkg/typing_only.py": "",
            "pkg/unused.py": "",
        },
    )


def test_closure_follows_lazy_imports_submodules_and_cycles(tiny: Path) -> None:
    closure = import_closure("steps.one", tiny)
    assert set(closure.modules) == {
        "steps/__init__.py",  # `python -m steps.one` imports its package first
        "steps/one.py",
        "steps/common.py",
        "pkg/__init__.py",
        "pkg/sub.py",  # from pkg import sub: a module, not an attribute
        "pkg/attrs.py",
        "pkg/cycle_a.py",  # relative import
        "pkg/cycle_b.py",  # cycle back to cycle_a ends the walk
        "pkg/lazy/__init__.py",  # parent of a lazily imported module
        "pkg/lazy/inner.py",  # imported inside a function
    }  # not typing_only (TYPE_CHECKING), unused, nor the stdlib
    assert closure.files == {
        "pkg/lazy/configs/settings.json": ("steps.one", "pkg.lazy.inner"),
    }
    assert closure.chain("pkg/cycle_b.py") == ("steps.one", "pkg.sub", "pkg.cycle_a", "pkg.cycle_b")


def test_closure_of_an_unknown_module_fails(tiny: Path) -> None:
    with pytest.raises(FileNotFoundError, match="steps.nope"):
        import_closure("steps.nope", tiny)
    with pytest.raises(ValueError, match="runs no project module"):
        stage_closure("echo hello", tiny, project_packages(tiny))


def test_stage_modules_reads_commands() -> None:
    assert stage_modules("python -m steps.one --dataset x") == ["steps.one"]
    assert stage_modules(["python3 -u steps/two.py", ".venv/bin/python -m a.b && ls"]) == [
        "steps.two",
        "a.b",
    ]


def test_checks_report_missing_unused_and_foreign_deps(tiny: Path) -> None:
    packages = project_packages(tiny)
    assert packages == {"steps", "pkg"}
    closure = stage_closure("python -m steps.two", tiny, packages)
    deps = [
        "steps/__init__.py",
        "steps/two.py",
        "steps/common.py",
        "pkg",  # covers the package and its data file
        "data/x/input.parquet",  # not code: ignored
    ]
    missing = missing_code_deps(closure, deps)
    assert missing == ["steps/one.py is not a dep (imported through steps.two -> steps.one)"]
    assert missing_code_deps(closure, [*deps, "steps/one.py"]) == []

    narrow = ["steps", "pkg/sub.py", "pkg/lazy/configs"]
    assert missing_code_deps(closure, narrow)[0].startswith("pkg/__init__.py is not a dep")
    assert "pkg/lazy/configs/settings.json" not in " ".join(missing_code_deps(closure, narrow))
    (tiny / "pkg" / "empty").mkdir()
    unused = unused_code_deps(
        closure,
        [*deps, "pkg/unused.py", "pkg/empty", "pkg/gone.py", "data/x/input.parquet"],
        tiny,
        packages,
    )
    assert unused == [
        "pkg/unused.py is not imported by the stage",
        "pkg/empty/ holds nothing the stage imports",
        "pkg/gone.py does not exist",
    ]
    assert foreign_stage_imports(closure, ["steps.two"], ["steps.one", "steps.two"]) == [
        "imports stage script steps.one (through steps.two -> steps.one)"
    ]
    assert foreign_stage_imports(closure, ["steps.two"], ["steps.two"]) == []


def test_sync_gives_deps_the_checks_accept(tiny: Path) -> None:
    """`sync_code_deps.synced` drops what the stage does not import, keeps a folder that still
    covers something and data deps where they were, and adds each file no dep covers."""
    from tests.support.sync_code_deps import synced

    packages = project_packages(tiny)
    closure = stage_closure("python -m steps.two", tiny, packages)
    (tiny / "pkg" / "empty").mkdir()
    stale = ["steps/two.py", "pkg", "pkg/unused.py", "pkg/empty", "data/x/input.parquet"]
    fixed = synced(stale, closure, tiny, set(packages))
    assert fixed == [
        "steps/two.py",
        "pkg",
        "steps/__init__.py",
        "steps/common.py",
        "steps/one.py",
        "data/x/input.parquet",
    ]
    assert missing_code_deps(closure, fixed) == []
    assert unused_code_deps(closure, fixed, tiny, packages) == []
