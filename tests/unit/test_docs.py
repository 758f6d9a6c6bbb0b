"""The project explains itself: its docs cite only files the project has.

* No tracked file cites the development-only design notes, which a user never has (what they
  held is in docs/).
* Every relative Markdown link in the project's Markdown files (README.md, docs/*.md, ...)
  points at a file or folder inside the project, and a `#fragment` into a Markdown file names
  one of its headings (GitHub's anchors), so a renamed file or heading fails here instead of
  rotting silently.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests import helpers

PROJECT_DIR = Path(__file__).resolve().parents[2]
#: the design notes' file name, assembled so that this file does not cite it itself
DESIGN_NOTES = "DESIGN" + ".md"

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_REFERENCE_LINK = re.compile(r"^\s{0,3}\[(?!\^)[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//")


def project_files() -> list[str]:
    """The files a clone or a commit would hold (skips outside a git checkout)."""
    try:
        return helpers.project_files()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")


def is_binary(path: Path) -> bool:
    with open(path, "rb") as handle:
        return b"\0" in handle.read(8192)


def prose(markdown: str) -> str:
    """Markdown without fenced code blocks and code spans (their brackets are not links)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", markdown))


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: inline markup dropped, lowercase, punctuation other than
    `-` and `_` removed, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading anchor of a Markdown text (repeats get -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(_FENCE.sub("", markdown)):
        slug = anchor(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def links(markdown: str) -> list[str]:
    text = prose(markdown)
    return _INLINE_LINK.findall(text) + _REFERENCE_LINK.findall(text)


def broken_links(markdown_file: Path, root: Path) -> list[str]:
    """The relative links of `markdown_file` that do not resolve inside `root`, described."""
    root = root.resolve()
    problems = []
    for target in links(markdown_file.read_text(encoding="utf-8")):
        if _EXTERNAL.match(target):
            continue  # https:, mailto:, ...
        path_part, _, fragment = target.partition("#")
        here = markdown_file.resolve()
        resolved = (here.parent / path_part).resolve() if path_part else here
        if not resolved.is_relative_to(root):
            problems.append(f"{target}: outside the project")
            continue
        if not resolved.exists():
            problems.append(f"{target}: no such file")
            continue
        is_markdown = resolved.is_file() and resolved.suffix.lower() == ".md"
        if (
            fragment
            and is_markdown
            and fragment.lower() not in anchors(resolved.read_text("utf-8"))
        ):
            problems.append(f"{target}: no heading #{fragment} in {resolved.name}")
    return problems


def markdown_files(files: Iterable[str]) -> list[str]:
    return [f for f in files if f.lower().endswith(".md")]


def test_no_tracked_file_cites_the_design_notes() -> None:
    citing = []
    for rel in project_files():
        path = PROJECT_DIR / rel
        if is_binary(path):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        citing += [
            f"{rel}:{n}" for n, line in enumerate(text.splitlines(), 1) if DESIGN_NOTES in line
        ]
    assert not citing, f"cite docs/ instead of {DESIGN_NOTES}: {citing}"


def test_the_docs_exist_and_readme_links_them() -> None:
    readme = (PROJECT_DIR / "README.md").read_text(encoding="utf-8")
    for page in ("docs/paper.md", "docs/data-flow.md", "docs/layout.md"):
        assert (PROJECT_DIR / page).is_file(), page
        assert f"]({page})" in readme, f"README.md does not link {page}"


def test_every_relative_markdown_link_resolves() -> None:
    files = markdown_files(project_files())
    assert "README.md" in files
    problems = [
        f"{rel}: {problem}"
        for rel in files
        for problem in broken_links(PROJECT_DIR / rel, PROJECT_DIR)
    ]
    assert not problems, "\n".join(problems)


def test_the_link_checker_finds_bad_links(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "good.md").write_text("# A title\n\n## Data: in, out (v2)\n")
    (tmp_path / "outside.md").write_text("# x\n")  # exists, but outside the root
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "[ok](good.md) [ok](good.md#a-title) [ok](good.md#data-in-out-v2) [ok](#here)\n"
        "[web](https://example.org/missing.md) `[code](missing.md)`\n"
        "```\n[fenced](missing.md)\n```\n"
        "# Here\n"
        "[gone](missing.md) [anchor](good.md#no-such-heading) [up](../outside.md)\n"
        "[ref]: ./also-missing.md\n"
        "[^note]: a footnote, not a link\n"
    )
    assert broken_links(page, tmp_path / "docs") == [
        "missing.md: no such file",
        "good.md#no-such-heading: no heading #no-such-heading in good.md",
        "../outside.md: outside the project",
        "./also-missing.md: no such file",
    ]
    (tmp_path / "docs" / "missing.md").write_text("")
    assert "missing.md: no such file" not in broken_links(page, tmp_path / "docs")


def test_anchors_follow_github() -> None:
    text = (
        "# Retrieval: BM25, dense encoders, RG- and RGFT-retrievers\n## Results (`cpu` profile)\n"
    )
    text += "## Results (`cpu` profile)\n```\n# not a heading\n```\n"
    assert anchors(text) == {
        "retrieval-bm25-dense-encoders-rg--and-rgft-retrievers",
        "results-cpu-profile",
        "results-cpu-profile-1",
    }
