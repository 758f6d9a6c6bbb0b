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
    NO_RESULT_CODE,
    CodeClosure,
    code_deps,
    foreign_stage_imports,
    import_closure,
    left_out_code_deps,
    missing_code_deps,
    project_packages,
    stage_closure,
    stage_modules,
    unused_code_deps,
)
from tests.support.sync_code_deps import Entry, example_params, sync, sync_text

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
    return stage_closure(project_stages()[stage].cmd, PROJECT, PACKAGES, NO_RESULT_CODE)


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
def test_no_code_dep_covers_code_that_decides_no_result(stage: str) -> None:
    """An edit to tracking leaves `dvc status` clean: no dep names it or a folder holding it."""
    found = left_out_code_deps(project_stages()[stage].deps)
    assert not found, f"stage {stage}: " + "; ".join(found)


@pytest.mark.parametrize("stage", STAGES)
def test_only_stage_scripts_reach_code_that_decides_no_result(stage: str) -> None:
    """NO_RESULT_CODE's reasons hold because only the stage scripts call tracking, and write
    nothing it returns (tests/stages/test_no_result_code.py): a library module that imports
    left-out code would have to be looked at again."""
    wrong = [
        f"{path} imported by {chain[-2]} ({' -> '.join(chain)})"
        for path, chain in closure_of(stage).left_out.items()
        if not chain[-2].startswith("pipeline_steps.")
    ]
    assert not wrong, f"stage {stage}: the library imports left-out code: " + "; ".join(wrong)


def test_no_result_code_names_project_code() -> None:
    for path, why in NO_RESULT_CODE.items():
        assert (PROJECT / path).exists(), f"NO_RESULT_CODE names {path}, which does not exist"
        assert why.strip(), f"NO_RESULT_CODE: say why {path} decides no result"
    for stage in STAGES:  # every stage script opens an MLflow run
        assert "rulerag/tracking/__init__.py" in closure_of(stage).left_out, stage


def test_dvcignore_leaves_bytecode_out_of_folder_deps() -> None:
    """Python writes bytecode into a folder dep whenever it imports a module (a test run,
    another stage): DVC must not hash it, and `code_deps` counts a folder's files without it."""
    patterns = (PROJECT / ".dvcignore").read_text(encoding="utf-8").split()
    assert {"__pycache__/", "*.pyc"} <= set(patterns)


def test_dvc_yaml_holds_what_sync_code_deps_writes() -> None:
    """The code deps' form too: sorted, folders where the stage runs most of a package."""
    changes = sync(PROJECT, write=False)
    assert not changes, (
        "dvc.yaml's code deps are stale; run `python -m tests.support.sync_code_deps`:\n  "
        + "\n  ".join(changes)
    )


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


def test_left_out_code_is_not_entered_and_no_dep_covers_it(tiny: Path) -> None:
    """A module of `leave_out` (here a logging helper) is recorded, not followed (what only it
    imports is no dep either), and no code dep may name it or a folder holding it."""
    make_project(
        tiny,
        {
            "steps/common.py": "import json\nfrom pkg.tools import log\n",
            "pkg/tools/__init__.py": "",
            "pkg/tools/log.py": "import pkg.only_for_log\n",
            "pkg/only_for_log.py": "",
        },
    )
    leave = ["pkg/tools/log.py"]
    closure = stage_closure("python -m steps.two", tiny, project_packages(tiny), leave)
    assert closure.left_out == {
        "pkg/tools/log.py": ("steps.two", "steps.one", "steps.common", "pkg.tools.log")
    }
    assert "pkg/only_for_log.py" not in closure.paths()
    assert "pkg/tools/__init__.py" in closure.paths()  # the package around it still runs
    assert code_deps(closure, tiny, leave) == [
        "pkg/__init__.py",
        "pkg/attrs.py",
        "pkg/cycle_a.py",
        "pkg/cycle_b.py",
        "pkg/lazy",  # every file of it runs (package data included): a folder
        "pkg/sub.py",
        "pkg/tools/__init__.py",  # not pkg/tools: it holds the left-out module
        "steps/__init__.py",
        "steps/common.py",
        "steps/one.py",
        "steps/two.py",
    ]  # `pkg` is a top-level package: never a folder dep
    assert left_out_code_deps(["pkg", "pkg/tools", "pkg/tools/log.py", "pkg/sub.py"], leave) == [
        "pkg covers pkg/tools/log.py, which decides no result",
        "pkg/tools covers pkg/tools/log.py, which decides no result",
        "pkg/tools/log.py covers pkg/tools/log.py, which decides no result",
    ]
    assert left_out_code_deps(["pkg/tools/__init__.py", "pkg/sub.py"], ["pkg/tools"]) == [
        "pkg/tools/__init__.py covers pkg/tools, which decides no result"
    ]


