"""A webhook endpoint on loopback for the audit tests (a thread of its own, so that tests
that block on a child process still get their deliveries)."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
from collections import Counter
from typing import Any


class Receiver:
    """A webhook endpoint on loopback, in a thread of its own (the CLI's runs block this
    one): it refuses the first `failures` attempts of each run's delivery (HTTP 500), or
    every attempt while `down`, then takes it."""

    def __init__(self) -> None:
        self.failures = 0
        self.down = False
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.attempts: Counter[str] = Counter()
        state = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                run = self.headers["X-Atwhois-Run"]
                state.attempts[run] += 1
                refused = state.down or state.attempts[run] <= state.failures
                if not refused:
                    state.received.append((dict(self.headers), body))
                self.send_response(500 if refused else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def payloads(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.received]


SECRET = "s3cret-hook-key"  # what the tests sign webhook bodies with


def signed_by(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """Whether `body` carries the signature `secret` makes (X-Atwhois-Signature)."""
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["X-Atwhois-Signature"], expected)
