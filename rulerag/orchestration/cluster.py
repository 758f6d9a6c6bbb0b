"""docker/compose.yaml's Airflow cluster on one machine, without Docker: `make cluster-up`.

The same services as the compose file's x-airflow-common, as plain processes of this machine:
Postgres (Airflow's metadata database and Celery's result backend), Redis (Celery's broker),
the API server, scheduler and DAG processor, and `workers` Celery workers (plus `gpu_workers`
on the queue `gpu`) with one task slot each, running the DAG in workspaces mode over a DVC
remote on a local path (what a shared filesystem gives a real cluster; compose uses MinIO).
Everything the cluster keeps lives in one state folder (default `.cluster/`, git-ignored):

    postgres/data, postgres/run   Postgres' data folder and socket folder (owned by the user
                                  `postgres` when this runs as root: initdb refuses root)
    redis/                        redis.conf (password, no persistence)
    airflow/                      AIRFLOW_HOME: task logs, the login's passwords file (written
                                  here before the API server starts: Airflow prints none)
    dvc-remote/                   the DVC remote `cluster` (`dvc remote add --local`)
    workspaces/                   RULERAG_WORKSPACE_ROOT
    logs/, pids/                  one log and one pid file per process
    cluster.json                  ports of the running cluster; secrets.json: passwords, JWT key

Whatever holds a secret is its owner's only: secrets.json, redis.conf, the passwords file and
the processes' logs 0600 (tightened if they exist), the state folder and the folders of
secrets 0700 (the state folder 0711 as root, for the user postgres to pass through).

Every process is started as the leader of a process group of its own, and `down` stops each
group (SIGTERM, a grace period, SIGKILL) and Postgres (`pg_ctl stop`), so nothing is left
running. Ports are free ones, chosen at each `up`, on 127.0.0.1 only.

    python -m rulerag.orchestration.cluster up [--workers 2] [--gpu-workers 0]
    python -m rulerag.orchestration.cluster status
    eval "$(python -m rulerag.orchestration.cluster env)"; airflow dags trigger rulerag ...
    python -m rulerag.orchestration.cluster down
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rulerag.orchestration.airflow_home import (
    PASSWORDS_FILE_ENV,
    PASSWORDS_FILE_NAME,
    ensure_passwords,
    simple_auth_users,
)
from rulerag.orchestration.processes import group_alive
from rulerag.orchestration.secret_files import (
    open_private_log,
    private_dir,
    tighten,
    write_private,
)

__all__ = ["Cluster", "ClusterError", "main"]

PROJECT_DIR = Path(__file__).resolve().parents[2]
#: the DVC remote the cluster's workspaces exchange outputs through
REMOTE_NAME = "cluster"
DB_USER = "rulerag"
DB_NAME = "airflow"
#: seconds `down` gives a process group between SIGTERM and SIGKILL (a Celery worker's warm
#: shutdown waits for its running task; a cluster going down does not)
STOP_GRACE_S = 20.0
#: seconds without a task heartbeat after which the scheduler fails a task (a worker that died
#: with it) and retries it; Airflow's default, 300, is the caller's to set
HEARTBEAT_TIMEOUT_S = "60"
#: the queue and pool of GPU_STAGES' tasks when the cluster has GPU workers (as compose's)
GPU_QUEUE, GPU_POOL = "gpu", "gpus"
#: processes in the order `up` starts them; `down` stops them in reverse
SERVICES = ("redis", "api-server", "scheduler", "dag-processor")


#: where progress lines go (print, a logger, nothing)
Echo = Callable[[str], None]


class ClusterError(RuntimeError):
    """The cluster cannot start or stop; the message says what is missing and where to look."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: Path, lines: int = 30) -> str:
    if not path.is_file():
        return f"({path} does not exist)"
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(text[-lines:])