def test_a_package_is_a_folder_dep_when_the_stage_runs_most_of_it(tiny: Path) -> None:
    make_project(tiny, {"pkg/lazy/other.py": "", "pkg/lazy/more.py": ""})
    closure = stage_closure("python -m steps.two", tiny, project_packages(tiny))
    deps = code_deps(closure, tiny, ())
    assert "pkg/lazy" in deps and "pkg/lazy/inner.py" not in deps  # 3 of 5 files: a folder
    make_project(tiny, {"pkg/lazy/third.py": ""})  # 3 of 6: its files
    deps = code_deps(closure, tiny, ())
    assert "pkg/lazy" not in deps and "pkg/lazy/configs/settings.json" in deps
    assert missing_code_deps(closure, deps) == []


SYNC_BEFORE = """\
# the graph
stages:
  two:
    foreach: ${datasets}
    do:
      cmd: python -m steps.two
      deps:  # code, then data
        - steps/two.py
        - pkg/unused.py
        # what it reads
        - data/${item}/input.parquet
        - data/${item}/other.parquet  # when there is one

      outs:
        - data/${item}/out.parquet: {persist: true}

  one:
    cmd: python -m steps.one
    deps: [steps/one.py, 'data/a.parquet']  # a comment after the list
    params: [one]
"""

SYNC_AFTER = """\
# the graph
stages:
  two:
    foreach: ${datasets}
    do:
      cmd: python -m steps.two
      deps: [pkg/__init__.py, pkg/attrs.py, pkg/cycle_a.py, pkg/cycle_b.py, pkg/lazy, pkg/sub.py,
        steps/__init__.py, steps/common.py, steps/one.py, steps/two.py,
        # code, then data
        # what it reads
        'data/${item}/input.parquet',
        # when there is one
        'data/${item}/other.parquet']

      outs:
        - data/${item}/out.parquet: {persist: true}

  one:
    cmd: python -m steps.one
    deps: [pkg/__init__.py, pkg/attrs.py, pkg/cycle_a.py, pkg/cycle_b.py, pkg/lazy, pkg/sub.py,
      steps/__init__.py, steps/common.py, steps/one.py,
      'data/a.parquet']  # a comment after the list
    params: [one]
"""


def test_sync_writes_code_deps_first_and_keeps_data_deps_and_comments(tiny: Path) -> None:
    """`sync_code_deps` turns a block list (a new stage's) into the flow form, replaces the code
    deps with the closure's, keeps the data deps and comments, and touches nothing else; run
    again, it changes nothing."""
    from ruamel.yaml import YAML

    packages = project_packages(tiny)
    wanted = {
        stage: code_deps(stage_closure(f"python -m steps.{stage}", tiny, packages), tiny, ())
        for stage in ("one", "two")
    }
    text, changes = sync_text(SYNC_BEFORE, wanted, packages)
    assert text == SYNC_AFTER
    assert changes[0].startswith("one: -[] +['pkg/__init__.py'")
    assert changes[1].startswith("two: -['pkg/unused.py'] +['pkg/__init__.py'")
    assert sync_text(text, wanted, packages) == (text, [])
    two = YAML(typ="safe", pure=True).load(text)["stages"]["two"]["do"]["deps"]
    assert two[-2:] == ["data/${item}/input.parquet", "data/${item}/other.parquet"]
    closure = stage_closure("python -m steps.two", tiny, packages)
    assert missing_code_deps(closure, two) == []
    assert unused_code_deps(closure, two, tiny, packages) == []
    with pytest.raises(ValueError, match="no deps list found for stage"):
        sync_text(SYNC_BEFORE, {**wanted, "three": ["steps/two.py"]}, packages)
    assert Entry("'it''s'").value() == "it's"
