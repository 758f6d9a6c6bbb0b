"""`make airflow`'s supervisor: a stop reaches every process the server started, even one in a
session of its own or orphaned, frees its ports and leaves no zombie (issue 32: SIGTERM to
`airflow standalone` orphaned its children with their ports open; Ctrl-C hung over zombies)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A stand-in for `airflow standalone`: ignores SIGTERM and SIGINT (as a server busy shutting
# down would), starts a listener in its own group, one in a new session (setsid), and an
# orphan (its parent exits at once), then writes their pids (and its own) and ports.
SERVER = r"""
import os, signal, socket, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
LISTEN = (
    "import signal, socket, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
    "print(s.getsockname()[1], flush=True)\n"
    "time.sleep(600)\n"
)
out = sys.argv[1]
same = subprocess.Popen([sys.executable, "-c", LISTEN], stdout=subprocess.PIPE, text=True)
own = subprocess.Popen([sys.executable, "-c", LISTEN], stdout=subprocess.PIPE, text=True,
                       start_new_session=True)
middle = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', sys.argv[1]],"
    " stdout=subprocess.PIPE, text=True); print(p.pid, p.stdout.readline().strip(), flush=True)",
    LISTEN], stdout=subprocess.PIPE, text=True)
orphan_pid, orphan_port = middle.stdout.readline().split()
middle.wait()
ports = [same.stdout.readline().strip(), own.stdout.readline().strip(), orphan_port]
pids = [same.pid, own.pid, int(orphan_pid), os.getpid()]
with open(out + ".tmp", "w") as handle:
    handle.write(" ".join(map(str, pids)) + "\n" + " ".join(ports) + "\n")
