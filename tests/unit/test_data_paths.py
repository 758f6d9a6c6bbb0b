"""Every path under data/<dataset>/ is named once, in `rulerag.layout.DataLayout`.

The library, the stage scripts and the tests find a dataset's files through the layout
(`layout.corpus`, `layout.row("standard_rag")`, ...). A hand-joined `base / "benchmark" /
"corpus.jsonl"` keeps working until the folder is renamed, then silently reads or writes
elsewhere: this test (read from the code, nothing imported) fails on any such join. A join
that builds a path outside data/<dataset>/ which happens to use one of these names (a KG
mirror's `kg/`, a model cache, a QA set folder) says so on its line with `# outside
data/<dataset>/`.
"""

from __future__ import annotations

import ast
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
LAYOUT = PROJECT / "rulerag" / "layout.py"
SCANNED = ("rulerag", "pipeline_steps", "tests")
EXEMPT = {LAYOUT, Path(__file__).resolve()}
#: the line comment that marks a join as not under data/<dataset>/
OUTSIDE = "# outside data/<dataset>/"


def layout_folders() -> frozenset[str]:
    """The top folders of data/<dataset>/: the names `DataLayout` joins onto `self.root`."""
    folders = set()
    for node in ast.walk(ast.parse(LAYOUT.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and ast.unparse(node.left) == "self.root"
            and isinstance(node.right, ast.Constant)
            and isinstance(node.right.value, str)
        ):
            folders.add(node.right.value)
    return frozenset(folders)


FOLDERS = layout_folders()


def _names_a_folder(node: ast.AST) -> bool:
    """A string constant that is one of the folders, or a path starting with one."""
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.split("/")[0] in FOLDERS
    )


def hand_built_paths(source: str) -> list[int]:
    """The lines where `source` joins a data/<dataset>/ folder name onto a path by hand
    (`x / "benchmark"`, `x / "rules/bank.parquet"`, `x.joinpath("kg", ...)`), unless the line
    carries the `OUTSIDE` mark."""
    lines = source.splitlines()
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            joined = [node.right]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "joinpath"
        ):
            joined = list(node.args)
        else:
            continue
        for part in joined:
            if _names_a_folder(part) and OUTSIDE not in lines[part.lineno - 1]:
                found.add(part.lineno)
    return sorted(found)


def scanned_files() -> list[Path]:
    files = (p for top in SCANNED for p in (PROJECT / top).rglob("*.py"))
    return sorted(p for p in files if p.resolve() not in EXEMPT)


def test_the_layout_names_the_folders_this_test_guards() -> None:
    assert {"kg", "rules", "benchmark", "retrieval", "generation", "report", "cache"} <= FOLDERS


def test_no_data_path_is_joined_by_hand() -> None:
    offenders = [
        f"{path.relative_to(PROJECT)}:{line}"
        for path in scanned_files()
        for line in hand_built_paths(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], "use rulerag.layout.DataLayout for these paths"


def test_a_hand_built_path_is_found() -> None:
    """Mutation check: the guard sees each way of joining by hand, and nothing else."""
    source = '''
"""A docstring may say data / "benchmark" / "corpus.jsonl"."""
layout = DataLayout(base)
corpus = layout.corpus
bank = root / "rules" / "bank.parquet"
run = base / 'retrieval/bm25-rg/run.parquet'
row = base.joinpath("generation", "standard_rag")
mirror = shared / "kg"  # outside data/<dataset>/: the KG mirror
name = "report"
'''
    assert hand_built_paths(source) == [5, 6, 7]


def test_a_real_file_mutated_back_to_a_hand_join_fails() -> None:
    """Mutation check on a file this change converted: undoing one layout call is caught."""
    path = PROJECT / "tests" / "unit" / "test_symbolic.py"
    source = path.read_text(encoding="utf-8")
    assert hand_built_paths(source) == []
    mutated = source.replace("write_jsonl(layout.corpus,", 'write_jsonl(base / "benchmark" / "x",')
    assert mutated != source
    assert len(hand_built_paths(mutated)) == 1
