"""Run-conf validation and its comment-preserving, atomic application to params.yaml.

A DAG run's conf is user input that lands in params.yaml and, through DVC, in shell commands,
so the rejections matter as much as the happy path.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from rulerag.orchestration.dvc_graph import cmd_param_keys
from rulerag.orchestration.run_conf import (
    RunConf,
    apply_run_conf,
    did_you_mean,
    overridable_keys,
    set_params,
    validate_run_conf,
)
from rulerag.params import read_params_file
from tests.helpers import KNOWN_DATASETS, PROJECT

PARAMS_TEXT = """\
# Top comment: every knob of every stage.

# Datasets that `dvc repro` builds.
datasets:
  - icews14

# Stage `ingest`: read a KG.
ingest:
  # Exact duplicate facts: drop, keep or error.
  duplicates: drop   # the default
  # Which source format, by dataset name.
  source: {}
  custom: {}
train:
  lr: 0.001
  layers: [64, 32]
  name: "quoted"
"""


@pytest.fixture
def params_file(tmp_path: Path) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(PARAMS_TEXT, encoding="utf-8")
    return path


def validate(conf: Any, params: dict[str, Any] | None = None, **kwargs: Any) -> RunConf:
    kwargs.setdefault("check", None)  # PARAMS_TEXT is not the project's schema
    return validate_run_conf(conf, params or load_params_text(), KNOWN_DATASETS, **kwargs)


def load_params_text() -> dict[str, Any]:
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load(PARAMS_TEXT)


def test_empty_conf_is_a_no_op(params_file: Path) -> None:
    for conf in (None, {}, {"datasets": None, "params": {}}):
        run_conf = validate(conf)
        assert run_conf.is_empty
        assert apply_run_conf(params_file, run_conf) is False
    assert params_file.read_text(encoding="utf-8") == PARAMS_TEXT


def test_valid_conf() -> None:
    run_conf = validate(
        {
            "datasets": ["nell995", "icews14"],
            "params": {"ingest.duplicates": "error", "ingest.source": {"icews14": "xerte"}},
        }
    )
    # order kept (a repeated name is refused: test_hostile_round3_inputs)
    assert run_conf.datasets == ("nell995", "icews14")
    assert run_conf.params == {"ingest.duplicates": "error", "ingest.source": {"icews14": "xerte"}}
    assert not run_conf.is_empty


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        (["icews14"], "must be a JSON object"),
        ({"dataset": ["icews14"]}, "unknown key"),
        ({"datasets": "icews14"}, "non-empty list"),
        ({"datasets": []}, "non-empty list"),
        ({"datasets": ["icews14; rm -rf /"]}, "invalid dataset name"),
        ({"datasets": ["$(reboot)"]}, "invalid dataset name"),
        ({"datasets": ["../etc"]}, "invalid dataset name"),
        ({"datasets": [3]}, "invalid dataset name"),
        ({"datasets": ["mykg"]}, "unknown dataset 'mykg'"),
        ({"params": ["ingest.duplicates=error"]}, "must be an object"),
        ({"params": {"ingest.nope": 1}}, "unknown key 'ingest.nope'"),
        ({"params": {"nope": 1}}, "unknown key 'nope'"),
        ({"params": {"ingest..duplicates": "x"}}, "invalid key"),
        ({"params": {"ingest.duplicates; rm -rf /": "x"}}, "invalid key"),
        ({"params": {"__import__('os')": "x"}}, "invalid key"),
        ({"params": {"datasets": ["wiki"]}}, "datasets"),
        ({"params": {"ingest": "x"}}, "is a section"),
        ({"params": {"ingest": {"duplicates": "error"}}}, "is a section"),
        ({"params": {"ingest.duplicates": object()}}, "got object"),
        ({"params": {"ingest.duplicates": {"a": {"b": 1}}}}, "mapping values"),
        ({"params": {"ingest.duplicates": [[1]]}}, "list entries"),
        ({"params": {"ingest.duplicates": {1: "a"}}}, "invalid mapping key"),
        ({"params": {"train.lr": float("nan")}}, "got float"),
        ({"params": {"train.layers": [1], "train.layers.0": 2}}, "overlap"),
    ],
)
def test_bad_conf_is_rejected(conf: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate(conf)


def test_values_reaching_a_shell_command_must_be_plain(tmp_path: Path) -> None:
    dvc = tmp_path / "dvc.yaml"
    dvc.write_text("stages:\n  s:\n    cmd: ingest --mode ${ingest.duplicates}\n", encoding="utf-8")
    keys = cmd_param_keys(dvc)
    with pytest.raises(ValueError, match="reaches a stage command"):
        validate({"params": {"ingest.duplicates": "drop; rm -rf /"}}, cmd_keys=keys)
    # Plain values are fine, and keys that never reach a command may hold any text.
    assert validate({"params": {"ingest.duplicates": "error"}}, cmd_keys=keys).params
    assert validate({"params": {"train.name": "a b; c"}}, cmd_keys=keys).params


def test_project_params_accept_the_documented_example() -> None:
    params = read_params_file(PROJECT / "params.yaml")
    keys = cmd_param_keys(PROJECT / "dvc.yaml")
    run_conf = validate_run_conf(
        {"datasets": ["icews14"], "params": {"ingest.duplicates": "error"}},
        params,
        KNOWN_DATASETS,
        keys,
    )
    assert run_conf.datasets == ("icews14",)


def test_apply_preserves_comments_and_layout(params_file: Path) -> None:
    run_conf = validate(
        {
            "datasets": ["nell995", "wiki"],
            "params": {
                "ingest.duplicates": "error",
                "ingest.source": {"icews14": "xerte"},
                "train.layers.1": 8,
            },
        }
    )
    assert apply_run_conf(params_file, run_conf) is True
    text = params_file.read_text(encoding="utf-8")
    for line in PARAMS_TEXT.splitlines():
        if line.lstrip().startswith("#"):
            assert line in text, f"comment lost: {line!r}"
    assert "datasets:\n  - nell995\n  - wiki\n\n# Stage `ingest`" in text
    assert re.search(r"\n  duplicates: error +# the default\n", text)
    assert "  layers: [64, 8]\n" in text  # flow style kept
    assert 'name: "quoted"' in text
    assert read_params_file(params_file) == set_params(load_params_text(), run_conf)
    assert read_params_file(params_file)["train"]["layers"] == [64, 8]


def test_apply_then_revert_restores_the_exact_file(params_file: Path) -> None:
    apply_run_conf(
        params_file,
        validate({"datasets": ["wiki", "yago"], "params": {"ingest.source": {"wiki": "x"}}}),
    )
    apply_run_conf(
        params_file, validate({"datasets": ["icews14"], "params": {"ingest.source": {}}})
    )
    assert params_file.read_text(encoding="utf-8") == PARAMS_TEXT


def test_apply_on_project_params_only_changes_the_selected_lines(tmp_path: Path) -> None:
    target = tmp_path / "params.yaml"
    shutil.copy(PROJECT / "params.yaml", target)
    before = target.read_text(encoding="utf-8").splitlines()
    conf = validate_run_conf(
        {"datasets": ["nell995"], "params": {"ingest.duplicates": "keep"}},
        read_params_file(target),
        KNOWN_DATASETS,
    )
    apply_run_conf(target, conf)
    after = target.read_text(encoding="utf-8").splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert [b.strip() for _, b in changed] == ["- nell995", "duplicates: keep"]


def test_apply_is_atomic(params_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    os.chmod(params_file, 0o640)

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        apply_run_conf(params_file, validate({"datasets": ["wiki"]}))
    assert params_file.read_text(encoding="utf-8") == PARAMS_TEXT
    assert sorted(p.name for p in params_file.parent.iterdir()) == ["params.yaml"]

    monkeypatch.undo()
    apply_run_conf(params_file, validate({"datasets": ["wiki"]}))
    assert stat.S_IMODE(params_file.stat().st_mode) == 0o640
    assert sorted(p.name for p in params_file.parent.iterdir()) == ["params.yaml"]
    assert read_params_file(params_file)["datasets"] == ["wiki"]


def test_applying_the_same_conf_twice_is_idempotent(params_file: Path) -> None:
    run_conf = validate({"datasets": ["wiki"], "params": {"ingest.duplicates": "keep"}})
    assert apply_run_conf(params_file, run_conf) is True
    once = params_file.read_text(encoding="utf-8")
    assert apply_run_conf(params_file, run_conf) is False
    assert params_file.read_text(encoding="utf-8") == once


def test_stages_conf_is_checked_against_dvc_yaml():
    params = {"datasets": ["icews14"]}
    names = ["ingest", "mine_rules", "retrieve"]
    conf = validate_run_conf({"stages": ["ingest", "ingest"]}, params, ["icews14"], (), names)
    assert conf.stages == ("ingest",) and conf.is_empty  # params.yaml is left alone
    with pytest.raises(ValueError, match="unknown stage"):
        validate_run_conf({"stages": ["train"]}, params, ["icews14"], (), names)
    with pytest.raises(ValueError, match="non-empty list"):
        validate_run_conf({"stages": "ingest"}, params, ["icews14"], (), names)
    assert validate_run_conf({}, params, ["icews14"], (), names).stages is None


def test_force_conf_names_dvc_yaml_stages_too():
    """`force`: the stages whose instances run with `dvc repro --force`, checked as `stages`
    (a list of dvc.yaml's names), empty when absent; params.yaml is left alone."""
    params = {"datasets": ["icews14"]}
    names = ["ingest", "mine_rules"]
    conf = validate_run_conf({"force": ["ingest"]}, params, ["icews14"], (), names)
    assert conf.force == ("ingest",) and conf.stages is None and conf.is_empty
    assert validate_run_conf({}, params, ["icews14"], (), names).force == ()
    with pytest.raises(ValueError, match=r"run conf force: unknown stage 'train'"):
        validate_run_conf({"force": ["train"]}, params, ["icews14"], (), names)
    with pytest.raises(ValueError, match='"force" must be a non-empty list'):
        validate_run_conf({"force": "ingest"}, params, ["icews14"], (), names)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"retrieve.top_k": "three"}, r"retrieve\.top_k: Input should be a valid integer"),
        ({"retrieve.top_k": 10**100}, r"retrieve\.top_k: Input should be less than"),
        ({"build_benchmark.test_size": -5}, r"build_benchmark\.test_size"),
        ({"mine_rules.bank.top_n_per_head": [1, 2]}, r"mine_rules\.bank\.top_n_per_head"),
        ({"generation.model": "x" * 1_000_000}, r"1,000,000 characters; at most 4,096"),
    ],
)
def test_conf_values_are_checked_by_the_stages_schema(
    override: dict[str, Any], message: str
) -> None:
    """The conf used to accept any YAML scalar; now the params.yaml it would produce must load
    with the stages' own settings classes."""
    params = read_params_file(PROJECT / "params.yaml")
    with pytest.raises(ValueError, match=message):
        validate_run_conf({"params": override}, params, KNOWN_DATASETS)
    assert validate_run_conf({"params": {"retrieve.top_k": 20}}, params, KNOWN_DATASETS).params


