"""`make airflow`'s AIRFLOW_HOME, made private before Airflow starts, and the login it serves.

Airflow's simple auth manager (`airflow/api_fastapi/auth/managers/simple/
simple_auth_manager.py`, `SimpleAuthManager.init`) reads the users' passwords from
`[core] simple_auth_manager_passwords_file` (default `AIRFLOW_HOME/
simple_auth_manager_passwords.json.generated`, a JSON object user -> password). A user of
`[core] simple_auth_manager_users` (default `admin:admin`) missing from that file gets a
generated password, which is written into the file (created with the umask's mode, 0644) and
printed to stdout, and `airflow standalone` prints the same line through its own output
(`StandaloneCommand.find_user_info`): on the terminal, in a scroll-back, in any log the
output is sent to. When the file exists and names every user, neither prints anything
(`standalone` says only where the file is).

So this module writes the file first, mode 0600 in an AIRFLOW_HOME of mode 0700, with a random
password for every configured user it lacks (and tightens an existing file), and tells the
user the file's path, never the password:

    python -m rulerag.orchestration.airflow_home -- <command> ...

prepares `$AIRFLOW_HOME` (`--home` to name another), then runs the command under
`rulerag.orchestration.supervise`. `rulerag.orchestration.cluster` prepares its AIRFLOW_HOME
with the same functions.

`make airflow` runs

    python -m rulerag.orchestration.airflow_home --serve --host 127.0.0.1 --port 8080

which, after the same preparation, runs `airflow db migrate` (and stops if it fails), then
what `airflow standalone` ran (`local_components`: API server, scheduler, DAG processor,
triggerer), all under one supervisor, but not the log servers. The scheduler and the triggerer
each start one by default (ports 8793 and 8794, `[logging] worker_log_server_port` /
`trigger_log_server_port`), and Airflow binds them on every interface (`airflow/utils/
serve_logs/core.py`: host "", no setting), where everything else listens on 127.0.0.1 only.
They exist for an API server on another machine than the tasks; here the tasks (LocalExecutor)
write their logs into AIRFLOW_HOME/logs, and the API server reads them from there: both start
with `--skip-serve-logs`. What else `standalone` did is the caller's environment (`make
airflow` names the LocalExecutor and the simple auth manager it forced) or done here (the
passwords file, the database).
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import secrets
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from rulerag.orchestration.secret_files import private_dir, tighten, write_private

__all__ = [
    "MIGRATE",
    "PASSWORDS_FILE_ENV",
    "PASSWORDS_FILE_NAME",
    "ensure_passwords",
    "local_components",
    "main",
    "passwords_file",
    "prepare_home",
    "serve",
    "simple_auth_users",
]

#: the simple auth manager's passwords file: Airflow's default name, in AIRFLOW_HOME
PASSWORDS_FILE_NAME = "simple_auth_manager_passwords.json.generated"
#: `[core] simple_auth_manager_passwords_file` as an environment variable (it wins over
#: airflow.cfg, as every AIRFLOW__SECTION__KEY does)
PASSWORDS_FILE_ENV = "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"
#: Airflow's default `[core] simple_auth_manager_users`
DEFAULT_USERS = "admin:admin"
#: what `serve` runs (to its end, checked) before the components
MIGRATE = ("airflow", "db", "migrate")


def _core_option(home: Path, env: Mapping[str, str], key: str) -> str | None:
    """`[core] key` as Airflow reads it: AIRFLOW__CORE__KEY, else AIRFLOW_HOME/airflow.cfg
    (or AIRFLOW_CONFIG), else None."""
    from_env = env.get(f"AIRFLOW__CORE__{key.upper()}")
    if from_env:
        return from_env
    cfg = Path(env.get("AIRFLOW_CONFIG") or home / "airflow.cfg")
    if not cfg.is_file():
        return None
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read(cfg, encoding="utf-8")
    except configparser.Error:
        return None  # Airflow itself will say what is wrong with it
    return parser.get("core", key, fallback=None) or None


def simple_auth_users(home: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """The user names of `[core] simple_auth_manager_users` (`user:role[:teams]`, comma
    separated; Airflow's default: admin)."""
    env = os.environ if env is None else env
    listed = _core_option(Path(home), env, "simple_auth_manager_users") or DEFAULT_USERS
    names = [item.strip().split(":")[0].strip() for item in listed.split(",")]
    return list(dict.fromkeys(name for name in names if name))


def passwords_file(home: Path, env: Mapping[str, str] | None = None) -> Path:
    """Where the simple auth manager reads the passwords: `[core]
    simple_auth_manager_passwords_file`, else AIRFLOW_HOME's default file."""
    env = os.environ if env is None else env
    configured = _core_option(Path(home), env, "simple_auth_manager_passwords_file")
    return Path(configured) if configured else Path(home) / PASSWORDS_FILE_NAME


def ensure_passwords(path: Path, users: Sequence[str]) -> list[str]:
    """Give every user of `users` a password in `path` (a JSON object user -> password, as
    Airflow reads it), keeping the ones it has; the file ends mode 0600 either way. Returns
    the users that got a new password. Nothing is printed: the password stays in the file."""
    path = Path(path)
    known: dict[str, str] = {}
    if path.is_file():
        tighten(path)  # before reading: a 0644 file from an earlier Airflow start
        text = path.read_text(encoding="utf-8").strip()
        try:
            known = json.loads(text) if text else {}
        except json.JSONDecodeError as err:
            raise ValueError(
                f"{path}: not JSON ({err}); Airflow cannot read it either: fix it, or remove it "
                "to get new passwords"
            ) from None
        if not isinstance(known, dict):
            raise ValueError(f"{path}: not a JSON object of user -> password; remove it")
    added = [user for user in users if not known.get(user)]
    if added or not path.is_file():
        # Airflow's alphabet and length for a generated password, from the OS's CSPRNG
        alphabet = "abcdefghkmnpqrstuvwxyzABCDEFGHKMNPQRSTUVWXYZ23456789"
        for user in added:
            known[user] = "".join(secrets.choice(alphabet) for _ in range(16))
        write_private(path, json.dumps(known) + "\n")
    return added


def prepare_home(home: Path, env: Mapping[str, str] | None = None) -> Path:
    """AIRFLOW_HOME as a folder of mode 0700 (it holds the passwords, airflow.cfg's keys, the
    SQLite database and the task logs), its airflow.cfg 0600, and the passwords file of every
    configured user, 0600. Returns the passwords file."""
    env = os.environ if env is None else env
    home = private_dir(Path(home))
    tighten(Path(env.get("AIRFLOW_CONFIG") or home / "airflow.cfg"))
    path = passwords_file(home, env)
    if not path.parent.exists():
        private_dir(path.parent)
    ensure_passwords(path, simple_auth_users(home, env))
    return path


def local_components(host: str, port: int | str, airflow: str = "airflow") -> dict[str, list[str]]:
    """The processes of a one-machine Airflow (LocalExecutor) by name, as `airflow standalone`
    started them, with the API server on `host`:`port` (one worker) and no log server (the
    module's doc)."""
    api = ["--host", host, "--port", str(port), "--workers", "1"]
    return {
        "api-server": [airflow, "api-server", *api],
        "scheduler": [airflow, "scheduler", "--skip-serve-logs"],
        "dag-processor": [airflow, "dag-processor"],
        "triggerer": [airflow, "triggerer", "--skip-serve-logs"],
    }


def serve(host: str, port: int | str) -> int:
    """`airflow db migrate`, then `local_components` under one supervisor until one of them
    exits or this process is told to stop (`rulerag.orchestration.supervise`). Returns the
    exit status: the migration's when it fails, else the supervisor's."""
    from rulerag.orchestration.supervise import supervise

    print(f"airflow_home: {' '.join(MIGRATE)}", flush=True)
    code = supervise(list(MIGRATE))
    if code != 0:
        print(f"airflow_home: {' '.join(MIGRATE)} exited with status {code}; nothing started",
              file=sys.stderr)  # fmt: skip
        return code
    components = local_components(host, port)
    print(
        f"airflow_home: starting {', '.join(components)}; the UI and API on "
        f"http://{host}:{port}; no log servers (the API server reads the task logs from "
        "AIRFLOW_HOME/logs)",
        flush=True,
    )
    return supervise(list(components.values()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rulerag.orchestration.airflow_home",
        description="Make AIRFLOW_HOME private and write the simple auth manager's passwords "
        "(never printed), then run the command, or with --serve Airflow's components, under "
        "rulerag.orchestration.supervise.",
    )
    parser.add_argument("--home", type=Path, help="AIRFLOW_HOME (default: $AIRFLOW_HOME)")
    parser.add_argument(
        "--serve", action="store_true",
        help="airflow db migrate, then the API server, scheduler, DAG processor and triggerer "
        "(no log servers)",
    )  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1", help="--serve: the API server's address")
    parser.add_argument("--port", type=int, default=8080, help="--serve: the API server's port")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.serve and command:
        parser.error("--serve runs Airflow's components: no command with it")
    home = args.home or (Path(os.environ["AIRFLOW_HOME"]) if os.environ.get("AIRFLOW_HOME")
                         else None)  # fmt: skip
    if home is None:
        parser.error("no AIRFLOW_HOME: set it or pass --home")
    try:
        path = prepare_home(home.resolve())
    except (ValueError, OSError) as err:
        print(f"airflow_home: {err}", file=sys.stderr)
        return 2
    users = ", ".join(simple_auth_users(home.resolve()))
    print(f"airflow_home: log in as {users}; the passwords are in {path} (mode 600)", flush=True)
    if args.serve:
        return serve(args.host, args.port)
    if not command:
        return 0
    from rulerag.orchestration.supervise import main as supervise_main

    return supervise_main(["--", *command])


if __name__ == "__main__":
    sys.exit(main())
