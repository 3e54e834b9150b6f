"""`/export/stream` (the PLC directory specification v0.3.0, P-API-3): the mirror's verified
operations over a WebSocket, one JSON `sequenced_op` per message, in the mirror's own `seq`
order. A consumer gives the last `seq` it holds as `cursor` and gets every operation after
it, then each new one as soon as the commit that stored it is done (the mirror's store is
looked at every `TICK` seconds by one task for all consumers); without a cursor, only new
ones.

The closes are the specification's (WebSocket code 1000, the reason as text):
- `FutureCursor`: the cursor is past the newest `seq` (the consumer mirrors another
  directory, or this one lost operations: never silently served from an older point);
- `OutdatedCursor`: the cursor is more than `backlog` operations behind (about a week of
  plc.directory's traffic by default): page through `/export` and come back;
- `ConsumerTooSlow`: one message waited more than `send_timeout` seconds for the consumer
  to read. Nothing is buffered for it: a consumer holds at most one page of operations in
  this process and a small socket buffer in the kernel, however far behind it is.

At most `max_consumers` consumers are served at once: past that, a new one is answered 503
before its upgrade (counted), so that consumers that never read cannot take the memory a
page each costs past a bound the operator chose. A consumer costs about 20 KiB while it
waits, and up to a page of operations more while it does not read (`PAGE`); no
compression is negotiated. The process's memory stays near its highest after consumers
leave (freed heap rarely returns to the operating system): the bound is what holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import time
from collections.abc import Callable

from aiohttp import WSMsgType, web

from atwhois.foundation import defaults
from atwhois.resolver.response import MIRROR_HEADER

from .records import StoredOp
from .state import MirrorState
from .store import SqlMirrorStore, read_from
from .upstream_stream import FUTURE, OUTDATED, TOO_SLOW

BACKLOG = defaults.PLC_STREAM_BACKLOG  # operations a cursor may be behind the newest
SEND_TIMEOUT = defaults.PLC_STREAM_TIMEOUT  # seconds one message may wait to be read
MAX_CONSUMERS = defaults.PLC_STREAM_CONSUMERS
TICK = 0.05  # seconds between looks at the store's newest seq
# operations read from the store at once, per consumer: what a consumer that stops reading
# holds here (a page of 256 was ~360 KiB each); reading again is a cheap indexed range
PAGE = 32
SEND_BUFFER = 64 * 1024  # the kernel's send buffer for a consumer's socket (it doubles it)
_CLOSE_WAIT = 2.0  # seconds a close frame may take before the connection is cut


class ExportStream:
    def __init__(
        self,
        store: SqlMirrorStore,
        state: MirrorState,
        line: Callable[[StoredOp], str],
        *,
        backlog: int = BACKLOG,
        send_timeout: float = SEND_TIMEOUT,
        tick: float = TICK,
        max_consumers: int = MAX_CONSUMERS,
    ) -> None:
        """`line`: the export line of an operation (`/export`'s `sequenced_op` form)."""
        self.store = store
        self.state = state
        self.line = line
        self.backlog = backlog
        self.send_timeout = send_timeout
        self.tick = tick
        self.max_consumers = max_consumers
        self._head = -1
        self._moved = asyncio.Condition()
        self._watcher: asyncio.Task[None] | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = request.query.get("cursor")
        if raw is not None and not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
            return web.json_response({"message": "Invalid cursor parameter"}, status=400)
        cursor = int(raw) if raw is not None else None
        # no permessage-deflate: its compressor costs ~186 KiB a consumer (measured: 300
        # silent consumers, 71 -> 125 MiB with it, 71 -> 77 MiB without), kept for as
        # long as the consumer stays, and an operation is a few hundred bytes
        ws = web.WebSocketResponse(heartbeat=30.0, max_msg_size=4096, compress=False)
        if not ws.can_prepare(request).ok:
            return web.json_response({"message": "upgrade required"}, status=426)
        if self.state.stream_consumers >= self.max_consumers:
            self.state.stream_closed["full"] += 1
            return web.json_response(
                {"message": f"this mirror serves {self.max_consumers} stream consumers at once"},
                status=503,
                headers={"Retry-After": "10"},
            )
        # a follower learns here that this is a mirror, whose view may be behind (P-API-2)
        ws.headers[MIRROR_HEADER] = self.state.provenance(time.time())
        await ws.prepare(request)
        sock = request.transport.get_extra_info("socket") if request.transport else None
        if sock is not None:  # what the kernel holds for a consumer that does not read
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        self.state.stream_consumers += 1
        reason = None
        try:
            reason = await self._serve(ws, cursor)
        except (ConnectionError, RuntimeError):  # the consumer went away mid-send
            reason = "gone"
        finally:
            self.state.stream_consumers -= 1
            self.state.stream_closed[reason or "by_consumer"] += 1
        if reason in (FUTURE, OUTDATED, TOO_SLOW):
            await self._close(request, ws, reason)
        return ws

    async def _serve(self, ws: web.WebSocketResponse, cursor: int | None) -> str | None:
        """Sends until the consumer goes; returns the close reason, if it is the mirror's."""
        head = await self._newest()
        if cursor is not None and cursor > head:
            return FUTURE
        if cursor is not None and head - cursor > self.backlog:
            return OUTDATED
        position = head if cursor is None else cursor
        listening = asyncio.ensure_future(_until_closed(ws))
        try:
            while not listening.done():
                ops = await self._read(position)
                if not ops:
                    await self._wait_past(position)
                    continue
                for op in ops:
                    try:
                        async with asyncio.timeout(self.send_timeout):
                            await ws.send_str(self.line(op))
                    except TimeoutError:
                        return TOO_SLOW
                    position = op.seq
                    self.state.stream_sent += 1
            return None
        finally:
            listening.cancel()

    async def _close(self, request: web.Request, ws: web.WebSocketResponse, reason: str) -> None:
        """Closes with the reason; a consumer that reads nothing never takes the close frame
        either: its connection is cut."""
        try:
            async with asyncio.timeout(_CLOSE_WAIT):
                await ws.close(code=1000, message=reason.encode())
        except (TimeoutError, ConnectionError, RuntimeError):
            if request.transport is not None:
                request.transport.abort()

    async def _read(self, position: int) -> list[StoredOp]:
        export = self.store.export
        return await read_from(
            self.store, functools.partial(export, after_seq=position, after_time=None, count=PAGE)
        )

    async def _newest(self) -> int:
        """The newest seq stored; the watcher is started (it runs while anyone listens)."""
        if self._watcher is None or self._watcher.done():
            self._head = await self._read_head()
            self._watcher = asyncio.ensure_future(self._watch())
        return self._head

    async def _read_head(self) -> int:
        return await read_from(self.store, self.store.head)

    async def _watch(self) -> None:
        """One look at the store every tick for all consumers, while there are any; each
        waits for its turn."""
        while self.state.stream_consumers > 0:
            await asyncio.sleep(self.tick)
            head = await self._read_head()
            if head != self._head:
                self._head = head
                async with self._moved:
                    self._moved.notify_all()

    async def _wait_past(self, position: int) -> None:
        """Until the store holds an operation after `position`, or the consumer left."""
        async with self._moved:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):  # and look whether the consumer left
                    await self._moved.wait_for(lambda: self._head > position)

    async def aclose(self) -> None:
        """Stops the watcher (the server's shutdown: its consumers are gone)."""
        if self._watcher is not None:
            self._watcher.cancel()


async def _until_closed(ws: web.WebSocketResponse) -> None:
    """Reads what the consumer sends (pings are answered by aiohttp; anything else is
    ignored) until it closes."""
    async for message in ws:
        if message.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
            return
