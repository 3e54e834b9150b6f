"""The bound on a daemon's connections (`serve_until_stopped` puts it in front of aiohttp's
server): strangers' connections are counted from their accept to their loss, and bounded.

- A request's head must arrive within the idle timeout (aiohttp's keep-alive timer, which
  also runs from a connection's start).
- At most `max_connections` sockets are open (never more than the open-file limit leaves room
  for; two accept batches fewer are admitted, for the sockets being accepted and closed), and
  one address holds at most `per_client` of them (a quarter by default): the share keeps the
  bound fair between addresses.
- A connection is stuck when answer bytes wait for its client and the client has taken none
  of them for `STUCK_GRACE`: what the client's kernel has acknowledged is read from the
  socket (TCP_INFO). A connection with a request in hand is looked at every `SWEEP_EVERY`
  (and when its writes pause) until answer bytes are seen waiting, then again whenever its
  clock matters: at a full bound, and for the write timeout. A client that reads, however
  slowly, takes some (its kernel acknowledges what its reads make room for) and its clock
  restarts; one that reads nothing takes nothing once its receive buffer is full. Whether the
  writes are paused does not tell: a busy daemon takes seconds to fill the buffers of many
  new connections, and the writes to a slow reader pause over and over.
- When the bound is full (all of it, or an address's share), a new connection takes the
  place of the connection stuck longest: at the bound, of any address; at the share, of its
  own. Else it takes the place of the oldest idle one (no request in hand, no answer on its
  way: a slow or silent client), unless one whose client has taken nothing for longer than
  `SWEEP_EVERY` may be found stuck in a moment: then a client between two requests keeps its
  place, since the new connection is as likely one more of the stuck ones' (their clients
  come back when closed). Else the new one is closed as soon as it is accepted, before
  aiohttp sees it. So neither a flood of idle connections nor one of clients that never
  read, from any address or from the very address of the clients that ask (every local
  client's is 127.0.0.1; behind a proxy, every client's is the proxy's), locks out the
  clients that ask.
- A connection whose client has taken nothing for `write_timeout` is closed, whatever the
  bound.

What behaviour cannot tell: a client that reads in steps longer than `STUCK_GRACE` (its
kernel acknowledges nothing between two: a large receive buffer, read a little at a time)
looks stuck meanwhile, and may be taken for stuck at a full bound; one that reads a trickle
on purpose reads, and keeps its place as a slow client does. Without TCP_INFO (not Linux),
only the bytes held in this process tell. What each connection may hold is bounded too: the
answer bytes buffered for it (`WRITE_BUFFER`, and the kernel's `SEND_BUFFER`), aiohttp's
queue of pipelined requests. Evictions and refusals are logged once per interval with the
count, not once per connection."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
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
# process, aiohttp waits for the client to read; the kernel holds at most about twice
# SEND_BUFFER more.
WRITE_BUFFER = 16 * 1024
SEND_BUFFER = 32 * 1024
SWEEP_EVERY = 0.25  # seconds between two looks at the connections with a request in hand
STUCK_GRACE = 0.5  # seconds a client may take nothing of its answers before it is stuck
_LINGER_NONE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets
# Linux's struct tcp_info as far as tcpi_notsent_bytes: tcpi_unacked (segments in flight),
# tcpi_bytes_acked, tcpi_notsent_bytes (in the send queue, not yet sent)
_TCP_INFO = getattr(socket, "TCP_INFO", None)  # Linux's only
_TCP_INFO_FIELDS = struct.Struct("24xI92xQ16xI")
_TCP_INFO_SIZE = _TCP_INFO_FIELDS.size


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


def _progress(transport: asyncio.BaseTransport) -> tuple[int, bool]:
    """How many bytes of its answers the client's kernel has acknowledged (which it does as
    reads make room: a client that reads nothing takes nothing once its buffer is full), and
    whether answer bytes wait for it, in this process or in the kernel."""
    waiting = cast(asyncio.WriteTransport, transport).get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if sock is not None and _TCP_INFO is not None:
        with contextlib.suppress(OSError):
            info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_SIZE)
            if len(info) >= _TCP_INFO_SIZE:
                unacked, acked, unsent = _TCP_INFO_FIELDS.unpack_from(info)
                return acked, bool(waiting or unacked or unsent)
    return -waiting, bool(waiting)  # no TCP_INFO: only what this process holds tells


class _Counted(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted from the moment it is made (before
    asyncio calls `connection_made`, a batch of accepts later) until it is lost; its peer's
    address; while answer bytes wait for its client, since when the client has taken none
    (`stuck_since`), and how many it had taken at the last look (`acked`)."""

    __slots__ = (
        "acked", "admitted", "evicted", "inner", "limit", "peer", "stuck_since", "transport",
    )  # fmt: skip

    def __init__(self, inner: web.RequestHandler, limit: ConnectionLimit) -> None:
        self.inner, self.limit, self.evicted = inner, limit, False
        self.admitted = False  # past its address's share it never reaches aiohttp
        self.peer = ""
        self.stuck_since: float | None = None
        self.acked = 0
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
        if self.stuck_since is None:  # watched from now, not from the next look
            self.limit.look(self, time.monotonic())
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def close(self) -> None:
        """Closed at once: a reset, nothing more written (a stuck client reads nothing)."""
        self.evicted = True
        self.limit.unwatch(self)  # never chosen again
        if self.transport is not None:
            _reset(self.transport)


def _since(counted: _Counted, now: float) -> float:
    """Since when a watched connection's client has taken nothing (`now` for one not)."""
    return now if counted.stuck_since is None else counted.stuck_since


