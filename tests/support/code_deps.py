"""The project code a stage really runs: the import closure of its stage script.

DVC reruns a stage when one of its ``deps`` changes, so a module the stage imports but does not
list lets results go stale, and a listed module it never imports reruns expensive stages for
nothing. tests/unit/test_dvc_deps.py compares dvc.yaml's code deps against what this module
derives from the code itself, so that the two cannot drift apart.

The closure is read statically with ``ast`` (nothing is imported): every ``import a.b`` and
``from a import b`` anywhere in a module, inside functions too (the project imports its heavy
modules lazily), relative imports, and ``importlib.import_module("literal")``. Imports under
``if TYPE_CHECKING:`` are skipped: they never run. Importing ``a.b.c`` also runs ``a`` and
``a.b`` (their ``__init__.py``), and ``from a import b`` imports ``a.b`` when it is a module.
Only names resolving to files of the project's own top-level packages are followed.

Not every module a stage runs decides its results. `NO_RESULT_CODE` names the infrastructure
that cannot change a stage's outputs (MLflow tracking, a wall-clock bound on its calls), with
the reason for each: it is left out of a stage's code deps, and the walk does not go on through
it (what it imports serves only it), so that an edit to it reruns nothing. A module that decides
bytes of an output, however indirectly (rulerag/io.py writes the files, rulerag/redact.py masks
API answers), is not infrastructure. tests/stages/test_no_result_code.py proves the rule: a
stage's outputs are byte-identical whatever the left-out code logs, or fails to.

Package data a module opens by path (``Path(__file__).parent / "configs" / "x.json"``) is
reported as well: a ``/`` chain or a string constant that names an existing non-Python file
relative to the module's folder. That covers how this project loads its bundled files without
trying to evaluate arbitrary path arithmetic.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "NO_RESULT_CODE",
    "CodeClosure",
    "code_deps",
    "covers",
    "foreign_stage_imports",
    "import_closure",
    "imported_names",
    "left_out_code_deps",
    "missing_code_deps",
    "module_file",
    "package_data",
    "project_packages",
    "stage_closure",
    "stage_modules",
    "unused_code_deps",
]

#: Project code that cannot change a stage's outputs, with why: left out of every stage's code
#: deps (a folder stands for everything under it). Whatever such a module imports counts only
#: through it and is not followed. A module belongs here only if no edit to it can change a byte
#: a stage writes under data/; tests/stages/test_no_result_code.py checks it on a real stage.
NO_RESULT_CODE: Mapping[str, str] = {
    "rulerag/tracking": (
        "MLflow: a stage's params, metrics, tags, artifacts and registered models go to the"
        " tracking store (or its spool when the store fails), never under data/. The library"
        " cannot import it (pyproject.toml's import-linter floors put it on top), so only the"
        " stage shells call it, and they write nothing it returns, but for one provenance line:"
        " export's card quotes the commit it was built at (identity.git_commit), a value that"
        " moves with every commit without rerunning export, like a date."
    ),
    "rulerag/deadline.py": (
        "a wall-clock bound on the tracking store's calls (tracking is its only user): past it a"
        " call is abandoned and the run spooled; it raises, it never changes a value."
    ),
}

#: an interpreter word of a command: python, python3, python3.11, .venv/bin/python
_PYTHON_RE = re.compile(r"python(\d+(\.\d+)?)?")


@dataclass(frozen=True)
class CodeClosure:
    """What running one module executes of the project, with the import chain behind each.

    ``modules`` maps project-relative POSIX paths of Python files to the chain of module
    names from the entry module to that file's module (shortest chain, for error messages);
    ``files`` maps package data files to the chain ending in the module that loads them;
    ``left_out`` maps the modules the walk reached but did not enter (`NO_RESULT_CODE`) to
    their chains.
    """

    entry: str
    modules: Mapping[str, tuple[str, ...]]
    files: Mapping[str, tuple[str, ...]]
    left_out: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def paths(self) -> set[str]:
        """Every project file the entry module depends on (Python and package data)."""
        return set(self.modules) | set(self.files)

    def chain(self, path: str) -> tuple[str, ...]:
        """The import chain that pulled ``path`` in."""
        return self.modules.get(path) or self.files[path]


def project_packages(root: Path) -> frozenset[str]:
    """Top-level importable names of the project: packages (a folder with ``__init__.py``)
    and modules directly in ``root``, i.e. what ``python -m`` run from ``root`` imports from
    the project rather than from site-packages."""
    names = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    names |= {p.stem for p in root.glob("*.py")}
    return frozenset(names)


def module_file(name: str, root: Path, packages: Iterable[str]) -> Path | None:
    """The file ``import name`` executes, when it is a project module; else None."""
    parts = name.split(".")
    if not name or parts[0] not in set(packages) or not all(parts):
        return None
    base = root.joinpath(*parts)
    for candidate in (base.with_name(base.name + ".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` / ``if typing.TYPE_CHECKING:``."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of the tree except the bodies of ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _prefixes(name: str) -> list[str]:
    """``a.b.c`` -> ``a``, ``a.b``, ``a.b.c``: importing a module runs its parent packages."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _literal_import(node: ast.Call) -> str | None:
    """The module of ``importlib.import_module("x")`` / ``import_module("x")`` /
    ``__import__("x")`` with a literal, absolute name."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if called not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return None if first.value.startswith(".") else first.value
    return None


def imported_names(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every dotted name the module may import at run time, parents included.

    ``from a import b`` yields both ``a`` and ``a.b`` (the caller keeps ``a.b`` only if it is
    a module rather than an attribute); relative imports are resolved against ``module``.
    """
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.update(_prefixes(alias.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".") if package else []
                if node.level - 1 > len(base_parts):
                    continue  # beyond the top-level package; Python would fail too
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if not base:
                continue
            names.update(_prefixes(base))
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call):
            literal = _literal_import(node)
            if literal:
                names.update(_prefixes(literal))
    return names


