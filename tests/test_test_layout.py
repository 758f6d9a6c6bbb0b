"""The tests' own layout (docs/layout.md): tests/unit holds fast, pure tests of library code,
and a test that runs a stage script lives in tests/stages (marker `stage`).

A test "runs a stage" when it imports a stage module, `pipeline_steps.<stage>` (every module
of pipeline_steps/ but `common`, the shared helpers), to call its `main`, or asks for the
`stage_project` fixture, which exists to run one. Static checks of the stages (dvc.yaml's
commands and code deps, the GPU launcher's command line) name stage modules in strings or read
their source; they never import them, so they pass. What this does not see: a stage started
as `python -m pipeline_steps.<stage>` in a subprocess (a command line in a string is also how
the static checks name stages); review keeps those in tests/stages."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
STAGES = sorted(
    p.stem
    for p in (TESTS.parent / "pipeline_steps").glob("*.py")
    if p.stem not in {"__init__", "common"}
)


def imported_stages(tree: ast.AST) -> set[str]:
    """The stage modules a module imports, at any depth (tests import them inside the test)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {name.split(".")[1] for name in names if name.startswith("pipeline_steps.")}
    return found & set(STAGES)


def stage_project_users(tree: ast.AST) -> list[str]:
    """The functions (tests or fixtures) that ask for the `stage_project` fixture."""
    return [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and "stage_project" in {arg.arg for arg in node.args.args + node.args.kwonlyargs}
    ]


def parsed(folder: str) -> dict[str, ast.AST]:
    return {
        path.name: ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for path in sorted((TESTS / folder).glob("*.py"))
    }


def test_the_checks_know_the_stages() -> None:
    assert {"ingest", "generate", "report"} <= set(STAGES)
    sample = ast.parse(
        "import pipeline_steps.report as stage\n"
        "from pipeline_steps.common import run_stage\n"
        "from pipeline_steps import generate\n"
        "def test_x(tmp_path, stage_project): import pipeline_steps.ingest\n"
    )
    assert imported_stages(sample) == {"report", "generate", "ingest"}
    assert stage_project_users(sample) == ["test_x"]


def test_no_unit_test_runs_a_stage() -> None:
    offenders = {
        name: sorted(imported_stages(tree)) + stage_project_users(tree)
        for name, tree in parsed("unit").items()
    }
    offenders = {name: found for name, found in offenders.items() if found}
    assert not offenders, f"tests/unit runs stages (move these tests to tests/stages/): {offenders}"


def test_every_stage_test_file_runs_a_stage() -> None:
    files = {name: tree for name, tree in parsed("stages").items() if name.startswith("test_")}
    assert files, "no tests in tests/stages"
    idle = [name for name, tree in files.items() if not imported_stages(tree)]
    assert not idle, f"tests/stages files that run no stage (tests/unit is their place): {idle}"
