"""`make serve` under load on loopback: one client asking in turn (latency p50 / p95), then
concurrent clients (questions answered per second, and how many were refused 503 or ran past
their deadline 504).

Run by hand, never as a test, against a running service or one it starts itself:

    .venv/bin/python benchmarks/bench_serve.py --url http://127.0.0.1:8050/
    .venv/bin/python benchmarks/bench_serve.py --model models:/rulerag-icews14@champion
        [--params params.yaml] [--questions 20] [--clients 8] [--per-client 4] [--seed 0]

With `--model` it runs `python -m rulerag.serving --model X --port <free>` (the model's load
is waited for, `--start-timeout`, and reported apart) and stops it at the end. The questions
are drawn (seeded) from the service's RuleQA test queries (`GET /examples`), each asked one
of three ways: by its id (`{"qid": ...}`), as its query typed as a question, and lower-cased
(the linker's case folding). Every request asks one question (`{"inputs": [...]}`), as the
page does.

Loops are bounded: `--questions` requests in turn, then `--clients` threads of `--per-client`
requests each, all at once. The service answers one question at a time (`serve.queue` may
wait), so with more clients than `serve.queue` + 1 some are refused with 503 by design; a
refused request is counted, not retried. Printed: a Markdown table (`rulerag.markdown`) per
phase: requests, answered (200), bad input (4xx), 503, 504, other, latency p50 / p95 of the
answered, questions answered per second of the phase's wall time.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import requests  # noqa: E402 - after the path is set
from chromium import free_port, wait_http  # noqa: E402

from rulerag.markdown import table  # noqa: E402


@dataclass
class Phase:
    """What one phase's requests came to."""

    name: str
    statuses: Counter[int] = field(default_factory=Counter)
    seconds: list[float] = field(default_factory=list)  # of the answered
    wall: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, status: int, seconds: float) -> None:
        with self.lock:
            self.statuses[status] += 1
            if status == 200:
                self.seconds.append(seconds)

    def row(self) -> list[object]:
        total = sum(self.statuses.values())
        answered = self.statuses[200]
        bad = sum(n for s, n in self.statuses.items() if 400 <= s < 500)
        other = total - answered - bad - self.statuses[503] - self.statuses[504]
        return [
            self.name,
            total,
            answered,
            bad,
            self.statuses[503],
            self.statuses[504],
            other,
            _quantile(self.seconds, 0.50),
            _quantile(self.seconds, 0.95),
            f"{answered / self.wall:.2f}" if self.wall > 0 else "–",
        ]


def _quantile(values: list[float], q: float) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return f"{cuts[round(q * 100) - 1]:.3f}"


def questions(examples: list[dict[str, Any]], count: int, seed: int) -> list[dict[str, str]]:
    """`count` inputs drawn from the test queries, each asked one of three ways (module doc)."""
    if not examples:
        raise SystemExit("the service offers no test queries (GET /examples is empty)")
    rng = random.Random(seed)
    asked = []
    for _ in range(count):
        example = rng.choice(examples)
        way = rng.randrange(3)
        if way == 0:
            asked.append({"qid": example["qid"]})
        elif way == 1:
            asked.append({"question": example["query"]})
        else:
            asked.append({"question": example["query"].lower()})
    return asked


def ask(session: requests.Session, url: str, given: dict[str, str], timeout: float) -> int:
    try:
        response = session.post(f"{url}invocations", json={"inputs": [given]}, timeout=timeout)
    except requests.RequestException:
        return 0  # no answer at all (counted under "other")
    return response.status_code


def in_turn(url: str, asked: list[dict[str, str]], timeout: float) -> Phase:
    phase = Phase("1 client, in turn")
    with requests.Session() as session:
        session.trust_env = False  # loopback: no proxy
        started = time.perf_counter()
        for given in asked:
            t0 = time.perf_counter()
            phase.add(ask(session, url, given, timeout), time.perf_counter() - t0)
        phase.wall = time.perf_counter() - started
    return phase


def concurrent(url: str, per_client: list[list[dict[str, str]]], timeout: float) -> Phase:
    phase = Phase(f"{len(per_client)} clients at once")
    start = threading.Barrier(len(per_client) + 1)

    def client(asked: list[dict[str, str]]) -> None:
        with requests.Session() as session:
            session.trust_env = False
            start.wait()
            for given in asked:
                t0 = time.perf_counter()
                phase.add(ask(session, url, given, timeout), time.perf_counter() - t0)

    threads = [threading.Thread(target=client, args=(a,), daemon=True) for a in per_client]
    for thread in threads:
        thread.start()
    start.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    phase.wall = time.perf_counter() - started
    return phase


def start_service(model: str, params: Path, timeout: float) -> tuple[subprocess.Popen, str, float]:
    port = free_port()
    command = [sys.executable, "-m", "rulerag.serving", "--model", model, "--params",
               str(params), "--port", str(port)]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=ROOT)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_http(f"{url}ping", timeout)
    except TimeoutError:
        proc.terminate()
        raise
    return proc, url, time.perf_counter() - started


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = cli.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running service, e.g. http://127.0.0.1:8050/")
    where.add_argument("--model", help="start python -m rulerag.serving --model MODEL")
    cli.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    cli.add_argument("--questions", type=int, default=20, help="requests in turn")
    cli.add_argument("--clients", type=int, default=8)
    cli.add_argument("--per-client", type=int, default=4, help="requests per client")
    cli.add_argument("--seed", type=int, default=0)
    cli.add_argument("--timeout", type=float, default=600.0, help="seconds a request may take")
    cli.add_argument("--start-timeout", type=float, default=900.0, help="seconds to load")
    args = cli.parse_args()
    for name in ("questions", "clients", "per_client"):
        if not 1 <= getattr(args, name) <= 10_000:
            cli.error(f"--{name.replace('_', '-')}: give 1 to 10000")

    proc, load_seconds = None, None
    url = args.url if args.url is None or args.url.endswith("/") else f"{args.url}/"
    if args.model:
        proc, url, load_seconds = start_service(args.model, args.params, args.start_timeout)
    try:
        with requests.Session() as session:
            session.trust_env = False
            version = session.get(f"{url}version", timeout=30).json()
            examples = session.get(f"{url}examples", timeout=30).json()["examples"]
        rng_seed = args.seed
        turn = in_turn(url, questions(examples, args.questions, rng_seed), args.timeout)
        per_client = [
            questions(examples, args.per_client, rng_seed + 1 + i) for i in range(args.clients)
        ]
        crowd = concurrent(url, per_client, args.timeout)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)

    print(f"Service: {version.get('model')} at {url}")
    if load_seconds is not None:
        print(f"Started and loaded in {load_seconds:.1f} s")
    print(f"Command: benchmarks/bench_serve.py {' '.join(sys.argv[1:])}")
    print()
    header = ["phase", "requests", "200", "4xx", "503", "504", "other", "p50 s", "p95 s",
              "answered/s"]  # fmt: skip
    print(table(header, [turn.row(), crowd.row()], "lrrrrrrrrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
