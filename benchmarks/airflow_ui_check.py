"""The Airflow UI as a user meets it after `make airflow`: each page of the DAG drawn in a real
headless Chromium, timed, with the API server's memory sampled throughout (issue 43).

    apt-get install chromium   # Debian's; or --chromium another Chromium/Chrome
    .venv/bin/python benchmarks/airflow_ui_check.py [--project DIR] [--visits 2]

A scratch copy of `--project` (default: this checkout; an older commit's `git worktree`
measures its DAG) runs `make airflow` with this checkout's venv, the KG mirror from
RULERAG_DATA_DIR or ../shared/kg, on a free port. Once the DAG is parsed it is unpaused and
the run `{"datasets": ["nell995"], "stages": ["ingest"]}` is triggered through the REST API and
waited for. Then a fresh Chromium, logged in with the admin password Airflow generated, opens
each page `--visits` times:

- grid: `/dags/rulerag` in the grid view, drawn when the run's cell of `apply_conf` is there;
- graph: the same in the graph view, drawn when its nodes are (`record_overrides` among them);
- trigger form: the Trigger button clicked, drawn when the form shows the overrides field;
- task instance: `/dags/rulerag/runs/<run>/tasks/<dataset>.ingest`, drawn when its log shows
  the `dvc repro` it ran.

Printed: the seconds until each page was drawn (navigation to drawn, each visit), the seconds
of the structure request every DAG page waits on, the API server's peak RSS (the process and
its children, sampled every 0.2 s from start to end), the DAG file's size as Airflow stores it,
and what was left of Airflow 30 s after `make airflow`'s process group got SIGTERM (killed then).
Exit status 1 when a page is not drawn within `--limit` seconds, the API server passes
`--rss-limit` GiB, or a process is left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
from checkout import short_commit
from chromium import Browser, free_port

from rulerag.orchestration.local_airflow import RestApi, wait_for_run
from rulerag.orchestration.project_copy import copy_project, kg_mirror_dir

PROJECT = Path(__file__).resolve().parents[1]
GIB = 1024**3


class Api(RestApi):
    """Airflow's REST API with a token of the generated admin user (`log_in_as_admin`)."""

    def __init__(self, base: str) -> None:
        super().__init__(base, timeout=300)

    def log_in_as_admin(self, passwords: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not passwords.is_file():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{passwords} not written after {timeout:.0f} s")
            time.sleep(1)
        user, password = next(iter(json.loads(passwords.read_text()).items()))
        body = {"username": user, "password": password}
        while True:  # the file is written before the server listens
            try:
                self.token = self.request("POST", "/auth/token", body)["access_token"]
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)


class RssSampler(threading.Thread):
    """The peak RSS of the API server's process tree, and of everything under `root`."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.api_peak = 0
        self.all_peak = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.2):
            try:
                tree = psutil.Process(self.root).children(recursive=True)
            except psutil.Error:
                continue
            api, total = 0, 0
            for proc in tree:
                with contextlib.suppress(psutil.Error):
                    rss = proc.memory_info().rss
                    total += rss
                    if is_api_server(proc):
                        api += rss
            self.api_peak = max(self.api_peak, api)
            self.all_peak = max(self.all_peak, total)


def is_api_server(proc: psutil.Process) -> bool:
    """The API server (`airflow api-server`, which names itself `airflow api_server`) and its
    uvicorn workers."""
    try:
        chain = [proc, *proc.parents()]
        return any("api_server" in " ".join(p.cmdline()) or "api-server" in " ".join(p.cmdline())
                   for p in chain)  # fmt: skip
    except psutil.Error:
        return False


@contextlib.contextmanager
def make_airflow(project: Path, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`make airflow` in `project` with this checkout's venv, in a process group of its own;
    on exit SIGTERM to the group, as a user's Ctrl-C or a service manager does."""
    venv = PROJECT / ".venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    # the address as variables too: a Makefile older than AIRFLOW_PORT serves [api] port, and
    # its tasks reach the execution API through [api] base_url
    env.update(
        RULERAG_DATA_DIR=str(kg_mirror_dir().resolve()),
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}",
    )
    command = [
        "make", "--no-print-directory", "-o", f"{venv}/.installed", f"VENV={venv}",
        f"AIRFLOW_PORT={port}", "airflow",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)


