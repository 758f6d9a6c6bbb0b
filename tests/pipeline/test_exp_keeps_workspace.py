"""`make exp-*` keeps a user's finished runs of other datasets in the workspace (issue 32,
defect 8), on a scratch DVC repository: a foreach stage over two items, the second item's output
left in the workspace with params.yaml listing only the first (as after an Airflow run whose
conf chose both: params.yaml comes back untouched), outputs git-ignored as the project's are.
A plain `dvc exp run` deletes that output (as `dvc exp apply` and `dvc checkout` do); the
Makefile's `EXP_RUN` (`dvc exp run --temp`) leaves the workspace as it is and records the
experiment; a `dvc repro` listing the item again brings a removed output back from the cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # a dozen DVC and git commands, ~20 s

DVC_YAML = """\
stages:
  seed:  # persistent output, as most of the project's: DVC's run cache never restores it
    cmd: mkdir -p out/seed && python -c "import uuid; print(uuid.uuid4())" > out/seed/id.txt
    outs:
      - out/seed/id.txt:
          persist: true
  make:
    foreach: ${items}
    do:
      cmd: mkdir -p out/${item} && echo "${item} ${scale}" > out/${item}/file.txt
      params: [scale]
      outs:
        - out/${item}
"""


def _env() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "DVC_"))}
    return {**env, "PATH": os.pathsep.join([bin_dir, env.get("PATH", "")]),
            "DVC_NO_ANALYTICS": "1"}  # fmt: skip


def _run(args: list[str], cwd: Path) -> str:
    done = subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


def _items(repo: Path, items: str) -> None:
    (repo / "params.yaml").write_text(f"items: {items}\nscale: 1\n", encoding="utf-8")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """`out/a` tracked by the committed pipeline, `out/b` a finished run of another item."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _run(["git", "init", "-q"], repo)
    _run(["git", "config", "user.email", "test@example.org"], repo)
    _run(["git", "config", "user.name", "test"], repo)
    _run(["dvc", "init", "-q"], repo)
    (repo / "dvc.yaml").write_text(DVC_YAML, encoding="utf-8")
    # as the project's .gitignore has /data/ (and dvc.lock is not committed either): with
    # DVC's own per-output .gitignore files instead, `dvc exp apply` deletes `out/b` too
    (repo / ".gitignore").write_text("/out/\n", encoding="utf-8")
    _items(repo, "[a]")
    _run(["git", "add", "-A"], repo)
    _run(["git", "commit", "-qm", "pipeline over a"], repo)
    _items(repo, "[a, b]")  # the run over both items (Airflow's conf)
    _run(["dvc", "repro", "-q"], repo)
    _run(["git", "checkout", "-q", "--", "params.yaml"], repo)  # params.yaml comes back
    _run(["dvc", "repro", "-q"], repo)
    assert (repo / "out" / "b" / "file.txt").is_file()
    return repo


def test_a_plain_dvc_exp_run_deletes_the_other_items_outputs(repo: Path) -> None:
    """What DVC does (3.67): why `make exp-*` does not run experiments in the workspace."""
    _run(["dvc", "exp", "run", "-q", "--name", "plain", "-S", "scale=2"], repo)
    assert not (repo / "out" / "b").exists()


def test_make_exp_run_keeps_them_and_records_the_experiment(repo: Path) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    rule = "exp-scratch: ; $(EXP_RUN) scaled -S scale=3"
    _run([make, "-s", "-f", str(PROJECT / "Makefile"), "--eval", rule, "exp-scratch"], repo)
    assert (repo / "out" / "b" / "file.txt").read_text(encoding="utf-8") == "b 1\n"  # kept
    assert (repo / "out" / "a" / "file.txt").read_text(encoding="utf-8") == "a 1\n"
    assert "scale: 1" in (repo / "params.yaml").read_text(encoding="utf-8")  # untouched
    # the workspace's dvc.lock (not in git, as the project's) went along: `seed` did not rerun
    refs = _run(["git", "for-each-ref", "--format=%(refname)", "refs/exps"], repo).split()
    (ref,) = [name for name in refs if name.endswith("/scaled")]
    locked = _run(["git", "show", f"{ref}:dvc.lock"], repo)
    seed = (repo / "dvc.lock").read_text(encoding="utf-8").split("seed:")[1].split("make@")[0]
    assert seed in locked
    shown = json.loads(_run(["dvc", "exp", "show", "--json"], repo))
    (experiment,) = [e for row in shown for e in row.get("experiments") or [] if e["name"]]
    assert experiment["name"] == "scaled"
    (revision,) = experiment["revs"]
    assert revision["data"]["params"]["params.yaml"]["data"]["scale"] == 3


def test_checkout_removes_them_and_a_repro_listing_them_brings_them_back(repo: Path) -> None:
    """What the docs tell a user whose outputs a `dvc exp apply` or `dvc checkout` removed:
    list their items in params.yaml again and `dvc repro` (DVC's run cache checks them out,
    nothing reruns)."""
    _run(["dvc", "checkout", "-q"], repo)
    assert not (repo / "out" / "b").exists()
    _items(repo, "[a, b]")
    out = _run(["dvc", "repro"], repo)
    assert "Stage 'make@b' is cached - skipping run, checking out outputs" in out
    assert (repo / "out" / "b" / "file.txt").read_text(encoding="utf-8") == "b 1\n"