def postgres_bin() -> Path:
    """The folder of Postgres' server binaries: $RULERAG_PG_BIN, the folder of `pg_ctl` on
    PATH, else Debian's newest /usr/lib/postgresql/<version>/bin."""
    if os.environ.get("RULERAG_PG_BIN"):
        found = Path(os.environ["RULERAG_PG_BIN"])
    elif shutil.which("pg_ctl"):
        found = Path(shutil.which("pg_ctl") or "").parent
    else:
        debian = Path("/usr/lib/postgresql")
        versions = sorted(
            (p for p in debian.glob("*/bin") if p.parent.name.isdigit()),
            key=lambda p: int(p.parent.name),
        )
        found = versions[-1] if versions else debian / "<version>" / "bin"
    for name in ("initdb", "pg_ctl", "postgres"):
        if not (found / name).is_file():
            raise ClusterError(
                f"Postgres' {name} is not in {found}: install it (Debian: apt-get install -y "
                "postgresql) or set RULERAG_PG_BIN to the folder that has initdb and pg_ctl"
            )
    return found


def _executable(name: str, where: Path | None = None) -> str:
    """`name` in `where` (default: next to this interpreter, the project venv), else on
    PATH; a missing one fails naming the package that has it."""
    local = (where or Path(sys.executable).parent) / name
    found = str(local) if local.is_file() else shutil.which(name)
    if not found:
        hint = {
            "redis-server": "apt-get install -y redis-server",
            "runuser": "apt-get install -y util-linux",
        }.get(name, "make setup")
        raise ClusterError(f"{name} is not installed ({hint})")
    return found


#: (module, distribution) the cluster's processes import: the `celery` extra
CELERY_MODULES = (
    ("airflow.providers.celery", "apache-airflow-providers-celery"),
    ("redis", "redis"),
    ("psycopg2", "psycopg2-binary"),
    ("asyncpg", "asyncpg"),
)


def require_celery_extra() -> None:
    """Fail in one line when a module of the `celery` extra is missing, before anything
    starts (a worker would die on the import, its traceback in a log)."""
    import importlib.util

    missing = [dist for module, dist in CELERY_MODULES if importlib.util.find_spec(module) is None]
    if missing:
        raise ClusterError(
            f"not installed: {', '.join(missing)} (make cluster-deps, or pip install "
            "-c constraints.txt -e '.[celery]')"
        )
    import celery
    from celery.backends import database

    if not hasattr(database, "retry"):  # the provider imports it; celery 5.7 dropped it
        raise ClusterError(
            f"celery {celery.__version__} does not work with apache-airflow-providers-celery "
            "(no celery.backends.database.retry): pip install -c constraints.txt celery==5.6.3"
        )


