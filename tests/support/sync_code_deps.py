"""Write dvc.yaml's code deps from what each stage runs (`code_deps`).

    python -m tests.support.sync_code_deps           # rewrite dvc.yaml, print what changed
    python -m tests.support.sync_code_deps --check   # exit 1 if anything would change

A stage's ``deps`` is one YAML flow list: its code deps first, packed into lines of at most 100
characters, then its data deps one to a line (quoted: ``${...}`` is no plain scalar inside
``[...]``), with comment lines among them if need be::

      deps: [pipeline_steps/__init__.py, pipeline_steps/common.py, pipeline_steps/ingest.py,
        rulerag/__init__.py, ..., rulerag/kg,
        'data/${item}/kg/facts.parquet']

The code deps are exactly `code_deps.code_deps` of the stage's closure (infrastructure that
decides no result left out, packages a stage mostly runs as folders), sorted; the data deps and
comments are kept as written. A stage written with a block list (``deps:`` then ``- path``
lines, as a new stage may be) is turned into this form. Everything else in dvc.yaml is left
byte for byte. tests/unit/test_dvc_deps.py fails when dvc.yaml differs from what this writes.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rulerag.orchestration.dvc_graph import build_graph, load_yaml
from tests.support.code_deps import (
    NO_RESULT_CODE,
    CodeClosure,
    code_deps,
    project_packages,
    stage_closure,
)

PROJECT = Path(__file__).resolve().parents[2]
#: the longest line the code deps are packed into (the project's line length)
WIDTH = 100

_STAGE_RE = re.compile(r"^  (?P<name>[A-Za-z_][\w-]*):\s*(#.*)?$")
_DEPS_RE = re.compile(r"^(?P<indent> +)deps:(?P<rest>.*)$")


def example_params(root: Path) -> dict[str, Any]:
    """params.yaml with the opt-in matrix axes that are empty by default filled, so that every
    stage of dvc.yaml has an instance to read its command from."""
    params = load_yaml(root / "params.yaml")
    params["r2ag"]["rows"] = params["r2ag"]["rows"] or list(params["r2ag"]["variants"])
    generation = params["generation"]
    generation["robustness_rows"] = generation["robustness_rows"] or ["standard_rag"]
    params["qa"]["datasets"] = params["qa"]["datasets"] or ["toyqa"]
    params["generalisation"]["datasets"] = params["generalisation"]["datasets"] or ["icews14"]
    params["export"]["datasets"] = params["export"]["datasets"] or ["icews14"]
    return params


def stage_closures(root: Path) -> dict[str, CodeClosure]:
    """One import closure per stage of dvc.yaml (code deps do not vary by item), infrastructure
    left out (`NO_RESULT_CODE`)."""
    packages = project_packages(root)
    commands: dict[str, Any] = {}
    for instance in build_graph(root / "dvc.yaml", example_params(root)):
        commands.setdefault(instance.stage, instance.cmd)
    return {
        stage: stage_closure(cmd, root, packages, NO_RESULT_CODE) for stage, cmd in commands.items()
    }


# ---------------------------------------------------------------------------------------------
# Reading and writing one stage's deps list as text
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One line's worth of a deps list: a dep as written (``'data/${item}/x'``) or a comment."""

    text: str
    comment: bool = False

    def value(self) -> str:
        """The dep as YAML reads it."""
        text = self.text
        if text[:1] == "'" and text[-1:] == "'":
            return text[1:-1].replace("''", "'")
        if text[:1] == '"' and text[-1:] == '"':
            return text[1:-1]
        return text


def _flow_entries(text: str, where: str) -> tuple[list[Entry], int]:
    """The entries of the flow list that `text` opens with ``[`` and where it ends (the index
    after ``]``). Items are plain or quoted scalars; comments run to the end of their line."""
    assert text[0] == "["
    entries: list[Entry] = []
    current, i = "", 1
    while i < len(text):
        char = text[i]
        if char in "'\"":
            end = i + 1
            while True:
                end = text.index(char, end)
                if char == "'" and text[end + 1 : end + 2] == "'":
                    end += 2  # '' inside '...'
                    continue
                break
            current += text[i : end + 1]
            i = end + 1
        elif char == "#" and text[i - 1].isspace():
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            if current.strip():
                raise ValueError(f"{where}: a comment after a dep on its line: {current.strip()}")
            entries.append(Entry(text[i:end].rstrip(), comment=True))
            current, i = "", end
        elif char in ",]":
            if current.strip():
                entries.append(Entry(current.strip()))
            elif char == ",":
                raise ValueError(f"{where}: an empty entry in deps")
            current, i = "", i + 1
            if char == "]":
                return entries, i
        elif char in "[{":
            raise ValueError(f"{where}: a nested list or mapping in deps")
        else:
            current += char
            i += 1
    raise ValueError(f"{where}: deps' `[` is never closed")


