"""The real OpenAI-compatible LLM server (`python -m rulerag.generation.llm_server`: llama.cpp
serving the offline SmolLM2 GGUF) on a free port of 127.0.0.1, for the tests that drive the
pipeline's API paths through it (tests/stages/test_llm_server.py) and its benchmark
(benchmarks/bench_llm_server.py).

The server runs in a process group of its own, so a caller can kill it (and anything it
started) mid-run and restart it on the same port; its log (uvicorn's access lines, one per
request) is how a test counts the requests that really reached it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from rulerag.orchestration.local_airflow import free_port

__all__ = ["MODEL", "LlmServer"]

MODEL = "smollm2"


@dataclass
class LlmServer:
    """One server process: its URL (`base_url`, .../v1), log and process group."""

    log: Path
    port: int = field(default_factory=free_port)
    threads: int = 1
    process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 120.0) -> LlmServer:
        """Start it and wait until /v1/models answers (the model is loaded)."""
        command = [
            sys.executable, "-m", "rulerag.generation.llm_server", "--model", MODEL,
            "--port", str(self.port), "--threads", str(self.threads), "--ctx", "4096",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the LLM server exited {self.process.returncode}:\n{self.tail()}"
                )
            try:
                if requests.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the LLM server did not answer in {timeout:.0f}s:\n{self.tail()}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """End its process group (`SIGKILL`: as a crash would) and reap it."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=20)
        self.process = None

    def requests_to(self, path: str = "/v1/chat/completions") -> int:
        """The requests to `path` the server answered so far (its access log)."""
        needle = f'"POST {path} HTTP/1.1"'
        return self.log.read_text(encoding="utf-8", errors="replace").count(needle)

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])