@dataclass
class Cluster:
    """The cluster whose state lives in `state_dir`, running the DAG of `project_dir`;
    `base_env`: the environment its processes start from (None: this process's), e.g.
    RULERAG_DATA_DIR and Airflow settings the cluster does not set itself."""

    project_dir: Path = PROJECT_DIR
    state_dir: Path = field(default_factory=lambda: PROJECT_DIR / ".cluster")
    workers: int = 2
    base_env: Mapping[str, str] | None = None
    #: workers on the queue `gpu` (GPU_STAGES' tasks, held to the pool `gpus` with one slot
    #: each, as compose's gpu-worker); 0: no GPU queue, GPU stages run on the workers above
    gpu_workers: int = 0

    def __post_init__(self) -> None:
        self.project_dir = Path(self.project_dir).resolve()
        self.state_dir = Path(self.state_dir).resolve()
        if self.workers < 1:
            raise ClusterError(f"--workers must be at least 1, not {self.workers}")
        if self.gpu_workers < 0:
            raise ClusterError(f"--gpu-workers must be at least 0, not {self.gpu_workers}")

    # ---------------------------------------------------------------------------------------
    # paths and saved settings
    # ---------------------------------------------------------------------------------------

    @property
    def airflow_home(self) -> Path:
        return self.state_dir / "airflow"

    @property
    def remote_dir(self) -> Path:
        return self.state_dir / "dvc-remote"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def pids(self) -> Path:
        return self.state_dir / "pids"

    @property
    def pg_data(self) -> Path:
        return self.state_dir / "postgres" / "data"

    def worker_names(self) -> list[str]:
        """The workers of the queue `default`, then those of the queue `gpu`."""
        return [
            *(f"worker{i}" for i in range(1, self.workers + 1)),
            *(f"gpu-worker{i}" for i in range(1, self.gpu_workers + 1)),
        ]

    def _json(self, name: str) -> dict:
        path = self.state_dir / name
        if not path.is_file():
            return {}
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ClusterError(f"{path}: not JSON ({exc}); remove it and run up again") from exc

    @property
    def passwords_file(self) -> Path:
        """The API server's login: user -> password, written before it starts (it would
        otherwise generate the passwords and print them into logs/api-server.log)."""
        return self.airflow_home / PASSWORDS_FILE_NAME

    def _write_private(self, path: Path, text: str) -> None:
        """Write a file only its owner reads (0600 whether or not it existed), in a state
        folder only its owner lists."""
        self._private_state_dir()
        write_private(path, text)

    def _private_state_dir(self) -> None:
        """The state folder, 0700 (as root 0711: the user postgres passes through it to
        postgres/, which it owns)."""
        private_dir(self.state_dir, 0o711 if os.geteuid() == 0 else 0o700)

    def secrets(self) -> dict[str, str]:
        """Passwords and the JWT key, generated at the first `up` and kept (Postgres' is set
        by initdb); never in git, never on a command line, and secrets.json is 0600 (also
        one an older version left 0644)."""
        path = self.state_dir / "secrets.json"
        saved = self._json("secrets.json")
        wanted = ("postgres_password", "redis_password", "jwt_secret", "api_secret_key")
        if all(saved.get(k) for k in wanted):
            tighten(path)
            return saved
        made = {k: saved.get(k) or secrets.token_hex(24) for k in wanted}
        self._write_private(path, json.dumps(made, indent=2))
        return made

    def ports(self) -> dict[str, int]:
        """The running cluster's ports (cluster.json), empty when it was never started."""
        return {k: int(v) for k, v in self._json("cluster.json").get("ports", {}).items()}

    # ---------------------------------------------------------------------------------------
    # the environment every Airflow process gets (compose's x-airflow-common)
    # ---------------------------------------------------------------------------------------

    def airflow_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        ports, keys = self.ports(), self.secrets()
        if not ports:
            raise ClusterError(f"no cluster started in {self.state_dir} (run up first)")
        env = dict(self._base() if base is None else base)
        env.setdefault("AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT", HEARTBEAT_TIMEOUT_S)
        slots = str(self.workers + self.gpu_workers)
        db = f"{DB_USER}:{keys['postgres_password']}@127.0.0.1:{ports['postgres']}/{DB_NAME}"
        bin_dir = str(Path(sys.executable).parent)
        env.update(
            PATH=os.pathsep.join([bin_dir, env.get("PATH", "")]),
            AIRFLOW_HOME=str(self.airflow_home),
            **{PASSWORDS_FILE_ENV: str(self.passwords_file)},
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"postgresql+psycopg2://{db}",
            AIRFLOW__CORE__EXECUTOR="CeleryExecutor",
            AIRFLOW__CELERY__BROKER_URL=(
                f"redis://:{keys['redis_password']}@127.0.0.1:{ports['redis']}/0"
            ),
            AIRFLOW__CELERY__RESULT_BACKEND=f"db+postgresql+psycopg2://{db}",
            AIRFLOW__CORE__PARALLELISM=slots,
            AIRFLOW__CORE__DAGS_FOLDER=str(self.project_dir / "dags"),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            # triggered runs start at once (the DAG has no schedule)
            AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{ports['api']}/execution/",
            AIRFLOW__API__HOST="127.0.0.1",
            AIRFLOW__API__PORT=str(ports["api"]),
            # the address links and redirects name: the one the server listens on
            AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{ports['api']}",
            AIRFLOW__API__SECRET_KEY=keys["api_secret_key"],
            AIRFLOW__API_AUTH__JWT_SECRET=keys["jwt_secret"],
            RULERAG_PROJECT_DIR=str(self.project_dir),
            RULERAG_DAG_MODE="workspaces",
            RULERAG_DAG_PARALLELISM=slots,
            RULERAG_DVC_REMOTE=REMOTE_NAME,
            RULERAG_WORKSPACE_ROOT=str(self.state_dir / "workspaces"),
            DVC_NO_ANALYTICS="1",
            PYTHONUNBUFFERED="1",
        )
        # a queue no worker serves would hold GPU stages forever: set only with GPU workers
        for key in ("RULERAG_GPU_QUEUE", "RULERAG_GPU_POOL", "RULERAG_GPU_RESOURCE"):
            env.pop(key, None)
        if self.gpu_workers:
            env.update(RULERAG_GPU_QUEUE=GPU_QUEUE, RULERAG_GPU_POOL=GPU_POOL)
        return env

    # ---------------------------------------------------------------------------------------
    # Postgres
    # ---------------------------------------------------------------------------------------

    def _as_postgres(self, cmd: list[str]) -> list[str]:
        """initdb and postgres refuse root: as root, run them as the user `postgres`."""
        if os.geteuid() != 0:
            return cmd
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise ClusterError(
                "running as root, Postgres needs an unprivileged user: there is no user "
                "`postgres` (useradd --system postgres, or run as another user)"
            ) from None
        return [_executable("runuser", Path("/usr/sbin")), "-u", "postgres", "--", *cmd]

    def _checked(
        self, cmd: list[str], log: Path, what: str, timeout: float = 300,
        env: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        with open_private_log(log) as out:
            out.write(f"$ {shlex.join(cmd)}\n")
            out.flush()
            try:
                done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                                      stdin=subprocess.DEVNULL, cwd=self.state_dir,
                                      env=dict(env or self._plain_env()))  # fmt: skip
            except subprocess.TimeoutExpired:
                raise ClusterError(f"{what} took over {timeout:.0f} s; see {log}") from None
        if done.returncode != 0:
            raise ClusterError(f"{what} failed ({done.returncode}); {log}:\n{_tail(log)}")

    def _base(self) -> Mapping[str, str]:
        return os.environ if self.base_env is None else self.base_env

    def _plain_env(self) -> dict[str, str]:
        """The base environment without Airflow's or libpq's settings (Postgres, Redis)."""
        return {k: v for k, v in self._base().items() if not k.startswith(("AIRFLOW", "PG"))}

    def _start_postgres(self, port: int) -> None:
        pg_bin = postgres_bin()
        root = self.pg_data.parent
        run_dir = root / "run"
        log = root / "postgres.log"
        root.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir(exist_ok=True)
        log.touch()
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            for path in (root, run_dir, log, *root.rglob("*")):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            reach = subprocess.run(self._as_postgres(["test", "-w", str(root)]), check=False)
            if reach.returncode != 0:
                raise ClusterError(
                    f"the user postgres cannot write {root}: every folder above it must be "
                    "searchable by others (chmod o+x), or choose another --state-dir"
                )
        if not (self.pg_data / "PG_VERSION").is_file():
            pwfile = root / ".pwfile"
            self._write_private(pwfile, self.secrets()["postgres_password"] + "\n")
            if os.geteuid() == 0:
                os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
            try:
                initdb = [str(pg_bin / "initdb"), "-D", str(self.pg_data), "-U", DB_USER,
                          "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8",
                          "--locale=C.UTF-8"]  # fmt: skip
                self._checked(self._as_postgres(initdb), log, "initdb")
            finally:
                pwfile.unlink(missing_ok=True)
        # where it listens, rewritten at each start: TCP on 127.0.0.1 and a socket folder of ours
        if "'" in str(run_dir):
            raise ClusterError(f"the state folder's path may not contain a quote: {run_dir}")
        settings = (
            f"listen_addresses = '127.0.0.1'\nport = {port}\n"
            f"unix_socket_directories = '{run_dir}'\n"
        )
        conf = self.pg_data / "postgresql.auto.conf"
        self._write_pg_file(conf, "# written by rulerag.orchestration.cluster\n" + settings)
        start = [str(pg_bin / "pg_ctl"), "-D", str(self.pg_data), "-l", str(log), "-w",
                 "-t", "60", "start"]  # fmt: skip
        self._checked(self._as_postgres(start), log, "pg_ctl start", timeout=90)
        self._create_database(port)

    def _write_pg_file(self, path: Path, text: str) -> None:
        """Write a file in the data folder, owned by whoever owns the folder."""
        path.write_text(text, encoding="utf-8")
        if os.geteuid() == 0:
            owner = self.pg_data.stat()
            os.chown(path, owner.st_uid, owner.st_gid)
        path.chmod(0o600)

    def _create_database(self, port: int) -> None:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=port, user=DB_USER, dbname="postgres",
                                password=self.secrets()["postgres_password"])  # fmt: skip
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{DB_NAME}"')
        finally:
            conn.close()

    def metadata_connection(self) -> Any:
        """A connection (autocommit) to Airflow's metadata database, for reading what ran
        where and when (task_instance: start_date, end_date, try_number, external_executor_id)."""
        import psycopg2

        password = self.secrets()["postgres_password"]
        port = self.ports()["postgres"]
        conn = psycopg2.connect(
            host="127.0.0.1", port=port, user=DB_USER, dbname=DB_NAME, password=password
        )
        conn.autocommit = True
        return conn

    def _stop_postgres(self) -> bool:
        if not (self.pg_data / "postmaster.pid").is_file():
            return False
        stop = [str(postgres_bin() / "pg_ctl"), "-D", str(self.pg_data), "-m", "fast", "-w",
                "-t", "60", "stop"]  # fmt: skip
        self._checked(self._as_postgres(stop), self.pg_data.parent / "postgres.log",
                      "pg_ctl stop", timeout=90)  # fmt: skip
        return True

    def postgres_running(self) -> bool:
        if not (self.pg_data / "postmaster.pid").is_file():
            return False
        status = [str(postgres_bin() / "pg_ctl"), "-D", str(self.pg_data), "status"]
        done = subprocess.run(self._as_postgres(status), capture_output=True, check=False)
        return done.returncode == 0

    # ---------------------------------------------------------------------------------------
    # process groups
    # ---------------------------------------------------------------------------------------

    def _pid_file(self, name: str) -> Path:
        return self.pids / f"{name}.pid"

    def pid(self, name: str) -> int | None:
        """The process group id of `name` while it runs, else None."""
        path = self._pid_file(name)
        if not path.is_file():
            return None
        pgid = int(path.read_text().strip())
        return pgid if group_alive(pgid) else None

    def _spawn(self, name: str, cmd: list[str], env: Mapping[str, str]) -> int:
        """Start `cmd` as the leader of a new session, output to logs/<name>.log; its pid is
        its process group's id (`down` stops the whole group)."""
        if self.pid(name) is not None:
            raise ClusterError(f"{name} already runs (pid {self.pid(name)}); run down first")
        log = self.logs / f"{name}.log"
        with open_private_log(log) as out:  # a server may print a secret
            out.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} $ {shlex.join(cmd)}\n")
            out.flush()
            proc = subprocess.Popen(cmd, cwd=self.project_dir, env=dict(env), stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)  # fmt: skip
        self._pid_file(name).write_text(f"{proc.pid}\n")
        return proc.pid

    def _stop(self, name: str, grace: float = STOP_GRACE_S) -> bool:
        path = self._pid_file(name)
        if not path.is_file():
            return False
        pgid = int(path.read_text().strip())
        stopped = False
        with suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
            stopped = True
        deadline = time.monotonic() + grace
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if group_alive(pgid):
            with suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.2)
        if group_alive(pgid):
            raise ClusterError(f"{name} (process group {pgid}) survived SIGKILL")
        path.unlink()
        return stopped

    def kill_worker(self, name: str) -> int:
        """SIGKILL a worker's whole process group at once (the machine it ran on is gone):
        what a test of lost workers does. Returns the group id."""
        pgid = self.pid(name)
        if pgid is None:
            raise ClusterError(f"{name} does not run")
        os.killpg(pgid, signal.SIGKILL)
        return pgid

    # ---------------------------------------------------------------------------------------
    # up / down / status
    # ---------------------------------------------------------------------------------------

    def running(self) -> list[str]:
        """The cluster's processes that run now (any with a live pid file, and Postgres)."""
        names = sorted(p.stem for p in self.pids.glob("*.pid")) if self.pids.is_dir() else []
        alive = [name for name in names if self.pid(name) is not None]
        return [*alive, "postgres"] if self.postgres_running() else alive

    def up(self, timeout: float = 300, echo: Echo = print) -> None:
        """Start everything, or fail naming what did not start and its log, having stopped
        what this call started. A cluster that already runs is left alone."""
        already = self.running()
        if already:
            raise ClusterError(
                f"the cluster in {self.state_dir} already runs ({', '.join(already)}): "
                "use it, or run down first"
            )
        require_celery_extra()
        redis_server = _executable("redis-server", Path("/usr/bin"))
        airflow = _executable("airflow")
        dvc = _executable("dvc")
        postgres_bin()
        try:
            self._start(redis_server, airflow, dvc, timeout, echo)
        except BaseException:
            echo("up failed: stopping what started")
            self.down(echo)
            raise

    def _start(self, redis_server: str, airflow: str, dvc: str, timeout: float, echo: Echo) -> None:
        self._private_state_dir()
        for sub in (self.logs, self.pids, self.airflow_home, self.state_dir / "redis"):
            private_dir(sub)  # logs, passwords, redis.conf: the owner's only
        for sub in (self.remote_dir, self.state_dir / "workspaces"):
            sub.mkdir(parents=True, exist_ok=True)
        keys = self.secrets()
        ports = {"postgres": _free_port(), "redis": _free_port(), "api": _free_port()}
        saved = {"ports": ports, "workers": self.workers, "gpu_workers": self.gpu_workers}
        self._write_private(self.state_dir / "cluster.json", json.dumps(saved, indent=2))

        echo(f"postgres on 127.0.0.1:{ports['postgres']}")
        self._start_postgres(ports["postgres"])

        echo(f"redis on 127.0.0.1:{ports['redis']}")
        redis_dir = self.state_dir / "redis"
        conf = redis_dir / "redis.conf"
        self._write_private(conf, "\n".join([
            "bind 127.0.0.1", f"port {ports['redis']}", 'save ""', "appendonly no",
            f"dir {redis_dir}", f"requirepass {keys['redis_password']}", "daemonize no",
            "protected-mode yes", "",
        ]))  # fmt: skip
        self._spawn("redis", [redis_server, str(conf)], self._plain_env())
        self._wait(lambda: _port_open(ports["redis"]), "redis", 30)

        env = self.airflow_env()
        # the login, before any Airflow process: none has a password to generate and print
        ensure_passwords(self.passwords_file, simple_auth_users(self.airflow_home, env))
        echo("airflow db migrate")
        self._checked([airflow, "db", "migrate"], self.logs / "migrate.log", "airflow db migrate",
                      timeout=timeout, env=env)  # fmt: skip
        remote = [dvc, "remote", "add", "--local", "--force", REMOTE_NAME, str(self.remote_dir)]
        done = subprocess.run(remote, cwd=self.project_dir, env=env, capture_output=True,
                              text=True, check=False)  # fmt: skip
        if done.returncode != 0:
            raise ClusterError(f"{shlex.join(remote)}: {done.stderr.strip()}")
        if self.gpu_workers:  # one slot per GPU worker, as compose's airflow-init
            pool = [airflow, "pools", "set", GPU_POOL, str(self.gpu_workers), "one slot per GPU"]
            self._checked(pool, self.logs / "migrate.log", "airflow pools set", env=env)

        echo(f"airflow api-server on http://127.0.0.1:{ports['api']}")
        self._spawn("api-server", [airflow, "api-server", "--host", "127.0.0.1", "--port",
                                   str(ports["api"]), "--workers", "1"], env)  # fmt: skip
        self._spawn("scheduler", [airflow, "scheduler"], env)
        self._spawn("dag-processor", [airflow, "dag-processor"], env)
        host = socket.gethostname()
        for name in self.worker_names():
            queue = GPU_QUEUE if name.startswith("gpu-") else "default"
            echo(f"celery worker {name}@{host} (queue {queue}, concurrency 1)")
            self._spawn(name, [airflow, "celery", "worker", "--celery-hostname",
                               f"{name}@{host}", "--queues", queue, "--concurrency", "1",
                               "--skip-serve-logs"], env)  # fmt: skip
        health = f"http://127.0.0.1:{ports['api']}/api/v2/monitor/health"
        self._wait(lambda: self._http_ok(health), "api-server", timeout)
        for name in self.worker_names():
            log = self.logs / f"{name}.log"
            self._wait(lambda log=log: " ready." in log.read_text(errors="replace"), name,
                       timeout)  # fmt: skip
        echo(f"up: {self.status_line()}")

    def _http_ok(self, url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _wait(self, ready: Callable[[], bool], name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.pid(name) is None and name != "postgres":
                log = self.logs / f"{name}.log"
                raise ClusterError(f"{name} exited; {log}:\n{_tail(log)}")
            if ready():
                return
            time.sleep(1)
        raise ClusterError(f"{name} not ready after {timeout:.0f} s; see {self.logs / name}.log")

    def down(self, echo: Echo = print) -> None:
        """Stop every process group, then Postgres; leaves the state (data, logs) in place."""
        names = [*SERVICES, *self.worker_names()]
        for stale in sorted(self.pids.glob("*.pid")) if self.pids.is_dir() else []:
            if stale.stem not in names:
                names.append(stale.stem)
        for name in reversed(names):
            if self._stop(name):
                echo(f"stopped {name}")
        if self._stop_postgres():
            echo("stopped postgres")

    def status(self) -> dict[str, object]:
        names = [*SERVICES, *self.worker_names()]
        state: dict[str, object] = {n: self.pid(n) for n in names}
        state["postgres"] = self.postgres_running()
        state["ports"] = self.ports()
        return state

    def status_line(self) -> str:
        ports = self.ports()
        return (
            f"API http://127.0.0.1:{ports.get('api')} (users and passwords: "
            f"{self.passwords_file}); "
            f"{self.workers} Celery workers, {self.gpu_workers} on the queue gpu; "
            f"logs in {self.logs}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rulerag.orchestration.cluster",
        description="docker/compose.yaml's Airflow CeleryExecutor cluster on this machine, "
        "without Docker (Postgres, Redis, API server, scheduler, DAG processor, workers).",
    )
    parser.add_argument("command", choices=["up", "down", "status", "env"])
    parser.add_argument("--state-dir", type=Path, default=PROJECT_DIR / ".cluster")
    parser.add_argument("--project-dir", type=Path, default=PROJECT_DIR)
    parser.add_argument(
        "--workers", type=int, default=None,
        help="Celery workers, one task slot each (default: 2; later commands: as started)",
    )  # fmt: skip
    parser.add_argument(
        "--gpu-workers", type=int, default=None,
        help="workers on the queue gpu, for GPU_STAGES (default: 0; later commands: as started)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    saved = {}
    if (args.state_dir / "cluster.json").is_file():
        saved = json.loads((args.state_dir / "cluster.json").read_text(encoding="utf-8"))
    up = args.command == "up"
    workers = args.workers if args.workers is not None else 2 if up else saved.get("workers", 2)
    gpu_workers = args.gpu_workers
    if gpu_workers is None:
        gpu_workers = 0 if up else saved.get("gpu_workers", 0)
    try:
        cluster = Cluster(args.project_dir, args.state_dir, workers, gpu_workers=gpu_workers)
        if args.command == "up":
            cluster.up()
        elif args.command == "down":
            cluster.down()
        elif args.command == "status":
            print(json.dumps(cluster.status(), indent=2))
            return 0 if all(v for k, v in cluster.status().items() if k != "ports") else 1
        else:
            for key, value in sorted(cluster.airflow_env({}).items()):
                if key != "PATH":
                    print(f"export {key}={shlex.quote(value)}")
            print(f'export PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"')
    except ClusterError as exc:
        print(f"cluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
