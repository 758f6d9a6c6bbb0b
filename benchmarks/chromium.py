"""A headless Chromium driven over its DevTools protocol, for the UI checks
(`mlflow_ui_check.py`, `airflow_ui_check.py`).

Each `Browser` is a fresh Chromium with an empty profile of its own, so nothing a previous check
stored (a view choice, a cookie) changes what a page shows. It talks the DevTools protocol over
one WebSocket (`websockets`, in the pinned tree), with the background-networking flags that keep
Chromium from calling out of a closed network.

    apt-get install chromium   # Debian's; or pass another Chromium/Chrome binary
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from typing import Any

__all__ = ["Browser", "free_port", "wait_http"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, timeout: float) -> None:
    """Until `url` answers (any status below 400), or TimeoutError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")


class Browser:
    """One fresh headless Chromium (its own empty profile) driven over DevTools."""

    def __init__(self, chromium: str, window: str = "1400,900") -> None:
        self.profile = tempfile.mkdtemp(prefix="ui-check-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                f"--user-data-dir={self.profile}", f"--remote-debugging-port={self.port}",
                f"--window-size={window}", "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_http(f"http://127.0.0.1:{self.port}/json/version", 30)
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=5) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        from websockets.sync.client import ClientConnection, connect

        self.ws: ClientConnection = connect(page["webSocketDebuggerUrl"], max_size=None)
        self.ids = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.ids += 1
        self.ws.send(json.dumps({"id": self.ids, "method": method, "params": params}))
        while True:
            answer = json.loads(self.ws.recv(timeout=60))
            if answer.get("id") == self.ids:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return dict(answer.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def wait_for(self, expression: str, timeout: float, poll: float = 0.1) -> float | None:
        """Seconds until the JavaScript `expression` is truthy, or None after `timeout` s."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            try:
                if self.evaluate(expression):
                    return time.monotonic() - start
            except RuntimeError:  # the page is navigating: no context to evaluate in yet
                pass
            time.sleep(poll)
        return None

    def settle(
        self, timeout: float, ready: Callable[[str, str], bool] = lambda url, text: True
    ) -> tuple[str, str]:
        """(URL, visible text) once `ready` holds for them and they have not changed for 2 s,
        or as they are at `timeout` seconds (a slow first page load)."""
        last, stable, deadline = None, 0, time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = (self.evaluate("location.href"), self.evaluate("document.body.innerText") or "")
            stable = stable + 1 if now == last and ready(*now) else 0
            if stable >= 4:
                break
            last = now
        return last or ("", "")

    def screenshot(self, path: str) -> None:
        import base64

        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            shutil.rmtree(self.profile, ignore_errors=True)
