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

from rulerag.orchestration import project_copy

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
        return project_copy.project_files()
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


# --- the front door -------------------------------------------------------------------------

#: the README's budget: a front door a newcomer reads in five minutes (issue 27)
README_MAX_LINES = 250
_FENCE_OPEN = re.compile(r"^(```|~~~)")


def readme_text() -> str:
    return (PROJECT_DIR / "README.md").read_text(encoding="utf-8")


def dvc_stage_names(dvc_yaml: Path) -> list[str]:
    from rulerag.orchestration.dvc_graph import load_yaml

    return list(load_yaml(dvc_yaml)["stages"])


def unnamed_stages(readme: str, stages: Iterable[str]) -> list[str]:
    """The stages the README does not name as code (`` `generate` ``), in dvc.yaml's order."""
    return [name for name in stages if f"`{name}`" not in readme]


def first_commands(markdown: str) -> list[str]:
    """The commands of the first fenced code block, comments dropped."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if _FENCE_OPEN.match(line))
    end = next(i for i in range(start + 1, len(lines)) if _FENCE_OPEN.match(lines[i]))
    return [line.split("#", 1)[0].strip() for line in lines[start + 1 : end] if line.strip()]


def test_the_readme_is_a_front_door_of_at_most_250_lines() -> None:
    count = len(readme_text().splitlines())
    assert count <= README_MAX_LINES, f"README.md has {count} lines; move details into docs/"


def test_the_readme_names_every_dvc_stage() -> None:
    stages = dvc_stage_names(PROJECT_DIR / "dvc.yaml")
    assert len(stages) >= 18
    assert unnamed_stages(readme_text(), stages) == []


def test_the_stage_check_finds_a_stage_added_to_dvc_yaml(tmp_path: Path) -> None:
    text = (PROJECT_DIR / "dvc.yaml").read_text(encoding="utf-8")
    added = text.replace("stages:\n", "stages:\n  brand_new_stage:\n    cmd: echo new\n", 1)
    assert added != text
    (tmp_path / "dvc.yaml").write_text(added, encoding="utf-8")
    stages = dvc_stage_names(tmp_path / "dvc.yaml")
    assert unnamed_stages(readme_text(), stages) == ["brand_new_stage"]
    assert unnamed_stages(readme_text().replace("`qa_rag`", "qa_rag"), stages) == [
        "brand_new_stage",
        "qa_rag",
    ]


def test_the_readme_opens_with_the_two_commands() -> None:
    """`make run` and `make test` are the first thing a newcomer can copy (and what CI runs)."""
    assert first_commands(readme_text())[:2] == ["make run", "make test"]


def test_the_docs_pages_exist_and_the_readme_links_each() -> None:
    pages = sorted(p.name for p in (PROJECT_DIR / "docs").glob("*.md"))
    for page in ("results.md", "datasets.md", "experiments.md", "operations.md", "data-flow.md"):
        assert page in pages
    readme = readme_text()
    assert [p for p in pages if f"](docs/{p})" not in readme] == []


# --- figures name their command -------------------------------------------------------------

#: The docs' convention (docs/results.md, "How to read this page"): every Markdown table with a
#: figure in it is preceded, after the previous heading or table, by one line
#: Command: `<command>` · Measured: <YYYY-MM-DD>, commit `<id>`
PROVENANCE = re.compile(
    r"^Command: `[^`]+`.*Measured: (?P<date>\d{4}-\d{2}-\d{2})"
    r".*?commit `(?P<commit>[0-9a-f]{7,40})`"
)
_SEPARATOR = re.compile(r"^\|\s*:?-{3,}")
_HEADING_LINE = re.compile(r"^\s{0,3}#{1,6}\s")


def cites_a_figure(cell: str) -> bool:
    """A cell holds a figure when, markup aside, it has a digit and no letter (`43.4`,
    `0 / 3.6`, `501 (557)`, `+12`, `3.96 → 3.27`; not `lengths 1–3` or `R1`)."""
    text = re.sub(r"[*`]", "", cell)
    return bool(re.search(r"\d", text)) and not re.search(r"[^\W\d_]", text)


def unsourced_tables(markdown: str) -> list[str]:
    """The figure tables of a Markdown text without a provenance line since the previous
    heading or table, each described by its line number and header."""
    lines = markdown.splitlines()
    problems = []
    boundary = 0  # the line after the last heading or table
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE_OPEN.match(line):
            fenced = not fenced
        elif not fenced and _HEADING_LINE.match(line):
            boundary = i + 1
        elif (
            not fenced
            and line.startswith("|")
            and i + 1 < len(lines)
            and _SEPARATOR.match(lines[i + 1])
        ):
            end = i + 2
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            cells = [c for row in lines[i + 2 : end] for c in row.strip().strip("|").split("|")]
            if any(cites_a_figure(c) for c in cells) and not any(
                PROVENANCE.match(text) for text in lines[boundary:i]
            ):
                problems.append(f"line {i + 1}: {line[:70]}")
            boundary, i = end, end
            continue
        i += 1
    return problems


def documentation_pages() -> list[Path]:
    return [PROJECT_DIR / "README.md", *sorted((PROJECT_DIR / "docs").glob("*.md"))]


def test_every_figure_table_names_its_command_date_and_commit() -> None:
    problems = [
        f"{page.relative_to(PROJECT_DIR)} {problem}"
        for page in documentation_pages()
        for problem in unsourced_tables(page.read_text(encoding="utf-8"))
    ]
    assert not problems, "add a `Command: ... · Measured: ...` line:\n" + "\n".join(problems)


def test_the_results_page_has_sourced_tables() -> None:
    """Not vacuous: the results page holds figure tables, and each has its line."""
    text = (PROJECT_DIR / "docs" / "results.md").read_text(encoding="utf-8")
    assert len([line for line in text.splitlines() if PROVENANCE.match(line)]) >= 20


def test_the_provenance_check_finds_a_table_without_its_line() -> None:
    sourced = "Command: `make run` · Measured: 2026-11-26, commit `5095aa7`"
    page = (
        "# Results\n\n## Sourced\n\n" + sourced + "\n\n| row | EM |\n|---|---:|\n| a | 17.0 |\n\n"
        "## Words only\n\n| stage | what |\n|---|---|\n| `ingest` | reads 3 files |\n\n"
        "## Second table under a line that served the first\n\n" + sourced + "\n\n"
        "| a | b |\n|---|---|\n| x | 1 / 2 |\n\n| c | d |\n|---|---|\n| y | 0.43 |\n\n"
        "## No date\n\nCommand: `make run`\n\n| a |\n|---|\n| 41.1 |\n\n"
        "```\n| in | code |\n|---|---|\n| 1 | 2 |\n```\n"
    )
    problems = unsourced_tables(page)
    assert [p.split(":")[0] for p in problems] == ["line 25", "line 33"]
    assert cites_a_figure("**+12**") and cites_a_figure("21 / 3, < 0.001")
    assert not cites_a_figure("`R1`") and not cites_a_figure("p < 0.001")


def test_every_cited_commit_is_in_the_history() -> None:
    """A `commit <id>` in a provenance line names a commit of this repository."""
    try:
        shallow = subprocess.run(
            ["git", "rev-parse", "--is-shallow-repository"],
            cwd=PROJECT_DIR, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    if shallow == "true":
        pytest.skip("a shallow clone lacks the older commits")
    cited = {
        m.group("commit")
        for page in documentation_pages()
        for line in page.read_text(encoding="utf-8").splitlines()
        if (m := PROVENANCE.match(line))
    }
    cited |= {
        c
        for page in documentation_pages()
        for c in re.findall(r"commit `([0-9a-f]{7,40})`", page.read_text(encoding="utf-8"))
    }
    unknown = [
        c
        for c in sorted(cited)
        if subprocess.run(
            ["git", "cat-file", "-e", f"{c}^{{commit}}"], cwd=PROJECT_DIR, capture_output=True
        ).returncode
    ]
    assert cited and not unknown, f"no such commit: {unknown}"


# --- generated blocks -----------------------------------------------------------------------


def test_the_data_flow_diagram_is_what_dvc_dag_prints() -> None:
    from docs import generate

    try:
        generate.dvc_command()
    except FileNotFoundError as error:
        pytest.skip(f"needs DVC: {error}")
    text = (PROJECT_DIR / "docs" / "data-flow.md").read_text(encoding="utf-8")
    assert generate.block_body(text, generate.DAG_KEY) == generate.stage_diagram(PROJECT_DIR), (
        "docs/data-flow.md's diagram is stale: run `python docs/generate.py dag`"
    )


def test_the_data_flow_diagram_shows_every_stage() -> None:
    from docs import generate

    diagram = generate.block_body(
        (PROJECT_DIR / "docs" / "data-flow.md").read_text(encoding="utf-8"), generate.DAG_KEY
    )
    shown = set(re.findall(r"^\s+(\w+) --> (\w+)$", diagram, re.MULTILINE))
    nodes = {name for edge in shown for name in edge}
    assert nodes == set(dvc_stage_names(PROJECT_DIR / "dvc.yaml"))


def test_dvc_dag_instances_fold_into_stages() -> None:
    from docs import generate

    printed = (
        "flowchart TD\n"
        '\tnode1["build_benchmark@icews14"]\n'
        '\tnode2["generate@icews14-rulerag_ft"]\n'
        '\tnode3["generate@icews14-symbolic"]\n'
        '\tnode4["report@icews14"]\n'
        '\tnode5["generate@icews14-fake"]\n'
        "\tnode1-->node2\n\tnode1-->node3\n\tnode2-->node4\n\tnode3-->node4\n\tnode2-->node5\n"
    )
    edges = generate.stage_edges(printed)
    assert edges == {("build_benchmark", "generate"), ("generate", "report")}
    assert generate.mermaid_diagram(edges, ["build_benchmark", "generate", "report"]) == (
        "```mermaid\nflowchart TD\n  build_benchmark --> generate\n  generate --> report\n```\n"
    )
    with pytest.raises(ValueError, match="unknown node"):
        generate.stage_edges(printed + "\tnode1-->node9\n")


def test_every_generated_block_names_a_stage_output() -> None:
    """Each results block's key is a file some dvc.yaml stage writes, with a renderer."""
    import yaml

    from docs import generate

    dvc_yaml = yaml.safe_load((PROJECT_DIR / "dvc.yaml").read_text(encoding="utf-8"))
    keys = [
        key
        for page in (PROJECT_DIR / "README.md", PROJECT_DIR / "docs" / "results.md")
        for key in generate.block_keys(page.read_text(encoding="utf-8"))
    ]
    assert "icews14/report/results.md" in keys and "icews14/report/results.csv" in keys
    for key in keys:
        generate.stage_writing(key, dvc_yaml)  # KeyError: no stage writes it
        assert key.endswith((".md", "/benchmark/stats.json", "/rules/stats.json", "results.csv"))


