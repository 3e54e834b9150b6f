"""The bound on a daemon's connections (`serve_until_stopped` puts it in front of aiohttp's
server). Strangers' connections are bounded: a request's head must arrive within the idle
timeout (aiohttp's keep-alive timer, which also runs from a connection's start), and at most
`max_connections` sockets are open (never more than the open-file limit leaves room for;
two accept batches fewer are admitted, for the sockets being accepted and closed). At the
bound a new connection takes the place of the oldest one that is idle (no request in hand:
a slow or silent client), or else of the one stuck longest writing (its answer waits for a
client that does not read), so that neither a flood of idle connections nor one of slow
readers locks out the clients that ask; with neither, the new one is closed as soon as it
is accepted. A connection whose answer has not moved for `write_timeout` seconds is closed,
whatever the bound. One address holds at most `per_client` of the connections: past that,
its new one takes the place of its own oldest idle one, or is closed at once, before aiohttp
sees it (an address whose connections are all stuck gets no more, however fast it asks). What
each connection may hold is bounded too: the answer bytes buffered for it (`WRITE_BUFFER`,
and the kernel's `SEND_BUFFER`), aiohttp's queue of pipelined requests. Evictions and
refusals are logged once per interval with the count, not once per connection."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any, cast

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, Metric

from atwhois.foundation import defaults

from .hooks import waiting_for_request
from .metrics import gauge

LOG_EVERY = 10.0  # seconds between two lines about refused connections or loop errors
# What one connection's unread answers may take: past WRITE_BUFFER bytes buffered in this
# process, aiohttp waits for the client to read (and the connection counts as stuck); the
# kernel holds at most about twice SEND_BUFFER more.
WRITE_BUFFER = 16 * 1024
SEND_BUFFER = 32 * 1024
SWEEP_EVERY = 1.0  # seconds between two looks for connections stuck past the write timeout
STUCK_GRACE = 0.5  # seconds a connection's writes wait before it counts as stuck, to evict
_LINGER_NONE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets


def _reset(transport: asyncio.BaseTransport) -> None:
    """Closed at once with a reset: nothing more is sent and the kernel keeps nothing. A
    plain close queues its end behind the answers a client never reads, and the socket
    lingers, orphaned, with its buffers, until the kernel gives up on it (minutes); that
    client never even learns it was closed."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_NONE)
    if hasattr(transport, "abort"):  # asyncio's and uvloop's transports alike
        cast(asyncio.Transport, transport).abort()
    else:
        transport.close()


class _Refused(asyncio.Protocol):
    """A connection over the bound: closed at once, nothing read, nothing written."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        _reset(transport)


class _Counted(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted from the moment it is made (before
    asyncio calls `connection_made`, a batch of accepts later) until it is lost; its peer's
    address, and since when its writes wait for the client to read (`stuck_since`)."""

    __slots__ = ("admitted", "evicted", "inner", "limit", "peer", "stuck_since", "transport")

    def __init__(self, inner: web.RequestHandler, limit: ConnectionLimit) -> None:
        self.inner, self.limit, self.evicted = inner, limit, False
        self.admitted = False  # past its address's share it never reaches aiohttp
        self.peer = ""
        self.stuck_since: float | None = None
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if peer else ""
        if not self.limit.arrived(self):
            # closed once connection_made has returned: uvloop ignores an abort made in it
            # (the connection stayed open, and counted, for as long as the client liked)
            asyncio.get_running_loop().call_soon(self.close)
            return
        self.admitted = True
        # uvloop's transports are asyncio's in all but their classes: asked for by method
        if hasattr(transport, "set_write_buffer_limits"):
            cast(asyncio.WriteTransport, transport).set_write_buffer_limits(high=WRITE_BUFFER)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.limit.left(self)
        if self.admitted:
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.admitted:
            self.inner.data_received(data)

    def eof_received(self) -> None:
        if self.admitted:
            self.inner.eof_received()  # None: the transport closes itself

    def pause_writing(self) -> None:
        self.stuck_since = time.monotonic()
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.stuck_since = None
        self.inner.resume_writing()

    def close(self) -> None:
        """Closed at once: a reset, nothing more written (a stuck client reads nothing)."""
        self.evicted = True
        if self.transport is not None:
            _reset(self.transport)