def _path_strings(tree: ast.AST) -> set[str]:
    """Relative paths written in a module: the string operands ending a ``/`` chain
    (``here / "configs" / "x.json"`` -> ``configs/x.json``) and plain string constants."""
    found: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value and "\n" not in node.value and len(node.value) < 256:
                found.add(node.value)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts: list[str] = []
            current: ast.expr = node
            while isinstance(current, ast.BinOp) and isinstance(current.op, ast.Div):
                right = current.right
                if not (isinstance(right, ast.Constant) and isinstance(right.value, str)):
                    break
                parts.insert(0, right.value)
                current = current.left
            if len(parts) > 1:
                found.add("/".join(parts))
    return found


def package_data(tree: ast.AST, path: Path, root: Path) -> set[Path]:
    """Non-Python files inside the project that the module names relative to its folder."""
    here = path.parent
    files: set[Path] = set()
    for text in _path_strings(tree):
        if text.startswith("/") or "\\" in text or "\x00" in text:
            continue
        candidate = Path(os.path.normpath(here / text))
        if (
            candidate.suffix not in (".py", ".pyc")
            and candidate.is_relative_to(root)
            and candidate.is_file()
        ):
            files.add(candidate)
    return files


def import_closure(
    entry: str,
    root: Path,
    packages: Iterable[str] | None = None,
    leave_out: Iterable[str] = (),
) -> CodeClosure:
    """The project modules (and package data) that ``python -m entry`` run in ``root`` executes.

    Breadth first, so each chain is a shortest one; cycles are harmless. A module under one of
    ``leave_out`` (project-relative files or folders) is recorded in ``left_out`` and not
    entered: neither it nor what only it imports is part of the closure. Raises
    FileNotFoundError when ``entry`` is not a project module.
    """
    root = root.resolve()
    known = frozenset(packages) if packages is not None else project_packages(root)
    skipped = tuple(leave_out)
    if module_file(entry, root, known) is None:
        raise FileNotFoundError(
            f"{entry}: no such module in {root} (project packages: {sorted(known)})"
        )
    chains: dict[str, tuple[str, ...]] = {}
    queue: deque[str] = deque()
    for parent in _prefixes(entry):  # `python -m a.b` imports package `a` first
        if module_file(parent, root, known) is not None and parent not in chains:
            chains[parent] = (entry,) if parent == entry else (entry, parent)
            queue.append(parent)
    modules: dict[str, tuple[str, ...]] = {}
    files: dict[str, tuple[str, ...]] = {}
    left_out: dict[str, tuple[str, ...]] = {}
    while queue:
        name = queue.popleft()
        path = module_file(name, root, known)
        assert path is not None  # only resolvable names are queued
        relative = path.relative_to(root).as_posix()
        if any(covers(dep, relative) for dep in skipped):
            left_out[relative] = chains[name]
            continue
        modules[relative] = chains[name]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for data in sorted(package_data(tree, path, root)):
            files.setdefault(data.relative_to(root).as_posix(), chains[name])
        is_package = path.name == "__init__.py"
        for target in sorted(imported_names(tree, name, is_package)):
            if target not in chains and module_file(target, root, known) is not None:
                chains[target] = (*chains[name], target)
                queue.append(target)
    return CodeClosure(entry, modules, files, left_out)


def stage_modules(cmd: str | list[str]) -> list[str]:
    """The project modules a stage command runs: ``python -m pkg.mod`` (or ``python
    path/to/mod.py``) for each command of ``a && b``-style chains or a DVC cmd list."""
    commands = [cmd] if isinstance(cmd, str) else list(cmd)
    found: list[str] = []
    for command in commands:
        words = shlex.split(command)
        for i, word in enumerate(words):
            if not _PYTHON_RE.fullmatch(Path(word).name):
                continue
            j = i + 1
            while j < len(words) and words[j].startswith("-") and words[j] != "-m":
                j += 1  # interpreter flags such as -u
            if j + 1 < len(words) and words[j] == "-m":
                found.append(words[j + 1])
            elif j < len(words) and words[j].endswith(".py"):
                found.append(Path(words[j]).with_suffix("").as_posix().replace("/", "."))
    return found


