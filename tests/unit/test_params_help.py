"""A knob's help lives once, in its settings field; params.yaml's comment on the key (at the
end of its line, or the block above it) is that help (`tests/support/sync_params_help.py` writes
and checks it), and every other comment is one of the sync's `NOTES`, with its reason."""

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
    assert checked >= 197  # 136 end-of-line comments, 61 blocks (13 of them sections')


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
    assert (section,) in helps  # the block above the section: its class's HELP
    unhelped = []
    for path in knob_paths(sync.section_class(section), (section,)):
        i = sync.key_line(lines, path)
        if i is None or path in helps:
            continue
        if sync.comment_at(lines, i)[0] or sync.block_above(lines, i) < i:
            unhelped.append(".".join(path))
    assert unhelped == []


def test_every_comment_is_a_help_or_a_note(tmp_path: Path) -> None:
    """A comment that is no field's help (nor a NOTES entry) is named, as is a note that
    stands above no comment."""
    assert all(reason for reason in sync.NOTES.values())
    original = sync.PARAMS.read_text(encoding="utf-8")
    stray = original.replace("  seed: 12\n  corpus:\n", "  # a stray note\n  seed: 12\n  corpus:\n")
    stray = stray.replace("  # Table 3's ablations", "  #  Table 3's ablations", 1)
    unnoted = original.replace(  # the note no longer stands above r2ag.profiles.paper
        "2,048 F_G samples.\n    paper:", "2,048 F_G samples.\n\n    paper:", 1
    )
    assert stray != original and unnoted != stray
    copy = tmp_path / "params.yaml"
    copy.write_text(stray, encoding="utf-8")
    changes, _ = sync.sync(write=False, path=copy)
    assert len(changes) == 1 and "a stray note" in changes[0], changes
    copy.write_text(unnoted, encoding="utf-8")
    changes, _ = sync.sync(write=False, path=copy)
    assert "NOTES[('r2ag', 'profiles', 'paper')]: no comment stands there" in changes
    assert sum("# The paper's (App. A and the official code)" in c for c in changes) == 1


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


def test_a_stale_block_is_found_and_rewritten_from_its_help(tmp_path: Path) -> None:
    """A block is compared by its words: its own wrap is kept; a block whose words differ is
    rewritten from the help, wrapped at the key's indentation, lists keeping their lines."""
    original = sync.PARAMS.read_text(encoding="utf-8")
    helps = sync.all_helps()
    rewrapped = original.replace(
        "  # Exact duplicate facts (same head, relation, tail and time within one split):\n",
        "  # Exact duplicate facts (same head, relation, tail and time\n  # within one split):\n",
    )
    stale = original.replace(
        "sets small. Temporal rules follow TLogic", "sets small. Temporal follow"
    )
    stale = stale.replace("  # keep  - keep every line as read\n", "")
    stale = stale.replace("  #   keep  - keep every line as read\n", "")
    assert rewrapped != original and stale != original
    copy = tmp_path / "params.yaml"
    copy.write_text(rewrapped, encoding="utf-8")
    assert sync.sync(write=False, path=copy)[0] == []  # the same words, wrapped otherwise
    copy.write_text(stale, encoding="utf-8")
    changes, _ = sync.sync(write=False, path=copy)
    assert [c.split(":")[0] for c in changes] == [
        "apply_rules.discrimination_bound",
        "ingest.duplicates",
    ]
    sync.sync(write=True, path=copy)
    assert sync.sync(write=False, path=copy)[0] == []
    lines = copy.read_text(encoding="utf-8").split("\n")
    i = sync.key_line(lines, ("ingest", "duplicates"))
    assert lines[sync.block_above(lines, i) : i] == [
        f"  # {line}" for line in helps[("ingest", "duplicates")].split("\n")
    ]
    i = sync.key_line(lines, ("apply_rules", "discrimination_bound"))
    block = lines[sync.block_above(lines, i) : i]
    assert all(line.startswith("  # ") and len(line) <= sync.WIDTH for line in block)
    wanted = " ".join(helps[("apply_rules", "discrimination_bound")].split())
    assert sync.block_text(block) == wanted


def test_a_long_help_is_wrapped_under_its_column() -> None:
    lines = sync.written("  key: 1", "word " * 40, 29)
    assert all(len(line) <= sync.WIDTH for line in lines) and len(lines) > 1
    assert all(line.index("#") == 29 for line in lines)
    text, more = sync.comment_at([*lines, "  other: 2"], 0)
    assert text == " ".join(["word"] * 40) and more == len(lines) - 1
