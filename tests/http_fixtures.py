"""A local HTTP file server for download tests: byte ranges, injected faults, a request log.

Why not ``http.server.SimpleHTTPRequestHandler`` as is: it ignores ``Range`` headers, so it
cannot show that a download resumes, and it has no way to fail on purpose. This handler
serves files from one directory with ``Range: bytes=N-`` / ``bytes=N-M`` support (206, 416),
logs every request, and can answer given statuses first (e.g. 500 twice), ignore ranges, or
drop the connection after some bytes. It binds 127.0.0.1 on an ephemeral port, so tests can
run in parallel (pytest-xdist).

Use ``serve_directory(root)`` as a context manager (or wrap it in a fixture): it starts the
server in a thread and shuts it down on exit.
"""

from __future__ import annotations

import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

_RANGE_RE = re.compile(r"bytes=(\d+)-(\d*)")


@dataclass(frozen=True)
class LoggedRequest:
    """One request the server saw: URL path and its Range header (None when absent)."""

    path: str
    range: str | None


@dataclass
class FileServer:
    """The running server's address, request log and fault switches (keyed by URL path).

    ``fail_with[path]``: statuses to answer before serving, one per request (consumed).
    ``ignore_range``: paths whose Range headers are ignored (full 200 answers).
    ``drop_after[path]``: bytes to send before dropping the connection, once (consumed).
    """

    root: Path
    base_url: str = ""
    requests: list[LoggedRequest] = field(default_factory=list)
    fail_with: dict[str, list[int]] = field(default_factory=dict)
    ignore_range: set[str] = field(default_factory=set)
    drop_after: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        """The URL of a file, given its path relative to the served root."""
        return f"{self.base_url}/{path.lstrip('/')}"

    def requests_for(self, path: str) -> list[LoggedRequest]:
        """The logged requests for one file (path relative to the served root)."""
        wanted = "/" + path.lstrip("/")
        with self.lock:
            return [r for r in self.requests if r.path == wanted]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: FileServer) -> None:
        self.state = state
        super().__init__(("127.0.0.1", 0), partial(RangeRequestHandler, directory=str(state.root)))


class RangeRequestHandler(SimpleHTTPRequestHandler):
    """``SimpleHTTPRequestHandler`` plus single byte ranges and the faults of ``FileServer``."""

    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        """Keep test output quiet; the request log lives in ``FileServer.requests``."""

    def do_GET(self) -> None:
        """Serve a file, a byte range of it, an injected error, or a dropped connection."""
        state = self.server.state
        url_path = unquote(urlsplit(self.path).path)
        header = self.headers.get("Range")
        with state.lock:
            state.requests.append(LoggedRequest(url_path, header))
            pending = state.fail_with.get(url_path)
            status = pending.pop(0) if pending else None
            drop = state.drop_after.pop(url_path, None)
            honour_range = url_path not in state.ignore_range
        if status is not None:
            self.send_error(status)
            return
        file = Path(self.translate_path(self.path))
        if not file.is_file():
            self.send_error(404)
            return
        size = file.stat().st_size
        start, end = 0, size - 1
        match = _RANGE_RE.fullmatch(header.strip()) if header and honour_range else None
        if match:
            start = int(match.group(1))
            end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            if start >= size or start > end:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        else:
            self.send_response(200)
        length = end - start + 1
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        with file.open("rb") as handle:
            handle.seek(start)
            if drop is not None:
                self.wfile.write(handle.read(min(drop, length)))
                self.wfile.flush()
                self.close_connection = True
                return
            shutil.copyfileobj(_Limited(handle, length), self.wfile)


class _Limited:
    """A read-only view of the next ``remaining`` bytes of a file (for byte ranges)."""

    def __init__(self, handle: BinaryIO, remaining: int) -> None:
        self.handle = handle
        self.remaining = remaining

    def read(self, size: int = -1) -> bytes:
        if self.remaining <= 0:
            return b""
        size = self.remaining if size < 0 else min(size, self.remaining)
        data = self.handle.read(size)
        self.remaining -= len(data)
        return data


@contextmanager
def serve_directory(root: Path) -> Iterator[FileServer]:
    """Serve ``root`` over HTTP on 127.0.0.1 in a background thread for the ``with`` block."""
    state = FileServer(root=Path(root))
    server = _Server(state)
    host, port = server.server_address[:2]
    state.base_url = f"http://{host}:{port}"
    thread = threading.Thread(
        target=partial(server.serve_forever, poll_interval=0.02), name="test-http", daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
