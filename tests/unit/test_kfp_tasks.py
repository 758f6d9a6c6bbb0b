"""The tokens that carry dvc.lock entries between the Kubeflow pipeline's tasks, and `collect`'s
refusal to write a run made with other params into the project. The graph the compiler reads,
`prepare`, `run_stage` and `collect` on the project: tests/pipeline/test_kfp_run_state.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rulerag.orchestration.kfp_tasks import (
    StateError,
    collect,
    pack_entries,
    params_disagreeing,
    unpack_entries,
)

ENTRY = {
    "cmd": "python -m pipeline_steps.ingest",
    "params": {"params.yaml": {"ingest": {"duplicates": "keep", "note": 'a "quoted" {value}'}}},
    "outs": [{"path": "data/icews14/kg", "hash": "md5", "md5": "0123abcd.dir", "size": 12}],
}


def test_tokens_carry_entries_as_plain_words() -> None:
    """KFP pastes a token into strings (kfp.local: into the JSON it hands the executor), so a
    token holds no quote, brace, backslash or space; several join with spaces."""
    first = pack_entries({"ingest@icews14": ENTRY})
    second = pack_entries({"ingest@wiki": {**ENTRY, "cmd": "other"}})
    for token in (first, second):
        assert not set(token) & set("\"'{}\\ \n"), token
    assert pack_entries({}) == ""
    both = unpack_entries(f"{first}  {second} ")
    assert both == {"ingest@icews14": ENTRY, "ingest@wiki": {**ENTRY, "cmd": "other"}}
    assert unpack_entries("") == {}
    with pytest.raises(StateError, match="not a dvc.lock entry token"):
        unpack_entries("{{$.inputs.parameters['x']}}")
    with pytest.raises(StateError, match="does not decode"):
        unpack_entries(first[:-5])


def _run_state(state: Path, duplicates: str) -> None:
    """The state folder `prepare` writes, by hand: the run, and the run's params.yaml."""
    state.mkdir(parents=True)
    run = {"run_id": "123", "commit": "0" * 40, "datasets": ["icews14"], "stages": None,
           "params": {"ingest.duplicates": duplicates}, "selected": ["ingest@icews14"]}  # fmt: skip
    (state / "run.json").write_text(json.dumps(run), encoding="utf-8")
    (state / "params.yaml").write_text(f"ingest:\n  duplicates: {duplicates}\n", encoding="utf-8")


def test_a_run_with_other_params_is_not_collected_into_the_project(tmp_path: Path) -> None:
    """`kfp run-local --param ingest.duplicates=keep` used to write its entry (params
    `ingest: {duplicates: keep}`) into the project's dvc.lock beside a params.yaml that says
    `drop`: `dvc status` then reported ingest@icews14's params modified, without a word. The
    run's lock stays in its artifact, which the summary names, and the summary says why."""
    project, state, link = tmp_path / "project", tmp_path / "state", tmp_path / "link"
    project.mkdir()
    (project / "dvc.yaml").write_text("stages: {}\n", encoding="utf-8")
    (project / "params.yaml").write_text("ingest:\n  duplicates: drop\n", encoding="utf-8")
    _run_state(state, "keep")
    entry = {**ENTRY, "params": {"params.yaml": {"ingest": {"duplicates": "keep"}}}}
    summary = collect(tokens=pack_entries({"ingest@icews14": entry}), state_dir=state,
                      previous_dir=state, lock_dir=link, into_project=True, project=project,
                      env={}, echo=lambda line: None)  # fmt: skip
    assert not (project / "dvc.lock").exists()
    assert summary["ran"] == ["ingest@icews14"] and summary["collected"] == []
    assert "ingest@icews14: ingest" in summary["kept_out"]
    assert summary["lock"] == str((link / "dvc.lock").resolve())
    assert summary["params"] == str((state / "params.yaml").resolve())
    assert "duplicates: keep" in Path(summary["lock"]).read_text(encoding="utf-8")


def test_params_disagreeing_reads_dvc_locks_keys(tmp_path: Path) -> None:
    """Whole sections and dotted keys, as DVC records a stage's `params:`; an entry made with
    the project's values agrees (collected as before), one missing from params.yaml does not."""
    (tmp_path / "params.yaml").write_text(
        "ingest:\n  duplicates: drop\ngrid:\n  - k: 3\n", encoding="utf-8"
    )
    same = {"params": {"params.yaml": {"ingest": {"duplicates": "drop"}, "grid.0.k": 3}}}
    other = {"params": {"params.yaml": {"ingest.duplicates": "keep", "grid.0.k": 3}}}
    gone = {"params": {"params.yaml": {"ingest.nope": 1}}}
    entries = {"a@x": same, "b@x": other, "c@x": gone, "d@x": {"cmd": "true"}}
    assert params_disagreeing(tmp_path, entries) == {
        "b@x": ["ingest.duplicates"],
        "c@x": ["ingest.nope"],
    }
