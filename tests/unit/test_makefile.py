"""What the Makefile exports to every stage it runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
SHOW = "show-pipeline-run: ; @echo $$RULERAG_PIPELINE_RUN $$RULERAG_PIPELINE_RUN"


def _pipeline_run() -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "RULERAG_PIPELINE_RUN"}
    done = subprocess.run(
        ["make", "-s", "-C", str(PROJECT), "--eval", SHOW, "show-pipeline-run"],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_pipeline_run_tag_is_unique_per_invocation_and_fixed_within_it() -> None:
    """`make-<UTC time>-<8 hex digits>`, the same wherever one invocation expands it (the
    old `$$$$` reached the stages as a literal `$$`, shared by every run in a second)."""
    first, again = _pipeline_run()
    assert first == again
    assert re.fullmatch(r"make-\d{8}T\d{6}-[0-9a-f]{8}", first), first
    assert _pipeline_run()[0] != first


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_airflow_starts_as_many_workers_as_the_dag_uses() -> None:
    """The DAG runs one task at a time; Airflow's default parallelism (32 LocalExecutor
    workers, 6 GiB) would only hold memory."""
    done = subprocess.run(
        ["make", "-n", "-C", str(PROJECT), "airflow"], capture_output=True, text=True, check=True
    )
    assert "AIRFLOW__CORE__PARALLELISM=1" in done.stdout
    assert "AIRFLOW__API__HOST=127.0.0.1" in done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_airflow_writes_the_login_before_airflow_starts() -> None:
    """`airflow standalone` generated the admin password into a 0644 file in a 0755 home and
    printed it: `make airflow` now starts it through rulerag.orchestration.airflow_home, which
    writes the passwords file (0600, home 0700) first, and names that file to Airflow."""
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(PROJECT), "airflow"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    command = done.stdout.replace("\\\n", " ").strip().splitlines()[-1]
    home = f"{PROJECT}/.airflow"
    assert f" AIRFLOW_HOME={home} " in command
    assert (
        f" AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE={home}/"
        "simple_auth_manager_passwords.json.generated "
    ) in command
    assert command.split()[-8:] == [
        ".venv/bin/python", "-m", "rulerag.orchestration.airflow_home", "--serve",
        "--host", "127.0.0.1", "--port", "8080",
    ], command  # fmt: skip


def test_make_airflow_runs_the_components_without_log_servers() -> None:
    """Issue 45, item 7: `airflow standalone` started the scheduler's and the triggerer's log
    servers, which Airflow binds on every interface (8793, 8794). `make airflow` runs the
    components itself, under one supervisor, after `airflow db migrate`, those two with
    `--skip-serve-logs` (tests/pipeline/test_make_airflow_binds.py runs the real target)."""
    from rulerag.orchestration.airflow_home import MIGRATE, local_components

    components = local_components("127.0.0.2", 8181)
    assert list(components) == ["api-server", "scheduler", "dag-processor", "triggerer"]
    assert components["api-server"] == [
        "airflow", "api-server", "--host", "127.0.0.2", "--port", "8181", "--workers", "1",
    ]  # fmt: skip
    for name in ("scheduler", "triggerer"):
        assert "--skip-serve-logs" in components[name]
    assert "standalone" not in {word for cmd in components.values() for word in cmd}
    assert MIGRATE == ("airflow", "db", "migrate")


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("args", [[], ["AIRFLOW_HOST=127.0.0.2", "AIRFLOW_PORT=8181"]])
def test_make_airflow_links_to_the_address_it_serves(args: list[str]) -> None:
    """The MLflow runs' links back to Airflow (rulerag/tracking/links.py reads
    AIRFLOW__API__BASE_URL, else its default) name the host and port `make airflow` serves:
    a link to localhost from a browser logged in on 127.0.0.1 landed on the login page."""
    from rulerag.tracking.links import DEFAULT_AIRFLOW_URL, airflow_base_url

    done = subprocess.run(
        ["make", "-n", "-C", str(PROJECT), "airflow", *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    env = dict(re.findall(r"\b(AIRFLOW__API__(?:HOST|PORT|BASE_URL))=(\S+)", done.stdout))
    served = f"http://{env['AIRFLOW__API__HOST']}:{env['AIRFLOW__API__PORT']}"
    assert airflow_base_url({"AIRFLOW__API__BASE_URL": env["AIRFLOW__API__BASE_URL"]}) == served
    if not args:
        assert airflow_base_url({}) == DEFAULT_AIRFLOW_URL == served


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_mlflow_ui_serves_the_project_store_from_where_it_is() -> None:
    """`make mlflow-ui` is `python -m rulerag.tracking ui` on this folder (the server that
    tests/pipeline/test_tracking_store.py checks after a move), and rewrites nothing first."""
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(PROJECT), "mlflow-ui"],
        capture_output=True,
        text=True,
        check=True,
    )
    command = done.stdout.replace("\\\n", " ").strip().splitlines()[-1]
    assert "-m rulerag.orchestration.supervise --" in command  # nothing left behind
    assert command.split()[-7:-3] == ["-m", "rulerag.tracking", "ui", "--project-dir"]
    assert command.split()[-3:] == [str(PROJECT), "--port", "5000"], command
    assert "reroot" not in done.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_a_sigkilled_make_mlflow_ui_leaves_no_server_behind(tmp_path: Path) -> None:
    """Issue 45, case 17: SIGKILL to `make mlflow-ui`'s process group left its server's worker
    on the port (and its job runners) with parent 1."""
    import signal
    import socket
    import time
    import urllib.request

    import psutil

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    venv = PROJECT / ".venv"
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "-C", str(PROJECT), "-o", f"{venv}/.installed",
         f"CURDIR={tmp_path}", f"MLFLOW_PORT={port}", "mlflow-ui"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, "the UI did not start"
            time.sleep(0.5)
    tree = psutil.Process(proc.pid).children(recursive=True)
    assert tree
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    gone_by = time.monotonic() + 40  # the watchdog's grace period and then some
    while time.monotonic() < gone_by and any(p.is_running() and p.status() != "zombie"
                                             for p in tree):  # fmt: skip
        time.sleep(0.5)
    left = [p for p in tree if p.is_running() and p.status() != "zombie"]
    for p in left:
        p.kill()
    assert not left, [p.cmdline()[:4] for p in left]
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # the port is free


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_kfp_compiles_in_the_kfp_venv_with_the_projects_interpreter_first() -> None:
    """The KFP SDK's venv runs the compiler on this checkout's code; the project's venv comes
    first on PATH, since the graph is read by the project's interpreter (docs/operations.md)."""
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(PROJECT), "kfp",
         "KFP_DATASETS=icews14 wiki"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(f"PATH={PROJECT}/.venv/bin:$PATH PYTHONPATH={PROJECT} "), last
    assert " .venv/kfp/bin/python -m rulerag.orchestration.kfp_pipeline compile " in last
    assert last.endswith("--output 'kfp/rulerag-pipeline.yaml' --datasets icews14 wiki"), last


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_a_bare_make_lists_every_target_and_runs_nothing() -> None:
    """`make` and `make help`: every phony target with its one line (a bare `make` used to run
    `setup` without a word)."""
    bare = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(PROJECT)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    listed = {line.split()[0] for line in bare.stdout.splitlines() if line.strip()}
    text = (PROJECT / "Makefile").read_text()
    phony = set()
    for block in re.findall(r"^\.PHONY:((?:.*\\\n)*.*)$", text, flags=re.M):
        phony |= set(block.replace("\\\n", " ").split())
    assert phony and phony <= listed, sorted(phony - listed)
    assert all(len(line.split(None, 1)) == 2 for line in bare.stdout.splitlines() if line.strip())
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(PROJECT)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "pip" not in dry.stdout and "venv" not in dry.stdout