os.replace(out + ".tmp", out)
if len(sys.argv) > 2:
    sys.exit(int(sys.argv[2]))
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rpartition(b")")[2].split()[0]
    except OSError:
        return True
    return state in (b"X",)  # a zombie still counts as left behind


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _assert_all_stopped(pids: list[int], ports: list[int]) -> None:
    """No process of `pids` is left (what is, is killed: a failing run cleans up after
    itself) and no port of `ports` is open."""
    left = [pid for pid in pids if not _gone(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []
    assert [port for port in ports if _port_open(port)] == []


def _start(
    tmp_path: Path, *server_args: str, group: bool = False
) -> tuple[subprocess.Popen, list[int], list[int]]:
    """The supervisor on the stand-in server; `group`: in a process group of its own, as
    `make airflow` is in make's."""
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    marker = tmp_path / "started"
    # stderr to a file, not a pipe: processes left behind would hold a pipe open
    with open(tmp_path / "stderr.txt", "w") as stderr:
        sup = subprocess.Popen(
            [sys.executable, "-m", "rulerag.orchestration.supervise", "--grace", "2", "--",
             sys.executable, str(script), str(marker), *server_args],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=stderr,
            start_new_session=group,
        )  # fmt: skip
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert time.monotonic() < deadline, "the stand-in server did not start"
        assert sup.poll() is None or server_args, (tmp_path / "stderr.txt").read_text()
        time.sleep(0.1)
    pids_line, ports_line = marker.read_text().splitlines()
    return sup, [int(p) for p in pids_line.split()], [int(p) for p in ports_line.split()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_signal_ends_every_process_and_frees_the_ports(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    sup, pids, ports = _start(tmp_path)
    assert all(map(_port_open, ports)) and not any(map(_gone, pids))
    sup.send_signal(sig)
    assert sup.wait(timeout=60) == code
    assert "stopping" in (tmp_path / "stderr.txt").read_text()
    _assert_all_stopped(pids, ports)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")
def test_a_server_that_exits_leaves_nothing_behind_and_its_status_is_kept(
    tmp_path: Path,
) -> None:
    sup, pids, ports = _start(tmp_path, "3")
    assert sup.wait(timeout=60) == 3
    _assert_all_stopped(pids, ports)


def test_a_missing_command_is_named() -> None:
    # in a process of its own: the supervisor makes its process a subreaper, and pytest as one
    # would adopt (and never reap) the orphans of the tests after this one
    done = subprocess.run(
        [sys.executable, "-m", "rulerag.orchestration.supervise", "--", "no-such-command-rulerag"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 127
    assert "cannot start 'no-such-command-rulerag'" in done.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")
@pytest.mark.parametrize("how", ["sigkill", "group term then kill"])
def test_nothing_outlives_a_supervisor_that_is_killed(tmp_path: Path, how: str) -> None:
    """Issue 43, item 5: after heavy use, SIGTERM to `make airflow`'s group left the API server
    alive with parent 1. A supervisor that cannot stop its tree itself (SIGKILLed alone, or
    its whole group SIGKILLed a second after a SIGTERM, as an impatient user or a service
    manager's timeout does) leaves the stop to its watchdog: every process it started ends,
    those in a session of their own and the orphans too, and their ports close."""
    sup, pids, ports = _start(tmp_path, group=True)
    assert all(map(_port_open, ports))
    time.sleep(1.5)  # the supervisor names the tree to its watchdog every second
    if how == "sigkill":
        sup.kill()
    else:
        os.killpg(sup.pid, signal.SIGTERM)
        time.sleep(1)
        os.killpg(sup.pid, signal.SIGKILL)
    sup.wait(timeout=30)
    deadline = time.monotonic() + 30  # the watchdog's grace (2 s) and start-up
    while time.monotonic() < deadline and not all(map(_gone, pids)):
        time.sleep(0.2)
    _assert_all_stopped(pids, ports)


def _start_two(
    tmp_path: Path, second_exits: int | None = None
) -> tuple[subprocess.Popen, list[int], list[int]]:
    """The supervisor on two stand-in servers, the commands separated by `--and` (as `make
    airflow` gives it four Airflow components); `second_exits`: the second one exits with
    that status once the first has started."""
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    first, second = tmp_path / "started1", tmp_path / "started2"
    command = [sys.executable, str(script), str(first), "--and"]
    if second_exits is None:
        command += [sys.executable, str(script), str(second)]
    else:
        wait = f"while [ ! -e '{first}' ]; do sleep 0.1; done"
        command += ["sh", "-c", f"{wait}; exec '{sys.executable}' '{script}' '{second}' "
                    f"{second_exits}"]  # fmt: skip
    with open(tmp_path / "stderr.txt", "w") as stderr:
        sup = subprocess.Popen(
            [sys.executable, "-m", "rulerag.orchestration.supervise", "--grace", "2", "--",
             *command],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=stderr,
        )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (first.exists() and second.exists()):
        assert time.monotonic() < deadline, (tmp_path / "stderr.txt").read_text()
        time.sleep(0.1)
    pids: list[int] = []
    ports: list[int] = []
    for marker in (first, second):
        pids_line, ports_line = marker.read_text().splitlines()
        pids += [int(p) for p in pids_line.split()]
        ports += [int(p) for p in ports_line.split()]
    return sup, pids, ports


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")
def test_several_commands_are_stopped_together(tmp_path: Path) -> None:
    """Issue 45, item 7: `make airflow` runs the API server, scheduler, DAG processor and
    triggerer itself (not `standalone`), all under one supervisor: a SIGTERM ends every one of
    them and what they started, and frees their ports."""
    sup, pids, ports = _start_two(tmp_path)
    assert len(ports) == 6 and all(map(_port_open, ports)) and not any(map(_gone, pids))
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(timeout=60) == 143
    _assert_all_stopped(pids, ports)
    stderr = (tmp_path / "stderr.txt").read_text()
    assert "SIGTERM: stopping" in stderr and "every process they started" in stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")
def test_one_command_that_exits_stops_the_others_and_its_status_is_kept(tmp_path: Path) -> None:
    """A component that dies (a scheduler that cannot start) stops the others rather than
    leave a UI up over nothing; the exit status is the one that exited."""
    sup, pids, ports = _start_two(tmp_path, second_exits=5)
    assert sup.wait(timeout=60) == 5
    _assert_all_stopped(pids, ports)
    assert "exited with status 5: stopping" in (tmp_path / "stderr.txt").read_text()


def test_the_command_line_splits_at_and() -> None:
    from rulerag.orchestration.supervise import split_commands

    assert split_commands(["a", "-x", "--and", "b", "--", "c"]) == [["a", "-x"], ["b", "--", "c"]]
    assert split_commands(["a"]) == [["a"]]
    assert not all(split_commands(["a", "--and"]))
    assert not all(split_commands([]))
