"""A fake OpenAI-compatible chat-completions server on 127.0.0.1.

Shared by the API generator's unit tests, the rule-retrieval tests, the stage tests that run
`generate`, `robustness` or the rule stages against an API model, and benchmarks/hostile_round.py
(no stage imports it): none of them may reach
a real endpoint, and each needs to see what was sent (the request log) and to script what
comes back (statuses to retry on, fixed bodies, or a reply computed from the prompt), down to
a hostile server's (`RawReply`: any bytes, any content type, trickled a byte at a time)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FakeOpenAI", "RawReply"]


class _Server(ThreadingHTTPServer):
    """Threads that never hold the process, and a client that hung up (a deadline, a stop,
    `Connection: close`) is no error: socketserver would print its traceback to stderr, where
    the stage test that runs next (the thread may outlive its own test) reads it as its own."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001 - socketserver's
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


@dataclass(frozen=True)
class RawReply:
    """A script step sent as it is: `body` bytes (not JSON, not UTF-8, an HTML page...) with
    `content_type`; with `trickle` > 0, one byte every `trickle` seconds (the status line and
    headers too when `trickle_headers`), as a slow or hostile server sends, until the body ends
    or the server is closed."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    trickle: float = 0.0
    trickle_headers: bool = False


class FakeOpenAI:
    """A chat-completions endpoint answering from a script of (status, body) steps or
    `RawReply`s; once the script is used up every request succeeds with `reply(last user
    message)` (default: the message echoed after "A:"), or, when `default` is given, with
    that step. `keep_alive`: HTTP/1.1 connections that stay open for the next request
    (`connections` counts those accepted), as real servers keep them."""

    def __init__(
        self,
        script: list[tuple[int, dict | None] | RawReply],
        reply: Callable[[str], str] | None = None,
        default: RawReply | None = None,
        keep_alive: bool = False,
    ) -> None:
        self.script = list(script)
        self.reply = reply or (lambda last: f"A:{last}")
        self.default = default
        self.requests: list[dict] = []
        #: set when the server closes: a trickling reply stops there
        self.closing = threading.Event()
        self.connections = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def setup(self):
                outer.connections += 1
                super().setup()

            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                if len(raw) < length or not raw:
                    # the client hung up before its body was sent (a deadline or a stop in an
                    # earlier test whose thread outlived it): nothing to answer, and no
                    # traceback on the stderr the next stage test reads as its own
                    self.close_connection = True
                    return
                body = json.loads(raw)
                outer.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                step = outer.script.pop(0) if outer.script else (outer.default or (200, None))
                if isinstance(step, RawReply):
                    self.send_raw(step)
                    return
                status, payload = step
                if status == 200 and payload is None:
                    last = body["messages"][-1]["content"]
                    payload = {
                        "choices": [
                            {"message": {"role": "assistant", "content": outer.reply(last)}}
                        ]
                    }
                data = json.dumps(payload or {"error": {"message": "busy"}}).encode()
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def send_raw(self, step: RawReply) -> None:
                # the connection's fate said as the server will act on it: an HTTP/1.1 reply
                # without `Connection: close` from a server that then hangs up had the client
                # reuse a closed connection now and then (a ConnectionError, not this reply)
                closing = "" if keep_alive else "Connection: close\r\n"
                head = (
                    f"HTTP/1.1 {step.status} Scripted\r\nContent-Type: {step.content_type}\r\n"
                    f"Content-Length: {len(step.body)}\r\n{closing}\r\n"
                ).encode()
                try:
                    if step.trickle_headers:
                        self.trickle(head, step.trickle)
                    else:
                        self.wfile.write(head)
                    self.trickle(step.body, step.trickle)
                except OSError:  # the client hung up (a deadline, a stop): as a server sees it
                    self.close_connection = True

            def trickle(self, data: bytes, pause: float) -> None:
                if not pause:
                    self.wfile.write(data)
                    return
                for i in range(len(data)):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    if outer.closing.wait(pause):
                        self.close_connection = True
                        return

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
