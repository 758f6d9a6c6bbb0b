"""Issue 28's and issue 45's hostile-input and fault-injection rounds, run again: each case as a
user or an attacker would try it, on a scratch copy of the project, every server on 127.0.0.1.

    python benchmarks/hostile_round.py             # all cases, a table and the counts
    python benchmarks/hostile_round.py -k params   # the cases whose id contains `params`
    python benchmarks/hostile_round.py --round 45  # issue 45's cases only (ids `45-<n>-...`)
    python benchmarks/hostile_round.py --round 28  # issue 28's cases only

Each case ends in one verdict:

    clear      refused with one line naming the key, file or field (exit 2, no traceback)
    silent     accepted: nothing said, or a crash later than the check that should have said it
    traceback  a Python traceback reached the user for an input or environment error
    leak       a secret appeared in output, a log, a spool file, dvc.lock or a prediction
    injection  a command nobody asked for ran (a marker file appeared)
    hang       a bound was exceeded: the command had to be killed, or took longer than the
               case's stated bound
    lost       a user's edit or a run's result was undone or replaced without a word

Sections 1, 2 and 5 are run here as a user would (params checks, `dvc repro` on a scratch
copy, a stage against an unreachable tracking server, a chat server that echoes the key). The
cases of sections 3, 4, 6, 7 and 8 need a process killed at a chosen moment, a disk that fills
up, a file cut short: each is replayed through the test that reproduces it (named in its `test`
field; `pytest` passing means the case ends as `clear`).

Issue 45's round (`--round 45`) runs each case it can as a user would, measured against its
bound: redaction of 5 MB texts, a YAML alias bomb and a 20 MB value through `params_check`
under a 3 GB address-space cap, `kfp_pipeline compile --env` with credentials, the modes of
Airflow's and the cluster's secret files, hostile chat servers, custom KGs no rule or benchmark
can be built from, and stages sending their run to a tracking server that trickles a byte every
2 s (then SIGTERM). The cases that need a kill at a chosen moment or heavy setup (a training
SIGKILLed after its first checkpoint, `make airflow` or `make mlflow-ui` started for real, a run
copy edited mid-run, a KFP local run) are replayed through their tests; there a failing test
ends in the verdict its case is about (`hang`, `lost`, ...), and a test that is skipped or not
found is `silent`: nothing was checked.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import queue
import re
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PYTHON = sys.executable
BIN = Path(PYTHON).parent
SECRET = "hunter2-SECRET-f00d"
VERDICTS = ("clear", "silent", "traceback", "leak", "injection", "hang", "lost")
TRACEBACK = "Traceback (most recent call last)"
KFP_PYTHON = Path(os.environ.get("RULERAG_KFP_PYTHON") or ROOT / ".venv" / "kfp" / "bin" / "python")


@dataclass(frozen=True)
class Outcome:
    verdict: str
    detail: str


@dataclass(frozen=True)
class Case:
    id: str
    section: str
    what: str
    run: Callable[[Path], Outcome]
    test: str
    #: the issue whose round the case belongs to (`--round`)
    round: str = "28"


def scratch_project(into: Path) -> Path:
    """The project's tracked and untracked-but-not-ignored files, as a fresh git repository."""
    from rulerag.orchestration.project_copy import copy_project

    return copy_project(into / "project")


def env(project: Path, **extra: str) -> dict[str, str]:
    mirror = ROOT.parent / "shared" / "kg"
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "RULERAG_DATA_DIR": os.environ.get("RULERAG_DATA_DIR", str(mirror)),
        "MLFLOW_TRACKING_URI": f"sqlite:///{project / 'mlflow.db'}",
        "DVC_NO_ANALYTICS": "1",
        **extra,
    }


def run(cmd: list[str], cwd: Path, environment: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=cwd, env=environment, capture_output=True, text=True, timeout=900
    )


def classify(done: subprocess.CompletedProcess, needle: str = "") -> Outcome:
    """A refusal is clear when it exits non-zero, shows no traceback and names `needle`."""
    text = done.stdout + done.stderr
    if "Traceback (most recent call last)" in text:
        return Outcome("traceback", _last_line(text))
    if done.returncode == 0:
        return Outcome("silent", "exit 0")
    if needle and needle not in text:
        return Outcome("silent", f"refused without naming {needle!r}: {_last_line(text)}")
    return Outcome("clear", _last_line(text))


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


def params_case(change: Callable[[dict[str, Any]], None], needle: str) -> Callable[[Path], Outcome]:
    """A params.yaml value that must fail `params_check` (what `make run` runs before DVC and
    the Airflow validator runs on a conf) naming `needle`."""

    def case(tmp: Path) -> Outcome:
        values = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
        change(values)
        path = tmp / "params.yaml"
        path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
        check = [PYTHON, "-m", "rulerag.orchestration.params_check", str(path)]
        return classify(run(check, ROOT, dict(os.environ)), needle)

    return case