def stage_closure(
    cmd: str | list[str], root: Path, packages: Iterable[str], leave_out: Iterable[str] = ()
) -> CodeClosure:
    """The import closure of every project module a stage command runs, merged (``leave_out``:
    as `import_closure`; the project passes `NO_RESULT_CODE`).

    Raises ValueError when the command runs no project module: then nothing can be said about
    its code deps, and the check must not pass silently.
    """
    known = frozenset(packages)
    skipped = tuple(leave_out)
    entries = [m for m in stage_modules(cmd) if module_file(m, root, known) is not None]
    if not entries:
        raise ValueError(f"{cmd!r}: runs no project module (`python -m <module>` expected)")
    modules: dict[str, tuple[str, ...]] = {}
    files: dict[str, tuple[str, ...]] = {}
    left_out: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        closure = import_closure(entry, root, known, skipped)
        for mine, theirs in ((modules, closure.modules), (files, closure.files),
                             (left_out, closure.left_out)):  # fmt: skip
            for path, chain in theirs.items():
                mine.setdefault(path, chain)
    return CodeClosure(" && ".join(entries), modules, files, left_out)


def covers(dep: str, path: str) -> bool:
    """A dep covers a file when it names it or a folder holding it."""
    return path == dep or path.startswith(dep.rstrip("/") + "/")


def missing_code_deps(closure: CodeClosure, deps: Iterable[str]) -> list[str]:
    """One message per file the stage runs that no dep covers, with its import chain."""
    deps = list(deps)
    return [
        f"{path} is not a dep ("
        f"{'imported through' if path in closure.modules else 'loaded by'} "
        f"{' -> '.join(closure.chain(path))})"
        for path in sorted(closure.paths())
        if not any(covers(dep, path) for dep in deps)
    ]


def unused_code_deps(
    closure: CodeClosure, deps: Iterable[str], root: Path, packages: Iterable[str]
) -> list[str]:
    """One message per code dep (under a project package) the stage does not need.

    A file dep must be in the closure; a folder dep must hold at least one file of it; a dep
    that does not exist (renamed, deleted) is reported too.
    """
    known = frozenset(packages)
    needed = closure.paths()
    problems = []
    for dep in deps:
        top = dep.split("/", 1)[0]
        if top not in known and top.removesuffix(".py") not in known:
            continue  # data, params files: not code
        path = root / dep
        if not path.exists():
            problems.append(f"{dep} does not exist")
        elif path.is_dir():
            if not any(covers(dep, p) for p in needed):
                problems.append(f"{dep}/ holds nothing the stage imports")
        elif dep not in needed:
            problems.append(f"{dep} is not imported by the stage")
    return problems


def left_out_code_deps(deps: Iterable[str], leave_out: Iterable[str] = NO_RESULT_CODE) -> list[str]:
    """One message per dep that covers code of ``leave_out``: a file or folder inside it, or a
    folder holding some of it (an edit there would rerun the stage for nothing)."""
    problems = []
    for dep in deps:
        for skipped in leave_out:
            if covers(dep, skipped) or covers(skipped, dep):
                problems.append(f"{dep} covers {skipped}, which decides no result")
    return problems


def _folder_files(root: Path, folder: str) -> set[str]:
    """The files of a folder dep as DVC hashes them: .dvcignore leaves out bytecode."""
    return {
        f.relative_to(root).as_posix()
        for f in (root / folder).rglob("*")
        if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"
    }


def code_deps(
    closure: CodeClosure, root: Path, leave_out: Iterable[str] = NO_RESULT_CODE
) -> list[str]:
    """The code deps dvc.yaml lists for a stage: every file of the closure, where a package
    folder under a top-level package (``rulerag/kg``, ``rulerag/generation/r2ag``) stands for
    its files when the stage runs more than half of them and it holds nothing of
    ``leave_out``; sorted. A top-level package itself is never a folder dep: ``pipeline_steps``
    holds every stage's shell, ``rulerag`` holds the infrastructure."""
    needed = closure.paths()
    skipped = tuple(leave_out)
    folders = {
        parent.as_posix()
        for path in needed
        for parent in Path(path).parents
        if len(parent.parts) >= 2 and (root / parent / "__init__.py").is_file()
    }
    deps = set(needed)
    for folder in sorted(folders, key=lambda f: (-f.count("/"), f)):  # deepest first
        inside = _folder_files(root, folder)
        if any(covers(s, f) or covers(folder, s) for s in skipped for f in inside):
            continue
        if 2 * len(inside & needed) > len(inside):
            deps = {d for d in deps if not covers(folder, d)} | {folder}
    return sorted(deps)


def foreign_stage_imports(
    closure: CodeClosure, own: Iterable[str], scripts: Iterable[str]
) -> list[str]:
    """One message per stage script (other than the stage's own) the stage imports: a
    cosmetic edit of one stage's script would otherwise rerun another stage."""
    others = set(scripts) - set(own)
    return [
        f"imports stage script {chain[-1]} (through {' -> '.join(chain)})"
        for chain in sorted(closure.modules.values())
        if chain[-1] in others
    ]
