"""Stage instances in workspaces of their own over a local DVC remote: two instances run at the
same time, and the main workspace ends byte-identical to a serial ``dvc repro`` with a clean
``dvc status``.

A stand-in project (two chained ``foreach`` stages) keeps this fast; the stages record when
they start and end outside the project so the overlap is measured, not assumed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from rulerag.orchestration.dag_settings import DagSettings
from rulerag.orchestration.workspaces import (
    collect,
    head_commit,
    overlay_lock,
    push_outputs,
    read_lock_entries,
    run_in_workspace,
)
from tests.support.serial_compare import data_digests

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent

# `make` sleeps so that two instances overlap; its output depends only on the item and params
DVC_YAML = """\
stages:
  make:
    foreach: ${datasets}
    do:
      cmd: python make.py ${item}
      deps:
        - make.py
      params:
        - scale
      outs:
        - data/${item}/made.txt
  count:
    foreach: ${datasets}
    do:
      cmd: wc -c < data/${item}/made.txt > data/${item}/count.txt
      deps:
        - data/${item}/made.txt
      outs:
        - data/${item}/count.txt
"""

MAKE_PY = """\
import json, os, sys, time
import yaml
item = sys.argv[1]
log = os.environ["STAGE_TIMES"]
start = time.time()
time.sleep(3)
scale = yaml.safe_load(open("params.yaml"))["scale"]
os.makedirs(f"data/{item}", exist_ok=True)
with open(f"data/{item}/made.txt", "w") as f:
    f.write(item * scale)
span = {"item": item, "start": start, "end": time.time(), "cwd": os.getcwd()}
with open(log, "a") as f:
    f.write(json.dumps(span) + "\\n")
