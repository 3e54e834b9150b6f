"""A stand-in for the PLC directory: a real HTTP server on loopback, on a thread of its own,
that forwards every request to the reference directory, and can lie or fail on command.

- `edits` maps a request path to a change of its 200 answer (a lying mirror), and
  `export_edit` changes each line of `/export` pages; `bodies` maps a path to the raw bytes
  of its 200 answer (what no JSON encoder writes: nesting past any parser, a flood);
- `fault` makes every answer misbehave the way real upstreams and their firewalls do:
  `"status:403"` (any status, with a short HTML page), `"html"` (200 with an HTML page),
  `"truncated"` (200 with the first half of the real body, its length announced correctly,
  so the answer looks complete), `"cut"` (the full length announced, half sent, then the
  connection closed), `"reset"` (the connection reset before any answer), `"hang"` (no answer
  ever), `"down"` (nothing listening: connections refused), `"trickle"` (the real answer's
  length announced, then one byte every `trickle_every` seconds);
- `export_script` answers `/export` itself, from its query (a scripted upstream whose pages
  misbehave on command: seqs that go back, lines that do not parse, forged copies);
- `lag` makes it a replica that many seconds behind: a read of a DID (`/{did}`, its log)
  answers what the directory answered before, until `lag` seconds after the stand-in first
  saw the directory answer otherwise (it re-serves the directory's own bytes, delayed).

It runs on its own thread and loop, so the code under test may call it from anywhere, and
a test may switch faults between two requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import aiohttp

from devnet.faults import reset

Edit = Callable[[Any], Any]  # parsed JSON in, parsed JSON out

_HTML = b"<!doctype html><html><body><h1>Request blocked</h1></body></html>"
_REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found"}


class PlcStandIn:
    def __init__(self, target: str, edits: dict[str, Edit] | None = None) -> None:
        self.target = target.rstrip("/")
        self.edits = edits or {}
        self.fault: str | None = None
        self.path_faults: dict[str, str] = {}  # a fault for one path only
        self.bodies: dict[str, bytes] = {}  # a path's 200 answer, raw
        self.export_edit: Edit | None = None  # a change of each line of /export answers
        self.export_script: Callable[[dict[str, str]], list[str]] | None = None
        self.trickle_every = 1.0
        self.lag = 0.0
        # path -> the directory's answers to it, each with when it was first seen, oldest first
        self._seen: dict[str, list[tuple[float, tuple[int, bytes]]]] = {}
        self.asked: list[tuple[float, str]] = []  # (time.monotonic(), path) of each request
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server: asyncio.Server | None = None
        self._session: aiohttp.ClientSession | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0
        self._call(self._listen())
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> int:
        return len(self.asked)

    def set_fault(self, fault: str | None) -> None:
        """Switch how the next requests are answered (`None`: forward faithfully)."""
        if fault == "down" and self.fault != "down":
            self._call(self._close_listener())
        elif fault != "down" and self.fault == "down":
            self._call(self._listen())
        self.fault = fault

    def stop(self) -> None:
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> PlcStandIn:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    # --- on the stand-in's own loop ---------------------------------------------------

    def _call(self, work: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(work, self._loop).result(30)

    async def _listen(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _close_listener(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for connection in list(self._connections):  # their connections go too
            connection.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _shutdown(self) -> None:
        await self._close_listener()
        if self._session is not None:
            await self._session.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
                headers = dict(
                    (k.strip().lower(), v.strip())
                    for k, v in (
                        line.split(":", 1)
                        for line in head.decode("latin-1").split("\r\n")[1:]
                        if ":" in line
                    )
                )
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.asked.append((time.monotonic(), path))
                if not await self._answer(writer, method, path, body):
                    return
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    async def _answer(
        self, writer: asyncio.StreamWriter, method: str, path: str, body: bytes
    ) -> bool:
        """Write one answer; False when the connection must end."""
        fault = self.path_faults.get(path, self.fault)
        if fault == "hang":
            await asyncio.sleep(3600)
            return False
        if fault == "reset":
            reset(writer)
            return False
        if fault == "html":
            return await _send(writer, 200, _HTML, "text/html")
        if fault is not None and fault.startswith("status:"):
            return await _send(writer, int(fault.split(":")[1]), _HTML, "text/html")
        if path in self.bodies:
            return await _send(writer, 200, self.bodies[path], "application/json")
        script = self.export_script
        if script is not None and path.startswith("/export"):
            query = dict(parse_qsl(urlsplit(path).query))
            status, answer = 200, "\n".join(script(query)).encode()
        else:
            status, answer = await self._forward(method, path, body)
            if self.lag and method == "GET" and not path.startswith("/export"):
                status, answer = self._lagged(path, (status, answer))
        if status == 200 and path in self.edits:
            answer = json.dumps(self.edits[path](json.loads(answer))).encode()
        if status == 200 and path.startswith("/export") and self.export_edit is not None:
            edit = self.export_edit
            lines = [json.dumps(edit(json.loads(line))) for line in answer.splitlines() if line]
            answer = "\n".join(lines).encode()
        if fault == "truncated":
            return await _send(writer, status, answer[: len(answer) // 2], "application/json")
        if fault == "trickle":
            writer.write(_head(status, len(answer), "application/json"))
            for byte in answer:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(self.trickle_every)
            return True
        if fault == "cut":
            head = _head(status, len(answer), "application/json")
            writer.write(head + answer[: len(answer) // 2])
            await writer.drain()
            return False
        return await _send(writer, status, answer, "application/json")

    def _lagged(self, path: str, answer: tuple[int, bytes]) -> tuple[int, bytes]:
        """What a replica `lag` seconds behind would answer: the newest answer first seen
        at least `lag` seconds ago (the first one ever seen, if none is that old)."""
        now = time.monotonic()
        seen = self._seen.setdefault(path, [])
        if not seen or seen[-1][1] != answer:
            seen.append((now, answer))
        old_enough = [kept for at, kept in seen if now - at >= self.lag]
        return old_enough[-1] if old_enough else seen[0][1]

    async def _forward(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        assert self._session is not None
        headers = {"Content-Type": "application/json"} if body else {}
        async with self._session.request(
            method, self.target + path, data=body or None, headers=headers
        ) as upstream:
            return upstream.status, await upstream.read()


def _head(status: int, length: int, content_type: str) -> bytes:
    reason = _REASONS.get(status, "Status")
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def _send(writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str) -> bool:
    writer.write(_head(status, len(body), content_type) + body)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    return True