class ConnectionLimit:
    """The protocol factory in front of aiohttp's server: its connections up to `limit`
    (past it by at most the connections being closed, one batch of accepts), at most
    `per_client` of them from one address, none stuck writing past `write_timeout`."""

    def __init__(
        self,
        server: web.Server,
        limit: int,
        log: logging.Logger,
        *,
        per_client: int | None = None,
        write_timeout: float = defaults.WRITE_TIMEOUT,
    ) -> None:
        self.server, self.limit, self.log = server, limit, log
        self.per_client = per_client or max(1, limit // 4)
        self.write_timeout = write_timeout
        self.open: dict[_Counted, None] = {}  # oldest first
        self.by_peer: dict[str, dict[_Counted, None]] = {}  # each address's, oldest first
        self.counts = {"evicted": 0, "refused": 0, "stuck": 0, "over_share": 0}
        self._told = dict(self.counts)  # already logged
        self._told_at = 0.0

    def __call__(self) -> asyncio.BaseProtocol:
        if len(self.open) >= self.limit:
            victim = self._victim(self.open)
            if victim is None:
                self._count("refused")
                return _Refused()
            victim.close()  # counted until it is lost: the bound holds meanwhile
            self._count("evicted")
        counted = _Counted(self.server(), self)
        self.open[counted] = None
        return counted

    def _victim(self, connections: dict[_Counted, None]) -> _Counted | None:
        """The connection stuck writing the longest, if it has been for `STUCK_GRACE` (a
        client that does not read); else the oldest idle one (a client that does not ask:
        a kept-alive client between two requests is worth more than one that does not
        read); else one stuck a moment."""
        now = time.monotonic()
        stuck = [c for c in connections if c.stuck_since is not None and not c.evicted]
        longest = min(stuck, key=lambda c: c.stuck_since or 0.0) if stuck else None
        if longest is not None and now - (longest.stuck_since or now) >= STUCK_GRACE:
            return longest
        idle = _oldest_idle(connections)
        return idle if idle is not None else longest

    def arrived(self, counted: _Counted) -> bool:
        """Its address is known now: at its share, it takes the place of one of its own
        that is idle (a client coming back), or it is refused (one whose connections are
        all stuck or busy gets no more; the stuck ones go at the write timeout)."""
        mine = self.by_peer.setdefault(counted.peer, {})
        if len(mine) >= self.per_client:
            self._count("over_share")
            idle = _oldest_idle(mine)
            if idle is None:
                return False
            idle.close()
        mine[counted] = None
        return True

    def left(self, counted: _Counted) -> None:
        self.open.pop(counted, None)
        mine = self.by_peer.get(counted.peer)
        if mine is not None:
            mine.pop(counted, None)
            if not mine:
                del self.by_peer[counted.peer]

    def sweep(self, now: float | None = None) -> None:
        """Close every connection whose answer has not moved for the write timeout."""
        now = time.monotonic() if now is None else now
        for counted in list(self.open):
            since = counted.stuck_since
            if since is not None and now - since > self.write_timeout and not counted.evicted:
                counted.close()
                self._count("stuck")

    async def sweeping(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY)
            self.sweep()

    def _count(self, what: str) -> None:
        self.counts[what] += 1
        if time.monotonic() - self._told_at >= LOG_EVERY:
            self.tell()

    def health(self) -> dict[str, Any]:
        """For `/_health`: connections open now, the bounds, and those closed, by why."""
        return {
            "open": len(self.open),
            "admitted": self.limit,
            "per_client": self.per_client,
            "closed": dict(self.counts),
        }

    def metrics(self) -> Iterator[Metric]:
        yield gauge("atwhois_connections_open", "Client connections open.", len(self.open))
        closed = CounterMetricFamily(
            "atwhois_connections_closed",
            "Client connections closed by the bound: evicted for a new one (idle or stuck "
            "writing), refused at the bound, stuck writing past the write timeout, or over "
            "their address's share.",
            labels=["reason"],
        )
        for reason, count in self.counts.items():
            closed.add_metric([reason], count)
        yield closed

    def tell(self) -> None:
        """One line with the counts since the last one (if any changed)."""
        if self.counts == self._told:
            return
        line = {"event": "connection_limit", "limit": self.limit}
        line.update({k: n - self._told[k] for k, n in self.counts.items()})
        self.log.warning(json.dumps(line))
        self._told, self._told_at = dict(self.counts), time.monotonic()


def _oldest_idle(connections: dict[_Counted, None]) -> _Counted | None:
    """The first (oldest) of `connections` that waits for a request and is not closing."""
    return next((c for c in connections if not c.evicted and waiting_for_request(c.inner)), None)