"""


def env_for(times: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", DVC_NO_ANALYTICS="1",
               STAGE_TIMES=str(times), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")  # fmt: skip
    return env


def sh(cmd: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{cmd}: {done.stdout}\n{done.stderr}"
    return done.stdout


def make_origin(root: Path, env: dict[str, str]) -> Path:
    """A git repository with the stand-in project and a local-path remote (relative to .dvc/,
    as `dvc remote add` writes a relative path)."""
    origin = root / "origin"
    origin.mkdir()
    (origin / "dvc.yaml").write_text(DVC_YAML)
    (origin / "make.py").write_text(MAKE_PY)
    (origin / "params.yaml").write_text("datasets: [a, b]\nscale: 3\n")
    sh("git init -q && dvc init -q && dvc remote add -d store ../../remote", origin, env)
    (origin / ".gitignore").write_text("/data\n")
    sh("git add -A && git commit -q -m project", origin, env)
    return origin


def test_two_instances_run_at_once_and_the_main_workspace_equals_a_serial_run(tmp_path) -> None:
    times = tmp_path / "times.jsonl"
    env = env_for(times)
    origin = make_origin(tmp_path, env)

    serial = tmp_path / "serial"
    sh(f"git clone -q {origin} {serial} && cd {serial} && dvc repro -q", tmp_path, env)
    want = data_digests(serial)
    assert set(want) == {f"data/{d}/{f}" for d in "ab" for f in ("made.txt", "count.txt")}
    times.unlink()

    main = tmp_path / "main"
    sh(f"git clone -q {origin} {main}", tmp_path, env)
    # deeper than the project, so that the remote's relative path resolves only if pinned
    settings = DagSettings(mode="workspaces", root=tmp_path / "ws" / "deep")
    commit = head_commit(main)
    params_text = (main / "params.yaml").read_text()
    push_outputs(main, settings, env)  # nothing to push yet: no dvc.lock
    entries: dict[str, object] = {}
    errors: list[BaseException] = []

    def task(name: str, upstream: list[str]) -> None:
        try:
            entries[name] = run_in_workspace(
                main, name, upstream, commit=commit, params_text=params_text, lock_text=None,
                entries={u: entries[u] for u in upstream}, settings=settings, env=env,
            )  # fmt: skip
        except BaseException as error:  # surfaced below, with the thread's name
            errors.append(error)

    first = [threading.Thread(target=task, args=(f"make@{d}", [])) for d in "ab"]
    for t in first:
        t.start()
    for t in first:
        t.join()
    assert not errors, errors
    spans = [json.loads(line) for line in times.read_text().splitlines()]
    assert {s["item"] for s in spans} == {"a", "b"}
    assert max(s["start"] for s in spans) < min(s["end"] for s in spans)  # they overlapped
    assert all(Path(s["cwd"]).parent == settings.root for s in spans)  # in workspaces
    assert len({s["cwd"] for s in spans}) == 2
    assert not list(settings.root.iterdir())  # removed afterwards

    second = [threading.Thread(target=task, args=(f"count@{d}", [f"make@{d}"])) for d in "ab"]
    for t in second:
        t.start()
    for t in second:
        t.join()
    assert not errors, errors
    assert len(times.read_text().splitlines()) == 2  # `count` pulled `make`'s outputs

    assert not (main / "data").exists()  # nothing reached the main workspace yet
    brought = collect(main, entries, settings, env)
    assert brought == ["count@a", "count@b", "make@a", "make@b"]
    assert data_digests(main) == want
    assert "up to date" in sh("dvc status", main, env).lower()
    assert set(read_lock_entries(main / "dvc.lock", brought)) == set(brought)

    # a second run with nothing changed: every instance is up to date in its workspace
    push_outputs(main, settings, env)
    lock_text = (main / "dvc.lock").read_text()
    common = {"commit": commit, "lock_text": lock_text, "entries": {}, "settings": settings}
    again = run_in_workspace(main, "make@a", [], params_text=params_text, env=env, **common)
    assert again == entries["make@a"]
    assert len(times.read_text().splitlines()) == 2  # not rerun

    # a changed param reruns it, and only the new entry differs
    changed = params_text.replace("scale: 3", "scale: 4")
    rerun = run_in_workspace(main, "make@a", [], params_text=changed, env=env, **common)
    assert rerun != entries["make@a"] and rerun["params"]["params.yaml"]["scale"] == 4


def test_a_failing_stage_names_itself_and_leaves_no_workspace(tmp_path) -> None:
    env = env_for(tmp_path / "times.jsonl")
    env.pop("STAGE_TIMES")  # make.py fails on the missing variable
    origin = make_origin(tmp_path, env)
    settings = DagSettings(mode="workspaces", root=tmp_path / "ws")
    with pytest.raises(RuntimeError, match=r"dvc repro --single-item make@a exited"):
        run_in_workspace(origin, "make@a", [], commit=head_commit(origin),
                         params_text=(origin / "params.yaml").read_text(), lock_text=None,
                         entries={}, settings=settings, env=env)  # fmt: skip
    assert not list((tmp_path / "ws").iterdir())


def test_lock_overlay_and_settings() -> None:
    base = textwrap.dedent("""\
        schema: '2.0'
        stages:
          make@a: {cmd: old}
          make@b: {cmd: kept}
        """)
    merged = overlay_lock(base, {"make@a": {"cmd": "new"}, "count@a": {"cmd": "c"}})
    import yaml

    data = yaml.safe_load(merged)
    assert data["schema"] == "2.0"
    assert data["stages"] == {"make@a": {"cmd": "new"}, "make@b": {"cmd": "kept"},
                              "count@a": {"cmd": "c"}}  # fmt: skip
    assert yaml.safe_load(overlay_lock(None, {"x": {}}))["stages"] == {"x": {}}
    with pytest.raises(ValueError, match="dvc.lock: not a dvc.lock"):
        overlay_lock("stages: [1, 2]", {})
    assert DagSettings.from_env({}) == DagSettings()
    got = DagSettings.from_env({"RULERAG_DAG_MODE": "workspaces",
                                      "RULERAG_DAG_PARALLELISM": "2",
                                      "RULERAG_DVC_REMOTE": "minio"})  # fmt: skip
    assert (got.mode, got.parallelism, got.remote) == ("workspaces", 2, "minio")
    with pytest.raises(ValueError, match="RULERAG_DAG_MODE must be one of serial, workspaces"):
        DagSettings.from_env({"RULERAG_DAG_MODE": "celery"})
    with pytest.raises(ValueError, match="RULERAG_DAG_PARALLELISM must be an integer"):
        DagSettings.from_env({"RULERAG_DAG_PARALLELISM": "two"})
