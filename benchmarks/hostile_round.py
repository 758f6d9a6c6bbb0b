"""Issue 28's hostile-input and fault-injection round, run again: each case as a user or an
attacker would try it, on a scratch copy of the project, every server on 127.0.0.1.

    python benchmarks/hostile_round.py            # all cases, a table and the counts
    python benchmarks/hostile_round.py -k params  # the cases whose id contains `params`

Each case ends in one verdict:

    clear      refused with one line naming the key, file or field (exit 2, no traceback)
    silent     accepted: nothing said, or a crash later than the check that should have said it
    traceback  a Python traceback reached the user for an input or environment error
    leak       a secret appeared in output, a log, a spool file, dvc.lock or a prediction
    injection  a command nobody asked for ran (a marker file appeared)

Sections 1, 2 and 5 are run here as a user would (params checks, `dvc repro` on a scratch
copy, a stage against an unreachable tracking server, a chat server that echoes the key). The
cases of sections 3, 4, 6, 7 and 8 need a process killed at a chosen moment, a disk that fills
up, a file cut short: each is replayed through the test that reproduces it (named in its `test`
field; `pytest` passing means the case ends as `clear`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
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


def scratch_project(into: Path) -> Path:
    """The project's tracked and untracked-but-not-ignored files, as a fresh git repository."""
    from tests.conftest import copy_project

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

    from rulerag.generation.api import ApiError, ApiGenerator
    from tests.support.fake_openai import FakeOpenAI

    encoded = base64.b64encode(f"user:{SECRET}".encode()).decode()
    answer = {"choices": [{"message": {"content": f"Answer: Kabul {SECRET}"}}]}
    with FakeOpenAI([(200, answer), (401, {"error": encoded})]) as server:
        generator = ApiGenerator(base_url=server.url, model="m", api_key=SECRET, max_retries=0)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-k", default="", help="run the cases whose id contains this")
    args = parser.parse_args(argv)
    counts: Counter[str] = Counter()
    print("| case | section | what | verdict | detail |\n|---|---|---|---|---|")
    for case in (c for c in CASES if args.k in c.id):
        tmp = Path(tempfile.mkdtemp(prefix="hostile-"))
        try:
            outcome = case.run(tmp)
        except Exception as err:  # a case that crashes the harness is a finding, not a stop
            outcome = Outcome("traceback", f"{type(err).__name__}: {err}"[:160])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        counts[outcome.verdict] += 1
        detail = outcome.detail.replace("|", "\\|")
        print(f"| {case.id} | {case.section} | {case.what} | {outcome.verdict} | {detail} |")
    print("\n" + ", ".join(f"{v}: {counts[v]}" for v in ("clear", "silent", "traceback",
                                                          "leak", "injection")))  # fmt: skip
    return 0 if set(counts) <= {"clear"} else 1


if __name__ == "__main__":
    sys.exit(main())
