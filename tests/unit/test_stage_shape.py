"""The shape the stages keep (read from the code, nothing imported):

* every stage script is a shell: its `main()` is at most 40 lines and reads its arguments and
  params through the one shared helper (`pipeline_steps.common.stage_inputs`), so no stage
  repeats a parser, a params loader or the data folder's layout;
* no library function receives params.yaml as a mapping: below `pipeline_steps/` the library
  takes its section's typed settings; only `rulerag/params.py` reads the file (called by the
  stage scripts, the orchestration and `make serve`'s command line), and only the
  orchestration (which validates a run conf as the file it would produce) handles it raw.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
STAGES = sorted(
    p for p in (PROJECT / "pipeline_steps").glob("*.py") if p.stem not in {"__init__", "common"}
)
MAX_MAIN_LINES = 40
#: where params.yaml may be read or handled as plain data; `make serve`'s command line
#: (rulerag/serving/cli.py) is a shell as a stage script is: it reads the file once, through
#: `load_params`, and hands the typed `serve` section on; the registered model's pyfunc
#: (rulerag/serving/model.py) reads the params.yaml packed with it, once, when it is loaded
RAW_PARAMS_ALLOWED = (
    "rulerag/params.py",
    "rulerag/orchestration/",
    "rulerag/serving/cli.py",
    "rulerag/serving/model.py",
)
#: functions whose `params` is another API's, not params.yaml (MLflow's pyfunc inference
#: params; the MLflow params a stage run logs, and those its pipeline's parent run logs: all of
#: params.yaml flattened into MLflow params, the one place a raw copy is wanted)
NOT_PARAMS_YAML = {
    "predict",
    "stage_run",
    "log_params",
    "flatten_params",
    "log_pipeline_params",
    "_log_params",
}


def functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


@pytest.mark.parametrize("script", STAGES, ids=lambda p: p.stem)
def test_a_stage_main_is_a_short_shell_over_the_shared_helper(script: Path) -> None:
    (main,) = [f for f in functions(script) if f.name == "main"]
    length = main.end_lineno - main.lineno + 1
    assert length <= MAX_MAIN_LINES, f"{script.name}: main() has {length} lines"
    source = script.read_text(encoding="utf-8")
    assert "stage_inputs(" in ast.get_source_segment(source, main)
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module)])
    }
    assert not imported & {"argparse", "yaml", "ruamel"}, "stage_inputs parses and reads"


def library_files() -> list[Path]:
    return sorted((PROJECT / "rulerag").rglob("*.py"))


def test_no_library_function_takes_params_yaml_as_a_mapping() -> None:
    offenders = []
    for path in library_files():
        relative = path.relative_to(PROJECT).as_posix()
        if relative.startswith(RAW_PARAMS_ALLOWED):
            continue
        for function in functions(path):
            if function.name in NOT_PARAMS_YAML:
                continue
            arguments = function.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                annotation = ast.unparse(arg.annotation) if arg.annotation else ""
                raw = arg.arg in {"params", "raw_params"} and "Params" not in annotation
                if raw or "params.yaml" in annotation:
                    offenders.append(f"{relative}: {function.name}({arg.arg}: {annotation})")
    assert offenders == []


def test_only_rulerag_params_reads_the_params_file() -> None:
    readers = {"read_params_file", "load_params", "parse_params"}
    offenders = []
    for path in library_files():
        relative = path.relative_to(PROJECT).as_posix()
        if relative.startswith(RAW_PARAMS_ALLOWED):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in readers:
                    offenders.append(f"{relative}:{node.lineno}: {name}")
    assert offenders == []


def test_the_checks_see_an_offender(tmp_path: Path) -> None:
    """Mutation check: a stage with a long main and a library function with a raw params
    mapping are both found."""
    long_main = "def main(argv=None):\n" + "    x = 1\n" * 45 + "    return 0\n"
    (main,) = [f for f in _parse(long_main) if f.name == "main"]
    assert main.end_lineno - main.lineno + 1 > MAX_MAIN_LINES
    (bad,) = _parse("def f(params: Mapping[str, Any]) -> None: ...\n")
    (good,) = _parse("def f(params: Params) -> None: ...\n")
    assert "Params" not in ast.unparse(bad.args.args[0].annotation)
    assert "Params" in ast.unparse(good.args.args[0].annotation)


def _parse(source: str) -> list[ast.FunctionDef]:
    return [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)]
