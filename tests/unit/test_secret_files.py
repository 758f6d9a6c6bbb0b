"""Secrets on disk are their owner's only (rulerag/orchestration/secret_files.py), and `make
airflow`'s login is written before Airflow starts, so Airflow neither generates nor prints a
password (rulerag/orchestration/airflow_home.py)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rulerag.orchestration.airflow_home import (
    PASSWORDS_FILE_ENV,
    PASSWORDS_FILE_NAME,
    ensure_passwords,
    passwords_file,
    prepare_home,
    simple_auth_users,
)
from rulerag.orchestration.secret_files import (
    open_private_log,
    private_dir,
    tighten,
    write_private,
)

PROJECT = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_secret_files_end_0600_whether_new_or_not(tmp_path: Path) -> None:
    """`open(O_CREAT, 0o600)` sets the mode of a file it creates only: a secrets file an older
    version left 0644 stayed 0644 with new secrets in it."""
    new = write_private(tmp_path / "new" / "secrets.json", "{}")
    assert mode(new) == 0o600 and new.read_text() == "{}"
    old = tmp_path / "old.json"
    old.write_text("stale")
    old.chmod(0o644)
    write_private(old, "fresh")
    assert mode(old) == 0o600 and old.read_text() == "fresh"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "old.json"]  # nothing staged
    log = tmp_path / "server.log"
    log.write_text("earlier\n")
    log.chmod(0o644)
    with open_private_log(log) as out:
        out.write("later\n")
    assert mode(log) == 0o600 and log.read_text() == "earlier\nlater\n"
    with open_private_log(tmp_path / "logs" / "fresh.log") as out:
        out.write("x")
    assert mode(tmp_path / "logs" / "fresh.log") == 0o600
    folder = tmp_path / "home"
    folder.mkdir(mode=0o755)
    assert mode(private_dir(folder)) == 0o700
    assert tighten(old) and not tighten(tmp_path / "missing")


def test_passwords_are_kept_added_and_never_wider_than_0600(tmp_path: Path) -> None:
    path = tmp_path / PASSWORDS_FILE_NAME
    assert ensure_passwords(path, ["admin"]) == ["admin"]
    first = json.loads(path.read_text())
    assert mode(path) == 0o600 and len(first["admin"]) == 16
    path.chmod(0o644)  # as Airflow left it
    assert ensure_passwords(path, ["admin", "viewer"]) == ["viewer"]
    second = json.loads(path.read_text())
    assert second["admin"] == first["admin"] and second["viewer"] != first["admin"]
    assert mode(path) == 0o600
    path.write_text("{not json")
    with pytest.raises(ValueError, match=rf"{PASSWORDS_FILE_NAME}: not JSON .*remove it"):
        ensure_passwords(path, ["admin"])


def test_the_users_and_the_file_are_read_as_airflow_reads_them(tmp_path: Path) -> None:
    assert simple_auth_users(tmp_path, {}) == ["admin"]  # Airflow's default admin:admin
    (tmp_path / "airflow.cfg").write_text("[core]\nsimple_auth_manager_users = bob:viewer\n")
    assert simple_auth_users(tmp_path, {}) == ["bob"]
    env = {"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "ann:admin, bob:op:team1|team2"}
    assert simple_auth_users(tmp_path, env) == ["ann", "bob"]
    assert passwords_file(tmp_path, {}) == tmp_path / PASSWORDS_FILE_NAME
    elsewhere = tmp_path / "private" / "passwords.json"
    assert passwords_file(tmp_path, {PASSWORDS_FILE_ENV: str(elsewhere)}) == elsewhere


def test_prepare_home_makes_the_home_private(tmp_path: Path) -> None:
    home = tmp_path / "airflow"
    home.mkdir(mode=0o755)
    (home / "airflow.cfg").write_text("[core]\n")
    (home / "airflow.cfg").chmod(0o644)
    path = prepare_home(home, {})
    assert path == home / PASSWORDS_FILE_NAME and set(json.loads(path.read_text())) == {"admin"}
    assert (mode(home), mode(path), mode(home / "airflow.cfg")) == (0o700, 0o600, 0o600)


@pytest.mark.slow
def test_airflow_prints_no_password_when_the_home_is_prepared(tmp_path: Path) -> None:
    """What `make airflow` runs, with Airflow's own simple auth manager start-up in place of
    `airflow standalone`: it used to generate the admin password, write it 0644 and print it
    to stdout (and `make cluster-up` into logs/api-server.log, 0644). Now the file is there
    first, 0600, and the output names the file, never the password."""
    home = tmp_path / "airflow"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(home), **{PASSWORDS_FILE_ENV: str(home / PASSWORDS_FILE_NAME)})
    init = ("from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import "
            "SimpleAuthManager; SimpleAuthManager().init()")  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "rulerag.orchestration.airflow_home", "--",
         sys.executable, "-c", init],
        cwd=PROJECT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    path = home / PASSWORDS_FILE_NAME
    password = json.loads(path.read_text())["admin"]
    assert password not in said and "Password for user" not in said, said[-4000:]
    assert f"the passwords are in {path} (mode 600)" in done.stdout
    assert (mode(home), mode(path)) == (0o700, 0o600)
