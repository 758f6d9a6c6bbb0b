"""RuleBench's own files (../shared/rulebench, read in place): a set without training rules
still evaluates with held-out test shots, ulogic-cf's doubly listed ids load once, and the
default analysis of the English sets is Pyserini's (issue 28, part 7)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from rulerag.rule_retrieval.experiment import library_analysis
from rulerag.rule_retrieval.library import RuleLibrary
from rulerag.rule_retrieval.rulebench import load_set, rulebench_task
from rulerag.orchestration.project_copy import kg_mirror_dir

pytestmark = pytest.mark.data


@pytest.fixture(scope="module")
def rulebench() -> Path:
    root = kg_mirror_dir().parent / "rulebench"
    if not root.is_dir():
        pytest.skip("no ../shared/rulebench")
    return root


def test_ulogic_with_an_empty_train_rule_file_takes_held_out_test_shots(
    rulebench: Path, tmp_path: Path
) -> None:
    """ULogic's files linked into a set whose `train_rule.json` is `{}` (as RuleBench ships
    some): every sampled query gets 3 shots, none showing its gold rule."""
    folder = tmp_path / "ulogic"
    folder.mkdir()
    for name in ("test_rule.json", "test_data.json", "train_data.json"):
        (folder / name).symlink_to(rulebench / "ulogic" / name)
    (folder / "train_rule.json").write_text("{}")
    task, questions = rulebench_task(tmp_path, "ulogic", 50, 3, 12, False)
    assert task.query_shots is not None and len(task.query_shots) == len(questions) == 50
    text = task.library.text_of()
    for question, shots in zip(questions, task.query_shots, strict=True):
        assert len(shots) == 3
        assert all(rule != text[question.gold[0]] for _, rule in shots)
        assert all(query != question.query for query, _ in shots)
    assert "train_rule.json is empty" in task.notes[0]


def test_ulogic_cf_lists_each_id_twice_and_loads_once(
    rulebench: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = rulebench / "ulogic-cf" / "test_rule.json"
    listed = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=len)
    with caplog.at_level(logging.WARNING):
        library = RuleLibrary.from_rulebench(path)
    assert listed == 2 * len(library) == 2 * 1046
    assert "1046 rule ids listed twice with the same rule, kept once" in caplog.text
    doubled, _ = load_set(rulebench, "ulogic", counterfactual=True)
    assert len(doubled) == 2 * 1046


@pytest.mark.parametrize("name", ["ulogic", "clutrr"])
def test_the_english_sets_are_searched_with_the_english_analysis(
    rulebench: Path, name: str
) -> None:
    library, _ = load_set(rulebench, name)
    analysis = library_analysis("auto", library)
    assert analysis.name == "english" and analysis.cjk_share == 0.0