class _Group:
    """Connections under one bound (all of them, or one address's): `open`, oldest first,
    and `watched`, those whose answer bytes wait for their client, the longest without the
    client taking one first."""

    __slots__ = ("open", "watched")

    def __init__(self) -> None:
        self.open: dict[_Counted, None] = {}
        self.watched: dict[_Counted, None] = {}

    def stuck(self, now: float, grace: float) -> _Counted | None:
        """The connection whose client has taken nothing for longest, if that is more than
        `grace`, looked at again first (one that took some since, or has nothing waiting, is
        moved on)."""
        while self.watched:
            counted = next(iter(self.watched))
            if now - _since(counted, now) <= grace:
                return None  # and the others have waited less
            if counted.limit.look(counted, now):
                return counted
        return None

    def victim(self, now: float) -> _Counted | None:
        """Whose place a new connection takes: the one stuck longest; else the oldest idle
        one (a slow or silent client), unless one whose client has taken nothing for longer
        than a look's interval may be found stuck in a moment: a client between two requests
        keeps its place while stuck ones may come (the new connection is as likely one more
        of theirs)."""
        stuck = self.stuck(now, STUCK_GRACE)
        if stuck is not None or self.stuck(now, SWEEP_EVERY) is not None:
            return stuck
        for counted in self.open:
            if counted.evicted or counted.stuck_since is not None:
                continue
            # between two requests, unless its answers are still on their way: aiohttp waits
            # for the next request as soon as it has written the last answer to the transport
            if waiting_for_request(counted.inner) and not counted.limit.look(counted, now):
                return counted
        return None


class ConnectionLimit:
    """The protocol factory in front of aiohttp's server: its connections up to `limit`
    (past it by at most the connections being closed, one batch of accepts), at most
    `per_client` of them from one address, none whose client has taken nothing for
    `write_timeout`."""

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
        self.all = _Group()
        self.by_peer: dict[str, _Group] = {}  # each address's
        self.counts = {"evicted": 0, "refused": 0, "stuck": 0, "over_share": 0}
        self._told = dict(self.counts)  # already logged
        self._told_at = 0.0

    def __call__(self) -> asyncio.BaseProtocol:
        if len(self.all.open) >= self.limit:
            victim = self.all.victim(time.monotonic())
            if victim is None:
                self._count("refused")
                return _Refused()
            victim.close()  # counted until it is lost: the bound holds meanwhile
            self._count("evicted")
        counted = _Counted(self.server(), self)
        self.all.open[counted] = None
        return counted

    def arrived(self, counted: _Counted) -> bool:
        """Its address is known now: at its share, it takes the place of one of its own,
        chosen as at the bound, or it is refused."""
        mine = self.by_peer.setdefault(counted.peer, _Group())
        if len(mine.open) >= self.per_client:
            victim = mine.victim(time.monotonic())
            if victim is None:
                self._count("over_share")
                return False
            victim.close()
            self._count("evicted")
        mine.open[counted] = None
        return True

    def look(self, counted: _Counted, now: float) -> bool:
        """Whether answer bytes wait for the connection's client and it has taken none since
        `stuck_since`. Those first seen waiting are watched from now; a client that took
        some since the last look reads, however slowly: its clock restarts; once nothing
        waits, the connection is no longer watched."""
        if counted.transport is None:
            return False
        acked, waiting = _progress(counted.transport)
        took, counted.acked = acked > counted.acked, acked
        if not waiting:
            self.unwatch(counted)
            return False
        seen = counted.stuck_since is not None
        if seen and not took:
            return True
        counted.stuck_since = now
        for group in self._groups(counted):
            group.watched.pop(counted, None)
            group.watched[counted] = None
        return not seen

    def unwatch(self, counted: _Counted) -> None:
        counted.stuck_since = None
        for group in self._groups(counted):
            group.watched.pop(counted, None)

    def _groups(self, counted: _Counted) -> Iterator[_Group]:
        yield self.all
        mine = self.by_peer.get(counted.peer)
        if mine is not None:
            yield mine

    def left(self, counted: _Counted) -> None:
        self.unwatch(counted)
        self.all.open.pop(counted, None)
        mine = self.by_peer.get(counted.peer)
        if mine is not None:
            mine.open.pop(counted, None)
            if not mine.open:
                del self.by_peer[counted.peer]

    def sweep(self, now: float | None = None) -> None:
        """Look at every connection with a request in hand that is not watched yet, and at
        those watched for less than `STUCK_GRACE` (what a client's kernel takes in the first
        moments, the last of what was on its way, counts then, not when it may be evicted;
        the others are looked at again when their clock matters); then close every one
        whose client has taken nothing for the write timeout."""
        now = time.monotonic() if now is None else now
        for counted in self.all.open:
            new = counted.stuck_since is None and counted.admitted and not counted.evicted
            if new and not waiting_for_request(counted.inner):
                self.look(counted, now)
        young = itertools.takewhile(
            lambda c: now - _since(c, now) < STUCK_GRACE, reversed(self.all.watched)
        )
        for counted in list(young):
            self.look(counted, now)
        while (stuck := self.all.stuck(now, self.write_timeout)) is not None:
            stuck.close()
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
            "open": len(self.all.open),
            "admitted": self.limit,
            "per_client": self.per_client,
            "closed": dict(self.counts),
        }

    def metrics(self) -> Iterator[Metric]:
        yield gauge("atwhois_connections_open", "Client connections open.", len(self.all.open))
        closed = CounterMetricFamily(
            "atwhois_connections_closed",
            "Client connections closed by the bound: evicted for a new one (stuck or idle), "
            "refused at the bound, stuck (their client took nothing for the write timeout), "
            "or refused over their address's share.",
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
