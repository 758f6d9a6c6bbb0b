"""A knob's help lives once, in its settings field; params.yaml's comment on the key is that
help (`tests/support/sync_params_help.py` writes and checks it)."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from tests.support import sync_params_help as sync

#: the sections whose every commented knob has its help in its field (all of params.yaml's:
#: issue 46)
HELPED_SECTIONS = (
    "ingest",
    "mine_rules",
    "build_benchmark",
    "index",
    "train_retriever",
    "retrieve",
    "generation",
    "r2ag",
    "apply_rules",
    "rule_retrieval",
    "qa",
    "generalisation",
    "export",
)


def test_every_help_comment_is_its_fields_help() -> None:
    changes, checked = sync.sync(write=False)
    assert changes == [], "run: python -m tests.support.sync_params_help"
    assert checked >= 136


def knob_paths(cls: type, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        nested = hints[f.name]
        if dataclasses.is_dataclass(nested) and isinstance(nested, type):
            out += knob_paths(nested, (*path, f.name))
        else:
            out.append((*path, f.name))
    return out


@pytest.mark.parametrize("section", HELPED_SECTIONS)
def test_a_helped_sections_commented_knobs_all_have_help(section: str) -> None:
    """No comment in params.yaml that is not a field's help: written once, in the field."""
    lines = sync.PARAMS.read_text(encoding="utf-8").split("\n")
    helps = sync.all_helps()
    unhelped = []
    for path in knob_paths(sync.section_class(section), (section,)):
        i = sync.key_line(lines, path)
        if i is not None and sync.comment_at(lines, i)[0] and path not in helps:
            unhelped.append(".".join(path))
    assert unhelped == []


def test_a_stale_comment_is_found_and_rewritten(tmp_path: Path) -> None:
    original = sync.PARAMS.read_text(encoding="utf-8")
    stale = original.replace(
        "search_depth: 30             # documents searched per DPR question",
        "search_depth: 30             # searched documents",
    ).replace(
        "  threads: 0                   # torch threads; 0 = torch's default (all cores)",
        "  threads: 0",
    )
    assert stale != original
    copy = tmp_path / "params.yaml"
    copy.write_text(stale, encoding="utf-8")
    changes, _ = sync.sync(write=False, path=copy)
    assert [c.split(":")[0] for c in changes] == ["export.search_depth", "index.threads"]
    assert copy.read_text(encoding="utf-8") == stale  # --check changes nothing
    sync.sync(write=True, path=copy)
    assert copy.read_text(encoding="utf-8") == original
    assert sync.sync(write=False, path=copy)[0] == []


def test_a_long_help_is_wrapped_under_its_column() -> None:
    lines = sync.written("  key: 1", "word " * 40, 29)
    assert all(len(line) <= sync.WIDTH for line in lines) and len(lines) > 1
    assert all(line.index("#") == 29 for line in lines)
    text, more = sync.comment_at([*lines, "  other: 2"], 0)
    assert text == " ".join(["word"] * 40) and more == len(lines) - 1
