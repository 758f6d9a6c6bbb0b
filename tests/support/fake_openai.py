"""A fake OpenAI-compatible chat-completions server on 127.0.0.1, and the answers a chat LLM
gives to rule retrieval's two prompts.

Shared by the API generator's unit tests, the rule-retrieval tests and the stage tests that
run `generate`, `robustness` or the rule stages against an API model: none of them may reach
a real endpoint, and each needs to see what was sent (the request log) and to script what
comes back (statuses to retry on, fixed bodies, or a reply computed from the prompt)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rulerag.rule_retrieval.prompts import R3_TEMPLATE_HEAD


class FakeOpenAI:
    """A chat-completions endpoint answering from a script of (status, body) steps; once the
    script is used up every request succeeds with `reply(last user message)` (default: the
    message echoed after "A:")."""

    def __init__(
        self, script: list[tuple[int, dict | None]], reply: Callable[[str], str] | None = None
    ) -> None:
        self.script = list(script)
        self.reply = reply or (lambda last: f"A:{last}")
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                outer.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                status, payload = outer.script.pop(0) if outer.script else (200, None)
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

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def fake_rule_llm(last: str) -> str:
    """A chat API's answers to the two prompts: a ranking for R³, a rule for self-induction."""
    if last.startswith(R3_TEMPLATE_HEAD):
        return "[2] > [1]"
    return "Make a visit leads to Host a visit"