def test_results_blocks_render_from_stage_outputs(tmp_path: Path) -> None:
    import yaml

    from docs import generate
    from rulerag.layout import DataLayout

    layout = DataLayout.of(tmp_path, "icews14")
    report = layout.report
    report.mkdir(parents=True)
    (report / "results.md").write_text(
        "# icews14: RuleRAG result grid\n\n| group | EM |\n|---|---:|\n| Standard RAG | 0.0 |\n\n"
        "- profile `cpu`\n\n## The paper's claims, paired on the same queries\n\n"
        "| claim | p |\n|---|---:|\n| FT above RAG | <0.001 |\n"
    )
    (report / "results.csv").write_text(
        "group,configuration,config,queries,R@10,EM,T-F1,paper R@10,paper EM,paper T-F1\n"
        "RuleRAG-FT,RGFT-retriever + RGFT-generator,rulerag_ft,100,46.0,17.0,31.4,45.1,20.5,38.9\n"
        "Rules alone,applied rules' best candidate (no LM),symbolic,100,,35.0,42.3,,,\n"
    )
    layout.benchmark.mkdir()
    (layout.benchmark / "stats.json").write_text(
        '{"rules": 501, "corpus": 63685, "f_r": 6875, "f_g": 6126, "test": 1559,'
        ' "paper": {"rules": 557, "corpus": 77508, "f_r": 6594, "f_g": 7440, "test": 1559}}'
    )
    page = (
        "# Results\n\nintro stays\n\n## Grid\n\n<!-- generated:icews14/report/results.md -->\n"
        "old\n<!-- /generated -->\n\n<!-- generated:icews14/report/results.csv -->\n"
        "<!-- /generated -->\n\n<!-- generated:icews14/benchmark/stats.json -->\n"
        "<!-- /generated -->\n\n<!-- generated:icews14/rule_retrieval/results.md -->\n"
        "kept\n<!-- /generated -->\ntail stays\n"
    )
    dvc_yaml = yaml.safe_load((PROJECT_DIR / "dvc.yaml").read_text(encoding="utf-8"))
    provenance = generate.Provenance("make run", "4d878f3")
    new, kept = generate.render_results(page, tmp_path, provenance, dvc_yaml)
    assert kept == ["icews14/rule_retrieval/results.md"]
    assert new.startswith("# Results\n\nintro stays\n") and new.endswith(
        "kept\n<!-- /generated -->\ntail stays\n"
    )
    grid = generate.block_body(new, "icews14/report/results.md")
    assert "RuleRAG result grid" not in grid and "old" not in grid
    assert "**The paper's claims, paired on the same queries**" in grid
    stamps = [line for line in grid.splitlines() if PROVENANCE.match(line)]
    assert len(stamps) == 2 and "(stage `report@icews14`)" in stamps[0]
    assert "commit `4d878f3`" in stamps[0]
    assert (
        "| RuleRAG-FT: RGFT-retriever + RGFT-generator | 46.0 | 17.0 | 31.4 | 45.1 / 20.5 / 38.9 |"
        in new
    )
    assert (
        "| Rules alone: applied rules' best candidate (no LM) | – | 35.0 | 42.3 | – / – / – |"
        in new
    )
    assert "| icews14 (paper) | 501 (557) | 63,685 (77,508) | 6,875 (6,594) |" in new
    assert unsourced_tables(new) == []
    again, _ = generate.render_results(new, tmp_path, provenance, dvc_yaml)
    assert again == new  # rendering is idempotent
    with pytest.raises(KeyError, match="no stage of dvc.yaml writes"):
        generate.stage_writing("icews14/report/nowhere.md", dvc_yaml)


def test_the_mining_table_renders_from_stats_without_a_timing() -> None:
    """rules/stats.json holds no mining time any more (a rerun rewrites the same bytes): the
    table has no seconds column rather than a column of dashes."""
    from docs import generate

    stats = {
        "miner": "temporal",
        "rules": 24025,
        "rules_by_length": {"1": 5007, "2": 7291, "3": 11727},
        "bank": 501,
        "paper_bank_size": 557,
        "relations_covered": 161,
        "relations_with_facts": 222,
    }
    table = generate.mining_summary(stats, "icews14")
    assert "seconds" not in table and "–" not in table
    assert table.splitlines()[-1] == (
        "| icews14 | temporal | 24,025 (1 atom: 5,007; 2 atoms: 7,291; 3 atoms: 11,727) | "
        "501 (557) | 161 of 222 |"
    )
    assert table in (PROJECT_DIR / "docs" / "results.md").read_text(encoding="utf-8")