def setter(dotted: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(values: dict[str, Any]) -> None:
        *parents, last = dotted.split(".")
        node = values
        for part in parents:
            node = node[part]
        node[last] = value

    return change


def injection_case(dotted: str, value: list[str], stage: str) -> Callable[[Path], Outcome]:
    """A name written into params.yaml past every check (as `dvc exp run -S` writes it), then
    `dvc repro` of the stage instance it names: no marker file may appear."""

    def case(tmp: Path) -> Outcome:
        project = scratch_project(tmp)
        values = yaml.safe_load((project / "params.yaml").read_text(encoding="utf-8"))
        setter(dotted, value)(values)
        (project / "params.yaml").write_text(yaml.safe_dump(values), encoding="utf-8")
        item = value[-1] if dotted == "datasets" else f"icews14-{value[-1]}"
        done = run(["dvc", "repro", "--single-item", f"{stage}@{item}"], project, env(project))
        if (project / "PWNED").exists():
            return Outcome("injection", "the marker file was created")
        return Outcome("clear", _last_line(done.stdout + done.stderr))

    return case


def tracking_uri_case(tmp: Path) -> Outcome:
    """A stage logging to an unreachable tracking server whose password holds an `@`: the
    password's tail must reach neither stderr nor the spool."""
    project = scratch_project(tmp)
    uri = f"http://user:{SECRET}@TAIL@127.0.0.1:9/"
    done = run(
        [PYTHON, "-m", "pipeline_steps.ingest", "--dataset", "icews14"],
        project,
        env(project, MLFLOW_TRACKING_URI=uri, MLFLOW_HTTP_REQUEST_MAX_RETRIES="0"),
    )
    spooled = "".join(p.read_text() for p in (project / ".mlflow-spool").rglob("*.json"))
    text = done.stdout + done.stderr + spooled
    if SECRET in text or "TAIL" in text:
        return Outcome("leak", "the password (or its tail) was shown or spooled")
    if done.returncode != 0:
        return Outcome("traceback" if "Traceback" in text else "silent", _last_line(text))
    return Outcome("clear", "stage finished; run spooled without the credentials")


def api_echo_case(tmp: Path) -> Outcome:
    """A chat server answering 200 with the API key in its completion, then a 401 echoing the
    key base64-encoded: neither may come back from the generator."""
    import base64

    from rulerag.fake_openai import FakeOpenAI
    from rulerag.generation.api import ApiError, ApiGenerator
    from rulerag.generation.settings import ApiSettings

    encoded = base64.b64encode(f"user:{SECRET}".encode()).decode()
    answer = {"choices": [{"message": {"content": f"Answer: Kabul {SECRET}"}}]}
    with FakeOpenAI([(200, answer), (401, {"error": encoded})]) as server:
        endpoint = ApiSettings(base_url=server.url, model="m", max_retries=0, concurrency=1)
        generator = ApiGenerator(endpoint, api_key=SECRET)
        text = generator.complete("q")
        try:
            generator.complete("q")
        except ApiError as err:
            text += str(err)
    if SECRET in text or encoded in text:
        return Outcome("leak", "the key came back from the generator")
    return Outcome("clear", "masked")


def test_case(node: str) -> Callable[[Path], Outcome]:
    """The case as its test reproduces it: clear when the test passes."""

    def case(tmp: Path) -> Outcome:
        done = run([PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", node], ROOT,
                   dict(os.environ))  # fmt: skip
        last = _last_line(done.stdout + done.stderr)
        return Outcome("clear" if done.returncode == 0 else "silent", f"pytest: {last}")

    return case


REPLAYED = [
    ("3", "kill -9 / SIGTERM to dvc alone leaves its stage running",
     "tests/pipeline/test_stopped_dvc.py", ""),
    ("3", "a killed Airflow task leaves dvc and its stage running",
     "tests/unit/test_stream_command.py", ""),
    ("4", "a publish killed between renames: a mixed folder",
     "tests/unit/test_io.py",
     "test_a_publish_killed_at_any_point_is_the_old_set_the_new_set_or_refused"),
    ("4", "a bank with half the recorded rows read silently",
     "tests/stages/test_publish_stage.py",
     "test_build_benchmark_refuses_a_bank_with_fewer_rows_than_recorded"),
    ("4", "a truncated facts.parquet: ArrowInvalid traceback",
     "tests/stages/test_publish_stage.py",
     "test_a_cut_short_parquet_input_is_one_line"),
    ("4", "disk full (ENOSPC): OSError traceback",
     "tests/stages/test_publish_stage.py",
     "test_a_full_disk_is_one_line_naming_the_file"),
    ("4", "a read-only data folder: OSError traceback",
     "tests/stages/test_publish_stage.py",
     "test_a_read_only_data_folder_is_one_line_naming_it"),
    ("6", "SIGTERM leaves no MLflow run",
     "tests/stages/test_stage_failures.py",
     "test_mine_rules_stopped_by_sigterm_is_a_killed_run_that_publishes_nothing"),
    ("6", "an error before the stage's run opens is not recorded",
     "tests/stages/test_stage_failures.py",
     "test_a_params_error_before_the_stage_run_opens_is_a_failed_run"),
    ("6", "a replay to another URI of the same store leaves a ghost RUNNING run",
     "tests/unit/test_tracking.py",
     "test_a_replay_through_another_uri_of_the_same_store_leaves_no_ghost"),
    ("6", "stage errors begin `__main__ failed:`",
     "tests/stages/test_stage_failures.py",
     "test_a_stage_run_with_python_m_names_itself_in_its_error"),
    ("7", "RuleBench train_rule.json `{}` aborts the evaluation",
     "tests/unit/test_rule_retrieval.py",
     "test_a_set_whose_train_rules_are_empty_evaluates_with_held_out_test_shots"),
    ("7", "`\"rule\": \"179\"` split into 1, 7, 9",
     "tests/unit/test_rule_retrieval.py",
     "test_a_rule_string_is_one_rule_id"),
    ("7", "duplicate rule ids keep the last silently",
     "tests/unit/test_rule_retrieval.py",
     "test_a_rule_id_listed_twice"),
    ("7", "a UTF-8 BOM fails",
     "tests/unit/test_rule_retrieval.py",
     "test_rulebench_files_with_a_byte_order_mark_load"),
    ("7", "a Chinese library searched with the English analyzer, no warning",
     "tests/unit/test_rule_retrieval.py",
     "test_the_default_analyzer_follows_the_librarys_script"),
    ("8", "a header-only train split ingests silently",
     "tests/unit/test_kg_hostile_input.py",
     "test_a_split_with_only_a_header_is_noted_in_stats"),
    ("8", "train.tsv beside train.csv: one ignored",
     "tests/unit/test_kg_hostile_input.py",
     "test_a_split_in_two_files_names_both"),
    ("8", "a custom path that is a file says `does not exist`",
     "tests/unit/test_kg_hostile_input.py",
     "test_a_custom_path_that_is_a_file_says_so"),
    ("8", "mine_rules / index-bm25 stats change on an identical rerun",
     "tests/stages/test_rerun_outputs.py", ""),
]  # fmt: skip


CASES = [
    Case("1-injection-dataset-quote", "1", "dataset name `y'; touch PWNED; echo '`",
         injection_case("datasets", ["icews14", "y'; touch PWNED; echo '"], "ingest"),
         "tests/pipeline/test_dvc_stages.py::test_a_name_that_slipped_into_params_reaches_no_shell"),
    Case("1-injection-index", "1", "retrieve.indexes `bm25;touch PWNED;true`",
         injection_case("retrieve.indexes", ["bm25;touch PWNED;true"], "index"),
         "tests/pipeline/test_dvc_stages.py::test_a_name_that_slipped_into_params_reaches_no_shell"),
    Case("1-params-index-name", "1", "params_check on retrieve.indexes `bm25;touch`",
         params_case(setter("retrieve.indexes", ["bm25;touch /tmp/PWNED;true"]), "invalid name"),
         "tests/unit/test_dvc_graph.py::test_no_project_command_interpolates_a_value"),
    Case("1-params-config-name", "1", "params_check on generation.configs `a;b`",
         params_case(setter("generation.configs", ["a;b"]), "invalid name"),
         "tests/unit/test_params.py"),
    Case("2-tracking-uri-at", "2", "MLFLOW_TRACKING_URI password holding an `@`",
         tracking_uri_case, "tests/unit/test_secrets.py::test_a_password_holding_an_at_sign_..."),
    Case("2-api-echo", "2", "API server echoing the key (completion, base64 error)",
         api_echo_case, "tests/unit/test_secrets.py::test_a_completion_echoing_the_key_..."),
    Case("2-base-url-credentials", "2", "generation.api.base_url with user:password@",
         params_case(setter("generation.api.base_url", f"https://u:{SECRET}@h/v1"),
                     "base_url holds credentials"),
         "tests/unit/test_secrets.py::test_a_base_url_with_credentials_is_refused_..."),
    *[
        Case(f"5-params-{key}", "5", f"{key}: {value!r}", params_case(setter(key, value), needle),
             "tests/unit/test_params.py::test_values_that_used_to_pass_the_check_fail_it_...")
        for key, value, needle in [
            ("build_benchmark.corpus.filter", {"nell995": "nonee"}, "corpus.filter.nell995"),
            ("ingest.duplicates", "maybe", "ingest.duplicates"),
            ("ingest.source", {"nell995": "foo"}, "source.nell995"),
            ("mine_rules.temporal.transition", "foo", "transition"),
            ("generation.configs", ["standard_rag", "no_such_row"], "no_such_row"),
            ("build_benchmark.strata.weights", [1], "weights"),
            ("build_benchmark.strata.weights", [0, 0, 0], "weights"),
            ("build_benchmark.corpus.splits", ["test"], "corpus.splits"),
            ("retrieve.top_k", True, "retrieve.top_k"),
            ("train_retriever.lr", float("inf"), "train_retriever.lr"),
            ("generation.max_rules", 10, "max_rules"),
            ("ingest.custom", {"nell995": {"path": "/tmp"}}, "nell995"),
        ]
    ],
    *[
        Case(f"{section}-replay-{i}", section, what, test_case(node), node)
        for i, (section, what, node) in enumerate(
            ((s, w, f"{f}::{t}" if t else f) for s, w, f, t in REPLAYED), start=1
        )
    ],
]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Issue 45's round: hangs, slow input, lost edits and results
# ---------------------------------------------------------------------------------------------


class Hang(Exception):
    """A bound was exceeded: the command was killed at its hard timeout."""


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def bounded(
    cmd: list[str],
    cwd: Path,
    environment: dict[str, str],
    timeout: float,
    preexec_fn: Callable[[], None] | None = None,
) -> tuple[subprocess.CompletedProcess, float]:
    """`cmd` in a session of its own, killed with everything it started past `timeout` (then
    `Hang`); returns what it said and how long it took."""
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True, preexec_fn=preexec_fn,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise Hang(f"killed after {timeout:g} s: {' '.join(cmd)[:100]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), time.monotonic() - started


def refusal(
    done: subprocess.CompletedProcess,
    seconds: float,
    bound: float,
    needles: tuple[str, ...] = (),
    prefix: str = "",
) -> Outcome:
    """Clear: exit 2 within `bound` seconds, no traceback, and one line on stderr (the one line
    starting with `prefix` where given: a stage's `<stage> failed:`) naming every needle."""
    text = done.stdout + done.stderr
    if TRACEBACK in text:
        return Outcome("traceback", _last_line(text))
    if seconds > bound:
        return Outcome("hang", f"{seconds:.1f} s, bound {bound:g} s: {_last_line(text)}")
    if done.returncode == 0:
        return Outcome("silent", f"exit 0 after {seconds:.1f} s: {_last_line(text)}")
    said = [line for line in done.stderr.splitlines() if line.strip()]
    if prefix:
        said = [line for line in said if line.startswith(prefix)]
    if done.returncode != 2 or len(said) != 1:
        return Outcome("silent", f"exit {done.returncode}, {len(said)} lines: {_last_line(text)}")
    missing = [needle for needle in needles if needle not in said[0]]
    if missing:
        return Outcome("silent", f"refused without naming {missing}: {said[0][:120]}")
    return Outcome("clear", f"{seconds:.1f} s: {said[0][:140]}")


def replay(nodes: str, fails_as: str, timeout: float = 1200) -> Callable[[Path], Outcome]:
    """The case as its tests (space-separated node ids) reproduce it: clear when every one
    passes, `fails_as` when one fails (the verdict its case is about), `hang` when pytest has
    to be killed, `silent` when a test is skipped or not found (nothing was checked)."""

    def case(tmp: Path) -> Outcome:
        cmd = [PYTHON, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *nodes.split()]
        done, seconds = bounded(cmd, ROOT, dict(os.environ), timeout)
        last = _last_line(done.stdout + done.stderr)
        if done.returncode == 0 and "skipped" not in last:
            return Outcome("clear", f"pytest, {seconds:.0f} s: {last}")
        if done.returncode in (0, 4, 5):  # skipped, or a node that is not there
            return Outcome("silent", f"not replayed: {last}")
        errors = [line[1:].strip() for line in done.stdout.splitlines() if line.startswith("E ")]
        why = f"; {errors[0][:100]}" if errors else ""
        return Outcome(fails_as, f"pytest, {seconds:.0f} s: {last}{why}")

    return case


def with_params(project: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = project / "params.yaml"
    values = yaml.safe_load(path.read_text(encoding="utf-8"))
    change(values)
    path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")


def custom_kg_project(tmp: Path, splits: dict[str, str], **entry: str) -> Path:
    """A scratch project whose params.yaml names a custom KG `mykg` made of `splits` (split ->
    the text of its .tsv file), as a user adds one (`ingest.custom`)."""
    project = scratch_project(tmp)
    source = tmp / "mykg"
    source.mkdir()
    for split, text in splits.items():
        (source / f"{split}.tsv").write_text(text, encoding="utf-8")
    with_params(project, setter("ingest.custom", {"mykg": {"path": str(source), **entry}}))
    return project


def stage(
    project: Path, name: str, timeout: float = 300, **extra: str
) -> tuple[subprocess.CompletedProcess, float]:
    """`python -m pipeline_steps.<name> --dataset mykg` in `project`, as DVC runs it."""
    cmd = [PYTHON, "-m", f"pipeline_steps.{name}", "--dataset", "mykg"]
    return bounded(cmd, project, env(project, **extra), timeout)


def _stage_failed(done: subprocess.CompletedProcess, name: str) -> Outcome:
    """A stage that had to succeed for the case to reach its point did not."""
    outcome = classify(done)
    verdict = "silent" if outcome.verdict == "clear" else outcome.verdict
    return Outcome(verdict, f"{name} did not run: {outcome.detail}")


def _chain(links: int) -> str:
    return "".join(f"e{i}\tr\te{i + 1}\n" for i in range(links))


def _random_links(links: int, entities: int, relations: int, seed: int = 0) -> str:
    import random

    rnd = random.Random(seed)
    return "".join(
        f"e{rnd.randrange(entities)}\tr{rnd.randrange(relations)}\te{rnd.randrange(entities)}\n"
        for _ in range(links)
    )


def _self_loops() -> dict[str, str]:
    spans = {"train": range(0, 300), "valid": range(300, 350), "test": range(350, 400)}
    return {split: "".join(f"e{i}\tr\te{i}\n" for i in ids) for split, ids in spans.items()}


def no_rule_case(train: str) -> Callable[[Path], Outcome]:
    """A custom KG no rule can be mined from: mine_rules must stop in one line, publishing no
    (empty) bank, and build_benchmark after it name the bank and the stage that writes it."""

    def case(tmp: Path) -> Outcome:
        project = custom_kg_project(tmp, {"train": train})
        done, _ = stage(project, "ingest")
        if done.returncode != 0:
            return _stage_failed(done, "ingest")
        done, seconds = stage(project, "mine_rules")
        mined = refusal(done, seconds, 120, ("the rule bank is empty",), "mine_rules failed:")
        if mined.verdict != "clear":
            return mined
        if (project / "data" / "mykg" / "rules").exists():
            return Outcome("silent", "refused, but data/mykg/rules/ was published")
        done, seconds = stage(project, "build_benchmark")
        needles = ("bank.parquet", "mine_rules")
        built = refusal(done, seconds, 120, needles, "build_benchmark failed:")
        return built if built.verdict != "clear" else mined

    return case


def _mined_self_loops(tmp: Path) -> Path | Outcome:
    """A project whose custom KG is all self-loops, ingested and mined; or the outcome of the
    stage that failed."""
    project = custom_kg_project(tmp, _self_loops())
    for name in ("ingest", "mine_rules"):
        done, _ = stage(project, name)
        if done.returncode != 0:
            return _stage_failed(done, name)
    return project


def self_loop_case(tmp: Path) -> Outcome:
    """Every fact a self-loop: rules are mined, but the benchmark would have no F_R item."""
    project = _mined_self_loops(tmp)
    if isinstance(project, Outcome):
        return project
    done, seconds = stage(project, "build_benchmark")
    outcome = refusal(done, seconds, 120, ("F_R", "self-loop"), "build_benchmark failed:")
    if outcome.verdict == "clear" and (project / "data" / "mykg" / "benchmark").exists():
        return Outcome("silent", "refused, but data/mykg/benchmark/ was published")
    return outcome


def bank_deleted_case(tmp: Path) -> Outcome:
    """rules/bank.parquet deleted after mine_rules (its manifest still listing it)."""
    project = _mined_self_loops(tmp)
    if isinstance(project, Outcome):
        return project
    bank = project / "data" / "mykg" / "rules" / "bank.parquet"
    bank.unlink()
    done, seconds = stage(project, "build_benchmark")
    return refusal(done, seconds, 120, (str(bank), "mine_rules"), "build_benchmark failed:")


def kg_time_case(value: str) -> Callable[[Path], Outcome]:
    """A time that is no ASCII integer int64 holds, on line 2 of a custom KG's train.tsv."""

    def case(tmp: Path) -> Outcome:
        project = custom_kg_project(
            tmp, {"train": f"a\tr\tb\t2000\na\tr\tc\t{value}\n"}, time_format="int"
        )
        done, seconds = stage(project, "ingest")
        where = f"{tmp / 'mykg' / 'train.tsv'}:2:"
        outcome = refusal(done, seconds, 120, (where,), "ingest failed:")
        if outcome.verdict == "clear" and (project / "data" / "mykg" / "kg").exists():
            return Outcome("silent", "refused, but data/mykg/kg/ was published")
        return outcome

    return case


# -- 1 and 2: a tracking server and a chat server that trickle ---------------------------------


class TrickleServer:
    """An HTTP server on 127.0.0.1 answering every request one byte every `pause` seconds,
    forever (a status line, then a header that never ends): each read gets data in time, the
    request never ends."""

    def __init__(self, pause: float = 2.0) -> None:
        self.pause = pause
        self.requests = 0
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
            except OSError:
                return
            self.requests += 1
            data = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: "
            sent = 0
            while not self.stop.is_set():
                byte = data[sent : sent + 1] or b"a"
                try:
                    conn.sendall(byte)
                except OSError:
                    return
                sent += 1
                self.stop.wait(self.pause)

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def __enter__(self) -> TrickleServer:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.sock.close()


def _spool(project: Path) -> tuple[int, list[str]]:
    """The runs spooled in the project, and the names of what a send left half-done."""
    spool = project / ".mlflow-spool"
    if not spool.is_dir():
        return 0, []
    runs = len(list(spool.rglob("run.json")))
    return runs, sorted(p.name for p in spool.iterdir() if p.name.startswith(".staging-"))


def trickle_store_case(sigterm: bool) -> Callable[[Path], Outcome]:
    """`ingest` of a tiny custom KG sending its run to a store that trickles. Without SIGTERM
    (RULERAG_TRACKING_TIMEOUT=5) it must finish and spool the run within 60 s; with SIGTERM two
    seconds into the send (the default 300 s deadline) it must end within 10 s, its run
    spooled, no `.staging-*` left."""

    def case(tmp: Path) -> Outcome:
        project = custom_kg_project(tmp, {"train": _chain(20)})
        with TrickleServer(2.0) as server:
            extra = {"MLFLOW_TRACKING_URI": server.url}
            if not sigterm:
                extra["RULERAG_TRACKING_TIMEOUT"] = "5"
                done, seconds = stage(project, "ingest", timeout=120, **extra)
                if done.returncode != 0:
                    return _stage_failed(done, "ingest")
                if seconds > 60:
                    return Outcome("hang", f"{seconds:.1f} s, bound 60 s")
                said = f"{seconds:.1f} s"
            else:
                proc = subprocess.Popen(
                    [PYTHON, "-m", "pipeline_steps.ingest", "--dataset", "mykg"], cwd=project,
                    env=env(project, **extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    text=True, start_new_session=True,
                )  # fmt: skip
                try:
                    deadline = time.monotonic() + 120
                    while server.requests == 0 and proc.poll() is None:
                        if time.monotonic() > deadline:
                            raise Hang("no request reached the store within 120 s")
                        time.sleep(0.1)
                    if proc.poll() is not None:
                        return Outcome("silent", f"ended before its run was sent: "
                                       f"{_last_line(proc.communicate()[0])}")  # fmt: skip
                    time.sleep(2)
                    proc.send_signal(signal.SIGTERM)
                    sent = time.monotonic()
                    try:
                        out, _ = proc.communicate(timeout=10)
                    except subprocess.TimeoutExpired:
                        raise Hang("still running 10 s after SIGTERM") from None
                finally:
                    if proc.poll() is None:
                        _kill_group(proc)
                if TRACEBACK in out:
                    return Outcome("traceback", _last_line(out))
                said = f"exit {proc.returncode} {time.monotonic() - sent:.1f} s after SIGTERM"
        if not server.requests:
            return Outcome("silent", f"{said}; the stage never called the store")
        said += f", {server.requests} call(s) to the store"
        runs, staging = _spool(project)
        if not runs:
            return Outcome("lost", f"{said}; no run in .mlflow-spool")
        if staging:
            return Outcome("lost", f"{said}; half-spooled: {staging}")
        return Outcome("clear", f"{said}; {runs} run spooled, no .staging-*")

    return case


#: a good answer of 200 bytes, for a server that sends it a byte at a time
_ANSWER = 'json.dumps({"choices": [{"message": {"content": "Kabul"}}]}).ljust(200).encode()'

API_TRICKLE = f"""
import json, sys, time
from rulerag.generation.api import ApiError, ApiGenerator
from rulerag.generation.settings import ApiSettings
from rulerag.fake_openai import FakeOpenAI, RawReply
reply = RawReply({_ANSWER}, trickle=2.0, trickle_headers=sys.argv[1] == "headers")
with FakeOpenAI([], default=reply) as server:
    endpoint = ApiSettings(base_url=server.url, model="m", timeout=5, max_retries=1,
                           concurrency=1)
    generator = ApiGenerator(endpoint, api_key=sys.argv[2], sleep=lambda s: None)
    started = time.monotonic()
    try:
        said = "answer: " + generator.complete("q")
    except ApiError as err:
        said = "ApiError: " + str(err)
    print(json.dumps({{"seconds": time.monotonic() - started, "said": said,
                      "requests": len(server.requests)}}), flush=True)
"""


def api_trickle_case(mode: str) -> Callable[[Path], Outcome]:
    """`ApiGenerator(timeout=5, max_retries=1)` against a server that sends its reply (the
    body, or the headers too) a byte every 2 s: an `ApiError` within 3x the timeout."""

    def case(tmp: Path) -> Outcome:
        done, _ = bounded([PYTHON, "-c", API_TRICKLE, mode, SECRET], ROOT, dict(os.environ), 60)
        text = done.stdout + done.stderr
        if TRACEBACK in text or done.returncode != 0:
            return Outcome("traceback", _last_line(text))
        result = json.loads(done.stdout.strip().splitlines()[-1])
        said = f"{result['seconds']:.1f} s, {result['requests']} requests: {result['said']}"
        if SECRET in result["said"]:
            return Outcome("leak", "the key is in the error")
        if result["seconds"] > 15:
            return Outcome("hang", said[:160])
        if not result["said"].startswith("ApiError"):
            return Outcome("silent", said[:160])
        return Outcome("clear", said[:160])

    return case


API_SIGTERM = f"""
import json, threading, time
from rulerag.generation.api import ApiGenerator
from rulerag.generation.settings import ApiSettings
from rulerag.tracking import StageTerminated, stop_on_sigterm
from rulerag.fake_openai import FakeOpenAI, RawReply
with FakeOpenAI([], default=RawReply({_ANSWER}, trickle=2.0)) as server:
    endpoint = ApiSettings(base_url=server.url, model="m", timeout=120, max_retries=3,
                           concurrency=4)
    generator = ApiGenerator(endpoint, api_key="sk-k")
    def watch():
        while len(server.requests) < 4:
            time.sleep(0.05)
        print("INFLIGHT", flush=True)
    threading.Thread(target=watch, daemon=True).start()
    try:
        with stop_on_sigterm():
            generator.generate([f"p{{i}}" for i in range(8)])
        print(json.dumps({{"stopped": False, "requests": len(server.requests)}}), flush=True)
    except StageTerminated:
        print(json.dumps({{"stopped": True, "requests": len(server.requests)}}), flush=True)
"""


def _lines(proc: subprocess.Popen) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    return lines


def api_sigterm_case(tmp: Path) -> Outcome:
    """`generate` of 8 prompts, 4 at a time, against a server trickling its answers: SIGTERM
    once four requests are in flight must end the process within 10 s, sending no more."""
    proc = subprocess.Popen(
        [PYTHON, "-c", API_SIGTERM], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        lines = _lines(proc)
        try:
            first = lines.get(timeout=60)
        except queue.Empty:
            raise Hang("four requests were not in flight within 60 s") from None
        if first != "INFLIGHT":
            return Outcome("traceback" if "Traceback" in first else "silent", first[:160])
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            raise Hang("still running 10 s after SIGTERM") from None
        took = time.monotonic() - sent
        said = []
        while not lines.empty():
            said.append(lines.get())
    finally:
        if proc.poll() is None:
            _kill_group(proc)
    text = "\n".join(said)
    if TRACEBACK in text:
        return Outcome("traceback", _last_line(text))
    result = json.loads(said[-1]) if said and said[-1].startswith("{") else {}
    if not result.get("stopped"):
        return Outcome("silent", f"exit {proc.returncode}: {_last_line(text)}")
    if result["requests"] != 4:
        return Outcome("silent", f"{result['requests']} requests sent: the queue went on")
    return Outcome("clear", f"ended {took:.1f} s after SIGTERM; 4 requests, none sent later")


# -- 3, 4, 19: input slow out of proportion to its size ----------------------------------------

REDACT = r"""
import base64, json, random, sys, time
from rulerag.redact import redact_secrets
key, password, kind = sys.argv[1], sys.argv[2], sys.argv[3]
encoded = base64.b64encode(f"user:{key}".encode()).decode()
secrets = f"Basic {encoded} https://u:{password}@api.example/v1 {key} echo {key[:4]}*****{key[-4:]}"
rnd = random.Random(0)
for size in (1_000, 20_000, 50_000, 5_000_000):
    if kind == "scheme":  # one run of scheme characters, never followed by ://
        filler = ("a." * (size // 2))[: size // 2]
    else:  # base64-like runs holding pieces of the key's base64 form
        piece = base64.b64encode(rnd.randbytes(3 * 256)).decode()
        chunk = piece + encoded[: len(encoded) // 3] + piece + encoded[-8:]
        filler = (chunk * (size // 2 // len(chunk) + 1))[: size // 2]
    text = f"{filler}{secrets} {filler}x{encoded}y=="
    started = time.monotonic()
    out = redact_secrets(text, [key, password])
    seconds = time.monotonic() - started
    shown = [s for s in (key, password, encoded) if s in out]
    print(json.dumps({"size": len(text), "seconds": seconds, "shown": len(shown)}), flush=True)
"""


def redact_case(kind: str) -> Callable[[Path], Outcome]:
    """`redact_secrets` on texts of 1 kB to 5 MB made of long runs (`a.a.a...`, or base64-like
    runs with pieces of the key's base64 form), the key, a URL password and the key's base64
    form in them: 5 MB in under 5 s, every secret masked."""

    def case(tmp: Path) -> Outcome:
        args = [PYTHON, "-c", REDACT, "sk-test-Abc1Def2Ghi3Jkl4Mno5", SECRET, kind]
        try:
            done, _ = bounded(args, ROOT, dict(os.environ), 120)
        except Hang as hang:
            return Outcome("hang", f"{hang} (bound: 5 MB in 5 s)")
        if done.returncode != 0:
            return Outcome("traceback", _last_line(done.stdout + done.stderr))
        sizes = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        said = ", ".join(f"{r['size'] / 1e3:,.0f} kB {r['seconds']:.2f} s" for r in sizes)
        if any(r["shown"] for r in sizes):
            return Outcome("leak", f"a secret was not masked: {said}")
        if sizes[-1]["seconds"] > 5:
            return Outcome("hang", said)
        return Outcome("clear", said)

    return case


def _address_space_cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def _params_text_with(pattern: str, block: str) -> str:
    text = (ROOT / "params.yaml").read_text(encoding="utf-8")
    text, count = re.subn(pattern, lambda _: block, text, count=1)
    if count != 1:
        raise ValueError(f"params.yaml has no match for {pattern!r}")
    return text


def alias_bomb(depth: int, width: int = 9) -> str:
    """params.yaml's `generation.configs` as nested anchors, each level `width` aliases of the
    one before: width**(depth + 1) strings."""
    names = ", ".join(["lol"] * width)
    lines = ["  configs:", f"    - &l0 [{names}]"]
    lines += [f"    - &l{k} [{', '.join([f'*l{k - 1}'] * width)}]" for k in range(1, depth + 1)]
    return _params_text_with(r"  configs:\n(    - \w+\n)+", "\n".join(lines) + "\n")


def params_text_case(text: Callable[[], str], bound: float, *needles: str) -> Callable[
        [Path], Outcome]:  # fmt: skip
    """A params.yaml text that `params_check` must refuse in one line within `bound` seconds,
    in a scratch project, under a 3 GB address-space cap (killed after 60 s)."""

    def case(tmp: Path) -> Outcome:
        project = scratch_project(tmp)
        (project / "params.yaml").write_text(text(), encoding="utf-8")
        check = [PYTHON, "-m", "rulerag.orchestration.params_check", "params.yaml"]
        done, seconds = bounded(check, project, env(project), 60, _address_space_cap)
        return refusal(done, seconds, bound, ("params.yaml", *needles))

    return case


RUN_CONF = r"""
import json, sys, time
from rulerag.orchestration.dvc_graph import cmd_param_keys
from rulerag.orchestration.run_conf import validate_run_conf
from rulerag.params import parse_params, read_params_file
params = read_params_file("params.yaml")
known = parse_params(params, "params.yaml").known_datasets()
if sys.argv[1] == "million":
    conf = {"params": {"generation.configs": ["standard_rag"] * 1_000_000}}
else:
    conf = {"datasets": ["icews14", "nell995", "icews14"]}
started = time.monotonic()
try:
    validate_run_conf(conf, params, known, cmd_keys=cmd_param_keys("dvc.yaml"))
    said = "accepted"
except ValueError as err:
    said = "ValueError: " + str(err)
print(json.dumps({"seconds": time.monotonic() - started, "said": said}), flush=True)
"""


def run_conf_case(kind: str, needle: str) -> Callable[[Path], Outcome]:
    """A DAG run's conf through `validate_run_conf` as the DAG calls it: refused within 5 s
    (a million `generation.configs` entries), naming the repeat (a dataset listed twice)."""

    def case(tmp: Path) -> Outcome:
        done, _ = bounded([PYTHON, "-c", RUN_CONF, kind], ROOT, dict(os.environ), 120)
        if done.returncode != 0:
            return Outcome("traceback", _last_line(done.stdout + done.stderr))
        result = json.loads(done.stdout.strip().splitlines()[-1])
        said = f"{result['seconds']:.2f} s: {result['said']}"[:160]
        if result["seconds"] > 5:
            return Outcome("hang", said)
        if not result["said"].startswith("ValueError") or needle not in result["said"]:
            return Outcome("silent", said)
        return Outcome("clear", said)

    return case


# -- 5, 6: secrets in compiled pipelines and on disk -------------------------------------------


def kfp_env_case(tmp: Path) -> Outcome:
    """`make kfp KFP_ARGS='--env MLFLOW_TRACKING_URI=http://admin:<secret>@mlflow:5000
    AWS_SECRET_ACCESS_KEY=<secret>'`, as the Makefile runs the compiler (in the KFP venv):
    refused, or the secret nowhere in the compiled YAML."""
    if not KFP_PYTHON.is_file():
        return Outcome("silent", f"not run: no KFP SDK venv at {KFP_PYTHON} (make setup-kfp)")
    project = scratch_project(tmp)
    out = tmp / "kfp" / "pipeline.yaml"
    cmd = [str(KFP_PYTHON), "-m", "rulerag.orchestration.kfp_pipeline", "--project-dir",
           str(project), "compile", "--output", str(out), "--env", "RULERAG_DVC_REMOTE=minio",
           f"MLFLOW_TRACKING_URI=http://admin:{SECRET}@mlflow:5000",
           f"AWS_SECRET_ACCESS_KEY={SECRET}"]  # fmt: skip
    done, seconds = bounded(cmd, project, {**env(project), "PYTHONPATH": str(project)}, 300)
    text = done.stdout + done.stderr
    written = "".join(p.read_text(errors="replace") for p in out.parent.rglob("*") if p.is_file())
    if SECRET in written:
        return Outcome("leak", f"the secret is in the compiled YAML ({written.count(SECRET)}x)")
    if SECRET in text:
        return Outcome("leak", "the secret was printed")
    if TRACEBACK in text:
        return Outcome("traceback", _last_line(text))
    if done.returncode == 0:
        return Outcome("clear", f"compiled without the secret: {_last_line(text)}")
    said = [line for line in done.stderr.splitlines() if line.strip()]
    return Outcome("clear", f"refused (exit {done.returncode}, {len(said)} lines): {said[0]}"[:160])


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def airflow_home_case(tmp: Path) -> Outcome:
    """`python -m rulerag.orchestration.airflow_home` with no command (it only prepares), on a
    new AIRFLOW_HOME, then again on one left 0755 with its passwords file 0644: folder 0700,
    passwords 0600, the password never printed."""
    from rulerag.orchestration.airflow_home import PASSWORDS_FILE_NAME

    home = tmp / "airflow"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    cmd = [PYTHON, "-m", "rulerag.orchestration.airflow_home"]
    said = []
    for widen in (False, True):
        if widen:
            home.chmod(0o755)
            (home / PASSWORDS_FILE_NAME).chmod(0o644)
        done, _ = bounded(cmd, ROOT, {**clean, "AIRFLOW_HOME": str(home)}, 120)
        text = done.stdout + done.stderr
        if TRACEBACK in text or done.returncode != 0:
            return Outcome("traceback" if TRACEBACK in text else "silent", _last_line(text))
        path = home / PASSWORDS_FILE_NAME
        passwords = json.loads(path.read_text(encoding="utf-8"))
        if any(p in text for p in passwords.values()):
            return Outcome("leak", "a password was printed")
        modes = (_mode(home), _mode(path))
        said.append(f"{'0755/0644' if widen else 'new'} -> {modes[0]:04o}/{modes[1]:04o}")
        if modes != (0o700, 0o600):
            return Outcome("leak", f"folder/passwords modes: {', '.join(said)}")
    return Outcome("clear", f"folder/passwords: {', '.join(said)}; no password printed")


def cluster_secrets_case(tmp: Path) -> Outcome:
    """`Cluster.secrets()` on a state folder whose secrets.json an older version left 0644:
    half-written (so it is written), then whole (so it is only read): 0600 both times."""
    from rulerag.orchestration.cluster import Cluster

    state = tmp / "state"
    state.mkdir(mode=0o755)
    path = state / "secrets.json"
    path.write_text(json.dumps({"redis_password": "kept-as-it-was"}), encoding="utf-8")
    said = []
    for _ in ("written", "read"):
        path.chmod(0o644)
        made = Cluster(ROOT, state, base_env={"PATH": "/usr/bin"}).secrets()
        said.append(f"{_mode(path):04o}")
        if made.get("redis_password") != "kept-as-it-was":
            return Outcome("lost", "the saved redis password was replaced")
    if said != ["0600", "0600"]:
        return Outcome("leak", f"secrets.json 0644 -> {', '.join(said)} (written, read)")
    return Outcome("clear", f"0644 -> 0600 written and read; state folder {_mode(state):04o}")


# -- 10, 11, 19: hostile chat servers and API settings -----------------------------------------

API_ROW = {"retrieval": "rg", "generator": "api", "prompt": "rule"}


class _Logged(logging.Handler):
    """The log lines of a case run in this process (the retries' warnings), kept to be read
    instead of printed between the table's rows."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def api_reply_case(script: list[Any], attempts: int) -> Callable[[Path], Outcome]:
    """A chat server answering with `script` (then the same again): the generator must raise one
    line of `ApiError` after `attempts` requests (retried when the body is not JSON, at once for
    `content: null`), the key masked; an answer returned is `silent`."""

    def case(tmp: Path) -> Outcome:
        from rulerag.fake_openai import FakeOpenAI
        from rulerag.generation.api import ApiError, ApiGenerator
        from rulerag.generation.settings import ApiSettings

        logged = _Logged()
        logger = logging.getLogger("rulerag")
        logger.addHandler(logged)
        try:
            with FakeOpenAI(list(script) * 3) as server:
                endpoint = ApiSettings(
                    base_url=server.url, model="m", timeout=10, max_retries=2, concurrency=1
                )
                generator = ApiGenerator(endpoint, api_key=SECRET, sleep=lambda s: None)
                try:
                    answer = generator.complete("q")
                except ApiError as err:
                    message, requests = str(err), len(server.requests)
                else:
                    return Outcome("silent", f"answered {answer!r}")
        finally:
            logger.removeHandler(logged)
        if SECRET in message or any(SECRET in line for line in logged.lines):
            return Outcome("leak", "the key is in the error or a retry's log line")
        if "\n" in message or requests != attempts:
            return Outcome("silent", f"{requests} requests, not {attempts}: {message[:120]}")
        return Outcome("clear", f"ApiError after {requests} requests: {message[:120]}")

    return case


def api_row(base_url: str | None) -> Callable[[dict[str, Any]], None]:
    def change(values: dict[str, Any]) -> None:
        generation = values["generation"]
        generation["grid"]["gpt"] = API_ROW
        generation["configs"] = [*generation["configs"], "gpt"]
        generation["api"]["base_url"] = base_url

    return change


def api_key_unset_case(tmp: Path) -> Outcome:
    """An `api` row selected, its base URL set, no key variable: `params_check` (what `make
    run` runs first) must say which variable to set, in one line."""
    values = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    api_row("https://api.example/v1")(values)
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
    keyless = {k: v for k, v in os.environ.items()
               if k not in ("RULERAG_API_KEY", "OPENAI_API_KEY")}  # fmt: skip
    check = [PYTHON, "-m", "rulerag.orchestration.params_check", str(path)]
    done, seconds = bounded(check, ROOT, keyless, 120)
    return refusal(done, seconds, 60, ("RULERAG_API_KEY",))


#: a JSON body the generator cannot use, in the shapes a proxy or a broken server sends
_NOT_JSON = {
    "malformed": b'{"choices": [tru',
    "html": f"<html><body><h1>502 Bad Gateway</h1> {SECRET}</body></html>".encode(),
    "not-utf8": b"\xff\xfe{\x00}",
}
_NULL_CONTENT = {"choices": [{"message": {"role": "assistant", "content": None,
                                          "refusal": "I can't help."},
                              "finish_reason": "content_filter"}]}  # fmt: skip


def _raw(body: bytes, content_type: str = "application/json") -> Any:
    from rulerag.fake_openai import RawReply

    return RawReply(body, content_type=content_type)


def replayed(case_id: str, section: str, what: str, nodes: str, fails_as: str) -> Case:
    """A case of issue 45 replayed through its tests (`replay`), which are its `test`."""
    return Case(case_id, section, f"{what} (replayed)", replay(nodes, fails_as), nodes, "45")


KFP_KEPT_OUT = [
    "tests/unit/test_kfp_tasks.py::test_a_run_with_other_params_is_not_collected_into_the_project",
    "tests/unit/test_kfp_local.py::test_a_local_run_with_overrides_is_not_collected_into_the_project",
]

#: the local KFP run the other KFP tests are checked against; it ends with a run-local with a
#: `--param` override, whose results must stay out of the project's dvc.lock
KFP_E2E = "tests/pipeline/test_kfp_pipeline.py::test_a_local_kfp_run_equals_a_serial_dvc_repro"

ROUND_45 = [
    Case("45-1-trickle-store-deadline", "1",
         "ingest's run sent to a store trickling 1 byte / 2 s, RULERAG_TRACKING_TIMEOUT=5",
         trickle_store_case(sigterm=False),
         "tests/unit/test_tracking.py::test_a_trickling_store_costs_the_deadline_and_the_run_is_spooled",
         "45"),
    Case("45-1-trickle-store-sigterm", "1",
         "the same, default deadline, SIGTERM 2 s into the send: ends within 10 s",
         trickle_store_case(sigterm=True),
         "tests/unit/test_tracking.py::test_a_sigterm_while_a_run_is_sent_ends_the_stage_and_spools_the_run",
         "45"),
    Case("45-2-api-trickle-body", "2",
         "ApiGenerator(timeout=5, max_retries=1), body 1 byte / 2 s: fails within 15 s",
         api_trickle_case("body"),
         "tests/unit/test_api_hostile.py::test_a_trickled_body_ends_at_the_deadline_and_is_retried",
         "45"),
    Case("45-2-api-trickle-headers", "2",
         "the same with the status line and headers trickled",
         api_trickle_case("headers"),
         "tests/unit/test_api_hostile.py::test_trickled_headers_end_at_the_deadline_too", "45"),
    Case("45-2-api-sigterm-concurrency", "2",
         "generate(8 prompts), concurrency 4, trickling server, SIGTERM: ends within 10 s",
         api_sigterm_case,
         "tests/unit/test_api_hostile.py::test_sigterm_stops_a_concurrent_generate_at_once",
         "45"),
    replayed("45-2-generate-stage-sigterm", "2",
             "the generate stage, api row, concurrency 4, SIGTERM mid-requests",
             "tests/stages/test_api_stage_hostile.py::test_sigterm_stops_the_generate_stage_at_once",
             "hang"),
    Case("45-3-redact-scheme-runs", "3", "redact_secrets on 1k-5 MB of `a.a.a...` runs",
         redact_case("scheme"),
         "tests/unit/test_hostile_round3_inputs.py::test_redacting_5_mb_finishes_and_masks_every_secret_in_it",
         "45"),
    Case("45-3-redact-base64-runs", "3",
         "redact_secrets on 1k-5 MB of base64-like runs holding pieces of the key's form",
         redact_case("base64"),
         "tests/unit/test_hostile_round3_inputs.py::test_redacting_5_mb_finishes_and_masks_every_secret_in_it",
         "45"),
    *[
        Case(f"45-4-alias-bomb-depth{depth}", "4",
             f"params_check on a YAML alias bomb in generation.configs (9 x 9, depth {depth})",
             params_text_case(lambda depth=depth: alias_bomb(depth), 10, "aliases"),
             "tests/unit/test_hostile_round3_inputs.py::test_an_alias_bomb_is_refused_at_once_naming_the_file_and_line",
             "45")
        for depth in (6, 7, 9)
    ],
    Case("45-5-kfp-env-credentials", "5",
         "kfp_pipeline compile --env MLFLOW_TRACKING_URI=http://admin:<secret>@... "
         "AWS_SECRET_ACCESS_KEY=<secret>",
         kfp_env_case,
         "tests/pipeline/test_kfp_pipeline.py::test_compile_refuses_credentials_in_the_tasks_environment",
         "45"),
    Case("45-6-airflow-home-modes", "6",
         "airflow_home (prepare only), new and 0755/0644 home: 0700/0600, nothing printed",
         airflow_home_case,
         "tests/unit/test_secret_files.py::test_prepare_home_makes_the_home_private", "45"),
    Case("45-6-cluster-secrets-mode", "6", "Cluster.secrets() on a 0644 secrets.json",
         cluster_secrets_case,
         "tests/unit/test_cluster_cli.py::test_secrets_an_older_version_left_readable_are_tightened",
         "45"),
    replayed("45-7-make-airflow-loopback", "7",
             "make airflow listens on 127.0.0.1 only; SIGTERM ends it",
             "tests/pipeline/test_make_airflow_binds.py::test_make_airflow_listens_on_loopback_only_and_sigterm_ends_it",
             "leak"),
    replayed("45-8-params-edit-kept", "8",
             "a user's edit to params.yaml during a DAG run is kept",
             "tests/unit/test_run_copy.py::test_a_users_edit_to_params_yaml_during_a_run_is_kept",
             "lost"),
    replayed("45-9-run-id-branches", "9",
             "two run ids that clean to one name get two branches",
             "tests/unit/test_run_copy.py::test_two_run_ids_that_clean_to_one_name_get_two_branches",
             "lost"),
    Case("45-10-api-malformed-json", "10", "chat server: HTTP 200 with malformed JSON",
         api_reply_case([_raw(_NOT_JSON["malformed"])], 3),
         "tests/unit/test_api_hostile.py::test_a_body_that_is_not_json_is_retried_then_named",
         "45"),
    Case("45-10-api-html-page", "10", "chat server: HTTP 200 text/html proxy page echoing the key",
         api_reply_case([_raw(_NOT_JSON["html"], "text/html; charset=utf-8")], 3),
         "tests/unit/test_api_hostile.py::test_a_body_that_is_not_json_is_retried_then_named",
         "45"),
    Case("45-10-api-not-utf8", "10", "chat server: HTTP 200 with bytes that are not UTF-8",
         api_reply_case([_raw(_NOT_JSON["not-utf8"])], 3),
         "tests/unit/test_api_hostile.py::test_a_body_that_is_not_json_is_retried_then_named",
         "45"),
    replayed("45-10-generate-stage-html", "10",
             "the generate stage against a proxy's HTML page: one line, exit 2",
             "tests/stages/test_api_stage_hostile.py::test_the_generate_stage_fails_in_one_line_on_a_page_that_is_not_json",
             "traceback"),
    Case("45-11-api-base-url-null", "11",
         "params_check: an api row selected, generation.api.base_url null",
         params_case(api_row(None), "generation.api.base_url"),
         "tests/unit/test_api_hostile.py::test_an_api_row_without_a_base_url_fails_the_params_check",
         "45"),
    Case("45-11-api-key-unset", "11", "params_check: an api row selected, no key variable set",
         api_key_unset_case,
         "tests/unit/test_api_hostile.py::test_params_check_asks_for_the_key_variable", "45"),
    Case("45-12-random-kg", "12",
         "custom KG, a random graph: ingest, mine_rules, build_benchmark",
         no_rule_case(_random_links(400, 300, 100)),
         "tests/stages/test_empty_inputs.py::test_mine_rules_on_a_kg_without_rules_stops_and_publishes_nothing",
         "45"),
    Case("45-12-chain-kg", "12",
         "custom KG, a single-relation chain: ingest, mine_rules, build_benchmark",
         no_rule_case(_chain(150)),
         "tests/stages/test_empty_inputs.py::test_mine_rules_on_a_kg_without_rules_stops_and_publishes_nothing",
         "45"),
    Case("45-12-self-loop-kg", "12",
         "custom KG of self-loops only: ingest, mine_rules, build_benchmark",
         self_loop_case,
         "tests/stages/test_empty_inputs.py::test_a_self_loop_kg_stops_build_benchmark_on_its_empty_f_r",
         "45"),
    *[
        Case(f"45-13-time-{short}", "13", f"custom KG time {value!r} (time_format int): ingest",
             kg_time_case(value),
             "tests/unit/test_kg_hostile_input.py::test_a_custom_kg_time_that_is_no_ascii_integer_in_range_names_the_line",
             "45")
        for short, value in [("minus-minus", "--5"), ("superscript", "²"),
                             ("overflow", "99999999999999999999999"),
                             ("arabic-indic", "٢٠٠٠")]
    ],
    Case("45-14-bank-deleted", "14",
         "build_benchmark with rules/bank.parquet deleted after mine_rules",
         bank_deleted_case,
         "tests/stages/test_empty_inputs.py::test_build_benchmark_without_its_bank_names_the_stage_that_writes_it",
         "45"),
    replayed("45-15-training-resume", "15",
             "a LoRA training SIGKILLed after a checkpoint resumes from it",
             "tests/unit/test_generator_training.py::test_a_killed_training_resumes_from_its_last_checkpoint",
             "lost"),
    replayed("45-16-sigkilled-stage-run", "16",
             "a SIGKILLed stage's run is recorded KILLED by the next stage",
             "tests/unit/test_tracking.py::test_a_sigkilled_stage_is_recorded_killed_by_the_next_stage",
             "lost"),
    replayed("45-17-mlflow-ui-sigkill", "17",
             "SIGKILL to make mlflow-ui's group leaves no server on the port",
             "tests/unit/test_makefile.py::test_a_sigkilled_make_mlflow_ui_leaves_no_server_behind",
             "hang"),
    replayed("45-18-kfp-param-kept-out", "18",
             "kfp run-local --param: the run's lock is not collected into the project",
             " ".join(KFP_KEPT_OUT),
             "lost"),
    replayed("45-18-kfp-run-local-param", "18",
             "kfp run-local --param ingest.duplicates=keep for real: dvc.lock kept",
             KFP_E2E,
             "lost"),
    Case("45-19-conf-million-configs", "19",
         "validate_run_conf: 1,000,000 generation.configs entries, refused within 5 s",
         run_conf_case("million", "1,000"),
         "tests/unit/test_hostile_round3_inputs.py::test_a_run_conf_is_capped_and_names_each_dataset_once",
         "45"),
    Case("45-19-conf-duplicate-dataset", "19", "validate_run_conf: a dataset listed twice",
         run_conf_case("duplicate", "listed twice"),
         "tests/unit/test_hostile_round3_inputs.py::test_a_run_conf_is_capped_and_names_each_dataset_once",
         "45"),
    Case("45-19-params-20mb-model", "19", "params_check: a 20 MB generation.model, within 10 s",
         params_text_case(lambda: _params_text_with(r"\n  model: smollm2\n",
                                                    f"\n  model: {'m' * 20_000_000}\n"),
                          10, "characters"),
         "tests/unit/test_hostile_round3_inputs.py::test_a_long_string_in_any_section_fails_naming_its_key_and_length",
         "45"),
    Case("45-19-duplicate-datasets", "19", "params_check: datasets [icews14, icews14]",
         params_case(setter("datasets", ["icews14", "icews14"]), "listed twice"),
         "tests/unit/test_hostile_round3_inputs.py::test_a_dataset_listed_twice_in_params_is_refused",
         "45"),
    Case("45-19-duplicate-configs", "19",
         "params_check: generation.configs naming standard_rag twice",
         params_case(setter("generation.configs",
                            ["standard_rag", "rulerag_icl", "standard_rag"]), "listed twice"),
         "tests/unit/test_hostile_round3_inputs.py::test_a_name_listed_twice_in_a_list_dvc_expands_is_refused",
         "45"),
    Case("45-19-api-content-null", "19", "chat server: content null (a content filter)",
         api_reply_case([(200, _NULL_CONTENT)], 1),
         "tests/unit/test_api_hostile.py::test_null_content_is_an_error_not_an_empty_answer",
         "45"),
]  # fmt: skip
CASES += ROUND_45


def main(argv: list[str] | None = None) -> int:
    from rulerag import markdown

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-k", default="", help="run the cases whose id contains this")
    parser.add_argument(
        "--round",
        choices=sorted({c.round for c in CASES}),
        help="run one issue's round only (28: the first, 45: the ids 45-<n>-...)",
    )
    args = parser.parse_args(argv)
    counts: Counter[str] = Counter()
    began = time.monotonic()
    print(markdown.row(["case", "section", "what", "verdict", "s", "detail"]))
    print(markdown.rule("llllll"))
    for case in CASES:
        if args.k not in case.id or args.round not in (None, case.round):
            continue
        tmp = Path(tempfile.mkdtemp(prefix="hostile-"))
        started = time.monotonic()
        try:
            outcome = case.run(tmp)
        except Hang as hang:
            outcome = Outcome("hang", str(hang))
        except subprocess.TimeoutExpired as err:
            outcome = Outcome("hang", f"killed after {err.timeout:g} s")
        except Exception as err:  # a case that crashes the harness is a finding, not a stop
            outcome = Outcome("traceback", f"{type(err).__name__}: {err}"[:160])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        seconds = time.monotonic() - started
        counts[outcome.verdict] += 1
        cells = [case.id, case.section, case.what, outcome.verdict, f"{seconds:.0f}"]
        print(markdown.row([*cells, markdown.escape(outcome.detail)]), flush=True)
    print("\n" + ", ".join(f"{v}: {counts[v]}" for v in VERDICTS)
          + f" ({sum(counts.values())} cases, {time.monotonic() - began:.0f} s)")  # fmt: skip
    return 0 if set(counts) <= {"clear"} else 1


if __name__ == "__main__":
    sys.exit(main())