@dataclass(frozen=True)
class DepsSpan:
    """Where one stage's deps list lies in dvc.yaml's lines (``start`` to ``end``, exclusive)
    and what it holds."""

    stage: str
    start: int
    end: int
    indent: str
    entries: list[Entry]
    #: a comment after the closing ``]``, kept there
    tail: str = ""


def find_deps(lines: list[str]) -> dict[str, DepsSpan]:
    """Every stage's deps list in dvc.yaml's lines (`lines` keep their line ends)."""
    spans: dict[str, DepsSpan] = {}
    stage, in_stages, i = None, False, 0
    while i < len(lines):
        line = lines[i].rstrip("\n")
        if not line.startswith(" ") and line.strip() and not line.startswith("#"):
            in_stages, stage = line.startswith("stages:"), None
        elif in_stages and (match := _STAGE_RE.match(line)):
            stage = match["name"]
        deps = _DEPS_RE.match(line) if stage else None
        if not deps:
            i += 1
            continue
        assert stage is not None
        indent, rest, where = deps["indent"], deps["rest"].strip(), f"dvc.yaml: stage {stage}"
        if rest.startswith("["):
            head = rest
            text = "".join([head + "\n", *lines[i + 1 :]])
            entries, end = _flow_entries(text, where)
            consumed = text[:end].count("\n")
            tail = text[end:].split("\n", 1)[0].strip()
            if tail and not tail.startswith("#"):
                raise ValueError(f"{where}: {tail!r} after deps' `]`")
            spans[stage] = DepsSpan(stage, i, i + consumed + 1, indent, entries, tail)
            i += consumed + 1
        elif not rest or rest.startswith("#"):
            entries, j = [Entry(rest, comment=True)] if rest else [], i + 1
            while j < len(lines):
                item = lines[j].rstrip("\n")
                stripped = item.strip()
                deeper = len(item) - len(item.lstrip(" ")) > len(indent)
                if stripped.startswith("- ") and deeper:
                    value, _, comment = stripped[2:].partition(" #")
                    if comment and value.lstrip()[:1] not in "'\"":
                        entries.append(Entry(f"#{comment}", comment=True))
                    else:
                        value = stripped[2:]
                    entries.append(Entry(_quoted(value.strip())))
                elif stripped.startswith("#") and deeper:
                    entries.append(Entry(stripped, comment=True))
                elif stripped:
                    break
                j += 1
            while j > i + 1 and not lines[j - 1].strip():
                j -= 1  # blank lines after the list stay where they are
            spans[stage] = DepsSpan(stage, i, j, indent, entries)
            i = j
        else:
            raise ValueError(f"{where}: deps is neither a list nor a flow list")
    return spans


def _quoted(text: str) -> str:
    """A block list's item as a flow list item: quoted unless it already is."""
    if text[:1] in "'\"":
        return text
    return "'" + text.replace("'", "''") + "'"


def is_code(dep: str, packages: Iterable[str]) -> bool:
    """A dep under one of the project's packages (rulerag/, pipeline_steps/)."""
    top = dep.split("/", 1)[0]
    return top in packages or top.removesuffix(".py") in packages


def _pack(words: list[str], first: str, indent: str) -> list[str]:
    """`words` after `first` in lines of at most `WIDTH` characters, continued at `indent`
    (a word longer than a line gets one of its own)."""
    lines, current = [], first + words[0]
    for word in words[1:]:
        if len(current) + 1 + len(word) <= WIDTH:
            current = f"{current} {word}"
        else:
            lines.append(current)
            current = indent + word
    return [*lines, current]


