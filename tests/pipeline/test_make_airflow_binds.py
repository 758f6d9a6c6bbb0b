"""The real `make airflow` listens on 127.0.0.1 only, and a SIGTERM to make's group ends all of it.

Issue 45, item 7: under `make airflow` (then `airflow standalone`) the scheduler's and the
triggerer's log servers listened on every interface (0.0.0.0 and [::], ports 8793 and 8794:
Airflow 3 binds them on host "" and has no setting for it), where the API server and UI listen
on 127.0.0.1. The target now starts the components itself, those two with
`--skip-serve-logs`. Here it runs on free ports (the log servers' ports moved to free ones as
well, through `[logging]`'s environment variables, so an old target would open them there and
not collide with a running Airflow) and a throw-away AIRFLOW_HOME; every listening socket of
its process tree is checked once Airflow reports every component healthy.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

PROJECT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("airflow"),
    pytest.mark.skipif(shutil.which("make") is None, reason="needs make"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the supervisor is Linux's"),
]

#: seconds for `airflow db migrate` on a new SQLite database and the four components to
#: report healthy (two busy cores: a few minutes)
START_S = 600
#: seconds the listening sockets are watched once Airflow is healthy (the log servers start
#: beside the scheduler and triggerer, a moment after those heartbeat)
WATCH_S = 15


def _free_ports(count: int) -> list[int]:
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _tree(root: int) -> list[psutil.Process]:
    try:
        top = psutil.Process(root)
        return [top, *top.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _listening(root: int) -> set[tuple[str, int, str]]:
    """(address, port, process name) of every listening TCP socket of `root`'s tree."""
    found: set[tuple[str, int, str]] = set()
    for proc in _tree(root):
        try:
            sockets = proc.net_connections(kind="tcp")
            name = " ".join(proc.cmdline()[:3])
        except psutil.Error:
            continue
        for sock in sockets:
            if sock.status == psutil.CONN_LISTEN:
                found.add((sock.laddr.ip, sock.laddr.port, name))
    return found


def _health(port: int) -> dict:
    try:
        url = f"http://127.0.0.1:{port}/api/v2/monitor/health"
        with urllib.request.urlopen(url, timeout=5) as reply:
            return json.loads(reply.read().decode())
    except (urllib.error.URLError, OSError, ValueError):
        return {}


def _all_healthy(health: dict) -> bool:
    parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
    return all((health.get(part) or {}).get("status") == "healthy" for part in parts)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    return [proc for proc in procs if _running(proc)]


def _of_home(home: Path) -> list[psutil.Process]:
    """Processes of this user whose AIRFLOW_HOME is `home` (the target's, however started)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("AIRFLOW_HOME") == str(home) and proc.status() != "zombie":
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_make_airflow_listens_on_loopback_only_and_sigterm_ends_it(tmp_path: Path) -> None:
    api, worker_logs, trigger_logs = _free_ports(3)
    home = tmp_path / "airflow"
    venv = PROJECT / ".venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(worker_logs),
        AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(trigger_logs),
        PYTHONUNBUFFERED="1",
    )
    log = tmp_path / "make-airflow.log"
    with log.open("wb") as out:
        make = subprocess.Popen(
            ["make", "--no-print-directory", "-C", str(PROJECT), "-o", f"{venv}/.installed",
             f"VENV={venv}", f"AIRFLOW_PORT={api}", f"AIRFLOW_STATE={home}", "airflow"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,  # make's own process group, as in a terminal
        )  # fmt: skip
    tree: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + START_S
        while not _all_healthy(health := _health(api)):
            assert make.poll() is None, f"make airflow exited:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, (
                f"not healthy after {START_S} s: {health}\n{log.read_text()[-4000:]}"
            )
            time.sleep(2)
        listening: set[tuple[str, int, str]] = set()
        watch_until = time.monotonic() + WATCH_S
        while time.monotonic() < watch_until:
            listening |= _listening(make.pid)
            if any(not _loopback(ip) for ip, _port, _name in listening):
                break
            time.sleep(1)
        tree = _tree(make.pid)
        exposed = sorted(entry for entry in listening if not _loopback(entry[0]))
        assert not exposed, f"listening beyond loopback: {exposed}"
        assert ("127.0.0.1", api) in {(ip, port) for ip, port, _ in listening}, listening
        assert {worker_logs, trigger_logs}.isdisjoint(port for _, port, _ in listening)
    finally:
        tree = tree or _tree(make.pid)
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGTERM)
        try:
            make.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait(timeout=30)
        gone_by = time.monotonic() + 60  # the watchdog's grace period, and then some
        while time.monotonic() < gone_by and (_alive(tree) or _of_home(home)):
            time.sleep(0.5)
        left = {p.pid: p for p in [*_alive(tree), *_of_home(home)]}
        described: list[object] = []
        for proc in left.values():  # a failing run cleans up after itself
            try:
                described.append(proc.cmdline()[:4])
                proc.kill()
            except psutil.Error:
                described.append(proc.pid)
    assert make.returncode in (0, 2, 143, -signal.SIGTERM), make.returncode
    assert not described, f"left after SIGTERM to make's group: {described}"
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", api)) != 0  # the API port is free
    assert "stopping" in log.read_text(errors="replace")