def test_a_mapping_that_would_drop_sibling_keys_is_refused(params_file: Path) -> None:
    """{"mine_rules.bank": {"top_n_per_head": 2}} used to replace the section, deleting its
    other keys from params.yaml; a mapping may now only keep or add keys (a section holding
    sections, like mine_rules.static, is refused as a whole)."""
    params = read_params_file(PROJECT / "params.yaml")
    with pytest.raises(ValueError, match=r"'mine_rules\.bank' would drop 'lengths'"):
        validate_run_conf(
            {"params": {"mine_rules.bank": {"top_n_per_head": 2}}}, params, KNOWN_DATASETS
        )
    with pytest.raises(ValueError, match=r"'mine_rules\.static' is a section of params\.yaml"):
        validate_run_conf(
            {"params": {"mine_rules.static": {"max_atoms": 2}}}, params, KNOWN_DATASETS
        )
    ok = validate_run_conf({"params": {"mine_rules.static.max_atoms": 2}}, params, KNOWN_DATASETS)
    assert ok.params == {"mine_rules.static.max_atoms": 2}


def test_every_problem_of_a_conf_is_reported_at_once() -> None:
    """The issue's form entry named only its first bad override: both are named now, across
    sections and beside the conf's other problems."""
    params = read_params_file(PROJECT / "params.yaml")
    two = {"params": {"ingest.duplicates": 5, "generation.test_queries": -3}}
    with pytest.raises(ValueError) as caught:
        validate_run_conf(two, params, KNOWN_DATASETS)
    assert "ingest.duplicates" in str(caught.value)
    assert "generation.test_queries" in str(caught.value)

    many = {
        "datasets": ["nope"],
        "stages": ["ingest", "no_such_stage"],
        "params": {"ingest.duplicatez": "drop", "generation.test_queries": -3},
        "extra": 1,
    }
    with pytest.raises(ValueError) as caught:
        validate_run_conf(many, params, KNOWN_DATASETS, stage_names=["ingest"])
    message = str(caught.value)
    assert message.startswith("run conf: 5 problems:\n")
    for part in ("'extra'", "'nope'", "'ingest.duplicatez'", "'no_such_stage'", "test_queries"):
        assert part in message
    assert "datasets must be a non-empty list" not in message  # params.yaml's datasets stand


