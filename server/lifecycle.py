"""How a daemon lives (`atwhois serve`, `atwhois plc mirror`): it listens, says so in one
JSON line with what it serves, runs until SIGTERM or SIGINT, then stops listening, lets the
requests in flight finish and runs the app's clean-up (which closes its stores).

Strangers' connections are bounded: a request's head must arrive within the idle timeout
(aiohttp's keep-alive timer, which also runs from a connection's start), and at most
`max_connections` sockets are open (never more than the open-file limit leaves room for;
two accept batches fewer are admitted, for the sockets being accepted and closed). At the
bound a new connection takes the place of the oldest one that is idle (no request in hand:
a slow or silent client), so that a flood of idle connections cannot lock out the clients
that ask; with none idle, the new one is closed as soon as it is accepted. Either is logged
once per interval with the count, not once per connection."""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import signal
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from foundation import defaults

FILES_HELD_BACK = 256  # open files kept for stores, upstreams, logs: never connections
LOG_EVERY = 10.0  # seconds between two lines about refused connections or loop errors
BACKLOG = 512  # connections the kernel queues before they are accepted (a burst's worth)


def runner_settings(idle_timeout: float = defaults.IDLE_TIMEOUT) -> dict[str, Any]:
    """What every daemon's `web.AppRunner` is given: no access log (the daemon writes its
    own), and the idle timeout that also bounds the wait for a request's head."""
    return {"access_log": None, "keepalive_timeout": idle_timeout}


def connection_bound(wanted: int) -> int:
    """`wanted`, within what the open-file limit allows (raised to its hard limit first)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - FILES_HELD_BACK))


class _Refused(asyncio.Protocol):
    """A connection over the bound: closed at once, nothing read, nothing written."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if isinstance(transport, asyncio.Transport):
            transport.abort()  # a reset: no lingering close for a client that will not read
        else:
            transport.close()


def _idle(handler: web.RequestHandler) -> bool:
    """Whether a connection waits for a request (its head not yet in): what aiohttp's own
    keep-alive timer closes, read the way it reads it."""
    waiter = getattr(handler, "_waiter", None)
    return waiter is not None and not waiter.done()


class _Counted(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted from the moment it is made (before
    asyncio calls `connection_made`, a batch of accepts later) until it is lost."""

    __slots__ = ("evicted", "inner", "limit")

    def __init__(self, inner: web.RequestHandler, limit: ConnectionLimit) -> None:
        self.inner, self.limit, self.evicted = inner, limit, False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.limit.open.pop(self, None)
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> None:
        self.inner.eof_received()  # None: the transport closes itself

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class ConnectionLimit:
    """The protocol factory in front of aiohttp's server: its connections up to `limit`
    (past it by at most the connections being closed, one batch of accepts)."""

    def __init__(self, server: web.Server, limit: int, log: logging.Logger) -> None:
        self.server, self.limit, self.log = server, limit, log
        self.open: dict[_Counted, None] = {}  # oldest first
        self.counts = {"evicted": 0, "refused": 0}
        self._told = dict(self.counts)  # already logged
        self._told_at = 0.0

    def __call__(self) -> asyncio.BaseProtocol:
        if len(self.open) >= self.limit:
            victim = next((c for c in self.open if not c.evicted and _idle(c.inner)), None)
            if victim is None:
                self._count("refused")
                return _Refused()
            victim.evicted = True  # counted until it is lost: the bound holds meanwhile
            victim.inner.force_close()
            self._count("evicted")
        counted = _Counted(self.server(), self)
        self.open[counted] = None
        return counted

    def _count(self, what: str) -> None:
        self.counts[what] += 1
        now = time.monotonic()
        if now - self._told_at >= LOG_EVERY:
            line = {"event": "connection_limit", "limit": self.limit}
            line.update({k: n - self._told[k] for k, n in self.counts.items()})
            self.log.warning(json.dumps(line))
            self._told, self._told_at = dict(self.counts), now


class _QuietLoopErrors:
    """The event loop's error handler, at most one line per kind of error per interval
    (a burst of failed `accept()`s would otherwise log a traceback each)."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self._last: dict[str, float] = {}
        self._muted: dict[str, int] = {}

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        kind = f"{context.get('message', '')}: {type(error).__name__ if error else ''}"
        now = time.monotonic()
        if now - self._last.get(kind, -LOG_EVERY) < LOG_EVERY:
            self._muted[kind] = self._muted.get(kind, 0) + 1
            return
        self._last[kind] = now
        line = {
            "event": "loop_error",
            "message": str(context.get("message", ""))[:200],
            "error": repr(error)[:300] if error else None,
            "muted_since_last": self._muted.pop(kind, 0),
        }
        self.log.warning(json.dumps(line))


async def serve_until_stopped(
    runner: web.AppRunner,
    host: str,
    port: int,
    *,
    log: logging.Logger,
    listening: Callable[[], dict[str, Any]],
    started: Callable[[], None] | None = None,
    reuse_port: bool = False,
    max_connections: int = defaults.MAX_CONNECTIONS,
) -> None:
    """`runner` (set up) on `host:port`; `started` runs once it listens, before the line
    that says so, whose fields `listening` gives beside the URL."""
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_QuietLoopErrors(log))
    assert runner.server is not None  # set up
    bound = connection_bound(max_connections)
    # asyncio accepts up to `backlog` connections at a time and makes their protocols (and
    # closes the evicted ones) an iteration later: two batches may be open beyond those
    # admitted, so fewer are admitted and the sockets stay within the bound.
    backlog = min(BACKLOG, max(16, bound // 8))
    limit = ConnectionLimit(runner.server, max(1, bound - 2 * backlog), log)
    listener = await loop.create_server(
        limit, host, port, reuse_port=reuse_port or None, backlog=backlog
    )
    if started is not None:
        started()
    address = listener.sockets[0].getsockname()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    line = {
        "event": "listening",
        "url": f"http://{address[0]}:{address[1]}",
        "max_connections": bound,
        "connections_admitted": limit.limit,
        **listening(),
    }
    log.info(json.dumps(line))
    await stop.wait()
    log.info(json.dumps({"event": "stopping"}))
    listener.close()  # no new connections; those open finish their requests
    await runner.cleanup()  # lets in-flight requests finish, closes stores
