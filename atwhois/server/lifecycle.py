"""How a daemon lives (`atwhois serve`, `atwhois plc mirror`): it listens, says so in one
JSON line with what it serves, runs until SIGTERM or SIGINT, then stops listening, lets the
requests in flight finish and runs the app's clean-up (which closes its stores).

Strangers' connections are bounded (server/connections.py): a request's head must arrive
within the idle timeout, at most `max_connections` sockets are open (never more than the
open-file limit leaves room for), one address holds at most `per_client` of them, and at a
full bound a new connection takes the place of one whose client has taken nothing of its
answers for a moment (of any address at the bound, of its own at the share; a client that
reads, however slowly, is not one), else of an idle one, or is closed at once. The event
loop's errors are logged at most once per kind per interval."""

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

from atwhois.foundation import defaults

from .connections import LOG_EVERY, ConnectionLimit

FILES_HELD_BACK = 256  # open files kept for stores, upstreams, logs: never connections
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
    per_client: int | None = None,
    write_timeout: float = defaults.WRITE_TIMEOUT,
    bounded: Callable[[ConnectionLimit], None] | None = None,
) -> None:
    """`runner` (set up) on `host:port`; `started` runs once it listens, before the line
    that says so, whose fields `listening` gives beside the URL; `bounded` is given the
    bound on connections as it is made (for health and metrics)."""
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_QuietLoopErrors(log))
    assert runner.server is not None  # set up
    bound = connection_bound(max_connections)
    # asyncio accepts up to `backlog` connections at a time and makes their protocols (and
    # closes the evicted ones) an iteration later: two batches may be open beyond those
    # admitted, so fewer are admitted and the sockets stay within the bound.
    backlog = min(BACKLOG, max(16, bound // 8))
    limit = ConnectionLimit(
        runner.server,
        max(1, bound - 2 * backlog),
        log,
        per_client=per_client,
        write_timeout=write_timeout,
    )
    if bounded is not None:
        bounded(limit)
    listener = await loop.create_server(
        limit, host, port, reuse_port=reuse_port or None, backlog=backlog
    )
    sweeping = asyncio.create_task(limit.sweeping())
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
        "connections_per_client": limit.per_client,
        **listening(),
    }
    log.info(json.dumps(line))
    await stop.wait()
    limit.tell()  # what the last interval counted
    log.info(json.dumps({"event": "stopping"}))
    listener.close()  # no new connections; those open finish their requests
    sweeping.cancel()
    await runner.cleanup()  # lets in-flight requests finish, closes stores