def test_overridable_keys_are_params_keys_less_the_protected_ones():
    keys = overridable_keys(read_params_file(PROJECT / "params.yaml"))
    assert "ingest.duplicates" in keys and "generation.test_queries" in keys
    assert "generation.api.model" in keys and "generation.api" not in keys  # a parent of one
    assert "datasets" not in keys and "generation.api.base_url" not in keys
    assert len(keys) == len(set(keys))


def test_a_mistyped_conf_hears_every_problem_at_once_with_suggestions():
    """What the trigger form's schema used to catch (a 400 listing params.yaml's ~400 keys,
    no suggestion, the first problem only) is apply_conf's now: every problem in one message,
    a close known name suggested for each misspelt one, a rule between sections beside them."""
    params = read_params_file(PROJECT / "params.yaml")
    conf = {
        "datasets": ["icews15"],
        "stages": ["ingset"],
        "force": ["mine_ruls"],
        "param": {},
        "params": {"ingest.duplicate": "error", "generation.max_rules": 9},
    }
    with pytest.raises(ValueError) as caught:
        validate_run_conf(
            conf, params, KNOWN_DATASETS, stage_names=["ingest", "mine_rules", "report"]
        )
    lines = str(caught.value).splitlines()
    assert lines[0] == "run conf: 6 problems:"
    expected = [
        "unknown key 'param'; did you mean 'params'?",
        "unknown dataset 'icews15'; did you mean 'icews14'?",
        "unknown key 'ingest.duplicate'; did you mean 'ingest.duplicates'?",
        "unknown stage 'ingset'; did you mean 'ingest'?",
        "unknown stage 'mine_ruls'; did you mean 'mine_rules'?",
        "generation.max_rules is 9, but the benchmark selects at most",
    ]
    for part, line in zip(expected, lines[1:], strict=True):
        assert part in line, (part, line)
    # nothing close, no guess
    assert did_you_mean("zzzz", ["ingest", "report"]) == ""