def render_deps(indent: str, code: list[str], data: list[Entry], tail: str = "") -> list[str]:
    """The lines of a deps flow list: `code` packed into lines of at most `WIDTH` characters,
    then `data` from a new line, packed the same way; a comment has a line of its own and
    starts a new pack (one from a block list's item goes before it); `tail`, a comment, after
    the closing bracket."""
    if not code:
        raise ValueError("a stage runs some project code: its code deps cannot be empty")
    more = f"{indent}  "
    words = [f"{dep}," for dep in code]
    groups: list[list[str] | str] = [[]]  # packs of data deps, and comments between them
    for entry in data:
        if entry.comment:
            groups += [entry.text, []]
        else:
            groups[-1].append(f"{entry.text},")  # type: ignore[union-attr]
    packs = [g for g in groups if g]
    last = next((g for g in reversed(packs) if isinstance(g, list)), words)
    last[-1] = last[-1][:-1] + "]"
    lines = _pack(words, f"{indent}deps: [", more)
    for group in packs:
        lines += [more + group] if isinstance(group, str) else _pack(group, more, more)
    closing = max(i for i, line in enumerate(lines) if line.endswith("]"))
    if tail:
        lines[closing] += f"  {tail}"
    return [line + "\n" for line in lines]


def sync_text(
    text: str, wanted: dict[str, list[str]], packages: Iterable[str]
) -> tuple[str, list[str]]:
    """dvc.yaml's text with each stage of `wanted` given those code deps; the changed stages."""
    lines = text.splitlines(keepends=True)
    spans = find_deps(lines)
    missing = sorted(set(wanted) - set(spans))
    if missing:
        raise ValueError(f"dvc.yaml: no deps list found for stage(s) {missing}")
    changes = []
    for span in sorted(spans.values(), key=lambda s: -s.start):  # from the end: indexes hold
        if span.stage not in wanted:
            continue
        before = [e.value() for e in span.entries if not e.comment]
        data = [e for e in span.entries if e.comment or not is_code(e.value(), packages)]
        new = render_deps(span.indent, wanted[span.stage], data, span.tail)
        if new != lines[span.start : span.end]:
            code_before = [d for d in before if is_code(d, packages)]
            removed = [d for d in code_before if d not in wanted[span.stage]]
            added = [d for d in wanted[span.stage] if d not in code_before]
            changes.append(f"{span.stage}: -{removed} +{added}" if removed or added
                           else f"{span.stage}: rewritten")  # fmt: skip
            lines[span.start : span.end] = new
    return "".join(lines), sorted(changes)


def sync(root: Path = PROJECT, write: bool = True) -> list[str]:
    """Rewrite dvc.yaml's code deps; returns one line per changed stage."""
    path = root / "dvc.yaml"
    packages = project_packages(root)
    wanted = {stage: code_deps(c, root) for stage, c in stage_closures(root).items()}
    text = path.read_text(encoding="utf-8")
    new_text, changes = sync_text(text, wanted, packages)
    if new_text != text:
        _check_same_data(text, new_text, wanted, packages)
        if write:
            path.write_text(new_text, encoding="utf-8")
    return changes


def _check_same_data(
    old: str, new: str, wanted: dict[str, list[str]], packages: Iterable[str]
) -> None:
    """The rewrite changed nothing but the code deps (a guard on the text surgery above)."""
    from io import StringIO

    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    before, after = yaml.load(StringIO(old)), yaml.load(StringIO(new))
    for stage, body in after["stages"].items():
        old_body = before["stages"][stage]
        new_do, old_do = body.get("do", body), old_body.get("do", old_body)
        if stage in wanted:
            new_deps = list(new_do["deps"])
            expected = wanted[stage] + [d for d in old_do["deps"] if not is_code(d, packages)]
            assert new_deps == expected, f"{stage}: {new_deps} != {expected}"
            new_do, old_do = dict(new_do), dict(old_do)
            new_do.pop("deps"), old_do.pop("deps")
        assert new_do == old_do, f"stage {stage} changed beyond its deps"
    assert {k: v for k, v in after.items() if k != "stages"} == {
        k: v for k, v in before.items() if k != "stages"
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    changes = sync(write=not args.check)
    print("\n".join(changes) or "dvc.yaml's code deps are in line with the imports")
    return 1 if args.check and changes else 0


if __name__ == "__main__":
    sys.exit(main())