def left_behind(project: Path) -> list[psutil.Process]:
    """Airflow processes of `project`'s `make airflow` still alive (by their AIRFLOW_HOME)."""
    home = str(project / ".airflow")
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("AIRFLOW_HOME") == home and proc.status() != "zombie":
                found.append(proc)
    return found


#: page -> (how to open it, JavaScript true once it is drawn)
def pages(base: str, run_id: str, task_id: str, instance: str) -> dict[str, tuple[str, str]]:
    dag = f"{base}/dags/rulerag"
    return {
        "grid": (dag, f"document.getElementById('grid-{run_id}-apply_conf') !== null"),
        "graph": (
            dag,
            "[...document.querySelectorAll('.react-flow__node')]"
            ".some(n => n.getAttribute('data-id') === 'record_overrides')",
        ),
        "trigger form": (
            "click:Trigger",
            "[...document.querySelectorAll('[role=dialog]')]"
            ".some(d => d.innerText.includes('params.yaml overrides'))",
        ),
        "task instance": (
            f"{dag}/runs/{run_id}/tasks/{task_id}",
            f"document.body.innerText.includes('--single-item {instance}')",
        ),
    }


def open_page(browser: Browser, how: str, drawn: str, view: str, limit: float) -> float | None:
    """Seconds from the navigation (or click) until `drawn` holds; None past `limit`."""
    if how.startswith("click:"):
        label = how.removeprefix("click:")
        browser.wait_for("[...document.querySelectorAll('button')]"
                         f".some(b => b.innerText.trim() === '{label}')", limit)  # fmt: skip
        started = time.monotonic()
        browser.evaluate("[...document.querySelectorAll('button')]"
                         f".find(b => b.innerText.trim() === '{label}').click()")  # fmt: skip
    else:
        browser.evaluate(f"localStorage.setItem('default_dag_view', JSON.stringify('{view}'))")
        started = time.monotonic()
        browser.navigate(how)
    seconds = browser.wait_for(drawn, limit)
    return None if seconds is None else time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, default=PROJECT)
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM") or "chromium")
    parser.add_argument("--dataset", default="nell995")
    parser.add_argument("--visits", type=int, default=2)
    parser.add_argument("--limit", type=float, default=5.0, help="seconds a page may take")
    parser.add_argument("--rss-limit", type=float, default=2.5, help="GiB the API server may use")
    parser.add_argument("--wait", type=float, default=180, help="seconds a page is waited for")
    parser.add_argument("--screenshots", type=Path, help="a folder for a PNG of each page")
    args = parser.parse_args(argv)
    chromium = shutil.which(args.chromium)
    if chromium is None:
        parser.error(f"{args.chromium!r} not found: apt-get install chromium, or --chromium PATH")
    source = args.project.resolve()
    scratch = Path(tempfile.mkdtemp(prefix="rulerag-airflow-ui-"))
    project = copy_project(scratch / "project", source, keep_lock=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    api = Api(base)
    run_id, task_id = "ui-check", f"{args.dataset}.ingest"
    times: dict[str, list[float | None]] = {}
    structure: list[float] = []
    started = time.monotonic()
    try:
        with make_airflow(project, port, scratch / "make-airflow.log") as proc:
            sampler = RssSampler(proc.pid)
            sampler.start()
            passwords = project / ".airflow" / "simple_auth_manager_passwords.json.generated"
            api.log_in_as_admin(passwords, 300)
            while True:
                with contextlib.suppress(urllib.error.HTTPError, OSError):
                    api.call("GET", "/dags/rulerag")
                    break
                if time.monotonic() - started > 600 or proc.poll() is not None:
                    raise RuntimeError(f"the DAG was not served; see {scratch}/make-airflow.log")
                time.sleep(1)
            parsed_s = time.monotonic() - started
            api.call("PATCH", "/dags/rulerag", {"is_paused": False})
            conf = {"datasets": [args.dataset], "stages": ["ingest"]}
            api.call("POST", "/dags/rulerag/dagRuns",
                     {"dag_run_id": run_id, "logical_date": None, "conf": conf})  # fmt: skip
            dag_run = wait_for_run(api, run_id, 900)
            if dag_run["state"] != "success":
                tis = api.call("GET", f"/dags/rulerag/dagRuns/{run_id}/taskInstances")
                failed = [t["task_id"] for t in tis["task_instances"] if t["state"] == "failed"]
                print(f"run {run_id} {dag_run['state']}: failed tasks {failed}", flush=True)
            tasks = api.call("GET", "/dags/rulerag/tasks")["total_entries"]
            browser = Browser(chromium)
            try:
                browser.call("Network.setCookie", name="_token", value=api.token,
                             url=f"{base}/", httpOnly=True)  # fmt: skip
                browser.navigate(f"{base}/")
                browser.wait_for("document.readyState === 'complete'", 30)
                instance = f"ingest@{args.dataset}"
                for visit in range(args.visits):
                    for name, (how, drawn) in pages(base, run_id, task_id, instance).items():
                        view = "graph" if name in ("graph", "trigger form") else "grid"
                        if how.startswith("click:"):  # the DAG page first, then the button
                            browser.evaluate("localStorage.setItem('default_dag_view', "
                                             "JSON.stringify('graph'))")  # fmt: skip
                            browser.navigate(f"{base}/dags/rulerag")
                        seconds = open_page(browser, how, drawn, view, args.wait)
                        times.setdefault(name, []).append(seconds)
                        if args.screenshots and visit == 0:
                            args.screenshots.mkdir(parents=True, exist_ok=True)
                            browser.screenshot(str(args.screenshots / f"{name}.png"))
                    t0 = time.monotonic()
                    api.request("GET", "/ui/structure/structure_data?dag_id=rulerag")
                    structure.append(time.monotonic() - t0)
            finally:
                browser.close()
            sampler.stopped.set()
        deadline = time.monotonic() + 30
        while left_behind(project) and time.monotonic() < deadline:
            time.sleep(1)
        leftovers = left_behind(project)
        for leftover in leftovers:
            with contextlib.suppress(psutil.Error):
                leftover.kill()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"project {source} (commit {short_commit(source)}); load average {os.getloadavg()}")
    print(f"Airflow up and the DAG served after {parsed_s:.0f} s; run {run_id}: "
          f"{dag_run['state']}")  # fmt: skip
    print(f"DAG: {tasks} tasks")
    print(f"{'page':16} " + " ".join(f"visit {i + 1:>2}" for i in range(args.visits)))
    slow = False
    for name, seconds in times.items():
        cells = " ".join(f"{s:8.1f}" if s is not None else f"  >{args.wait:4.0f}" for s in seconds)
        print(f"{name:16} {cells}")
        slow |= any(s is None or s > args.limit for s in seconds)
    print("structure_data request: " + ", ".join(f"{s:.2f} s" for s in structure))
    print(f"API server peak RSS {sampler.api_peak / GIB:.2f} GiB; everything under "
          f"`make airflow` {sampler.all_peak / GIB:.2f} GiB")  # fmt: skip
    names = [" ".join(p.cmdline()[:3]) for p in leftovers]
    print(f"left 30 s after SIGTERM to make airflow's group: {names or 'nothing'}")
    heavy = sampler.api_peak / GIB > args.rss_limit
    return 1 if slow or heavy or leftovers or dag_run["state"] != "success" else 0


if __name__ == "__main__":
    sys.exit(main())
