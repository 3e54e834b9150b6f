"""A Jetstream stand-in: no Jetstream server is on the registries, so this one follows a real
event stream (the test network's PDS's `subscribeRepos`) as the reference Jetstream
(github.com/bluesky-social/jetstream at 9a30defd224e9058814a7d6ce8d9e4fc48d5493c) follows a
relay's, and serves it as the reference does. The events come from the real PDS; every
byte put on the wire is the reference's encoders' (`devnet.jetstream_wire`, checked against
frames rebuilt from the reference's code in `tests/vectors/jetstream/frames.json`).

Each firehose frame becomes the reference's events (one per commit operation), each given
the instance's own `seq` (from `first_seq`: two stand-ins number theirs apart, as two
instances do) and the time it was witnessed, in microseconds: one for a frame's events (the
reference stamps each batch it reads with one time), increasing from frame to frame. Both
endpoints take one cursor namespace, as the reference's `internal/subscribe/cursor.go` does:
below 10^15 a seq, replayed inclusive (one not reached yet starts at the live tip, without
a word); from 10^15 a time, translated to the first event witnessed then or after (a future
one: the live tip). The instance keeps events from its retention floor on (`forget_before`
raises it); without a cursor, it serves from its live tip.

- `/subscribe` (v1): each event as `Encode` writes it (`did`, `time_us`, `cursor` with the
  seq, `kind`, the body; no `#sync`); `wantedCollections` filters commits only; a cursor
  below the floor is clamped up to it without a word; no subprotocol; a refusal is plain
  text.
- `/xrpc/network.bsky.jetstream.subscribeEvents` (v2, unless `v2=False`, an instance not
  upgraded yet): `{"$type":"message","payload":...}` frames; `kinds` filters (a kind not in
  the lexicon, a legacy parameter: HTTP 400 `InvalidRequest`); `xrpc.v1.json` echoed only
  when offered; a seq cursor below the floor is refused before the upgrade (HTTP 400
  `CursorTooOld`, the reference's JSON envelope and message); a time cursor at or before the
  oldest event kept is clamped to it and said first in an `#info OutdatedCursor` (no seq);
  `zstdDictionary` is refused as `UnknownZstdDictionary` (the stand-in has no dictionary);
  `fail_next` makes the next connection end, after some frames, with an error frame
  (`ConsumerTooSlow`, `InternalError`, the reference's messages) and a close without a
  goodbye (its `CloseNow`). Pre-upgrade checks run before the upgrade is looked at, as the
  reference's do: the same URL asked plainly gets the same 400 (426 otherwise).
  `outdated_now` and `outdated_every` play an instance that misbehaves (issue 66): each live
  v2 connection is sent, mid-stream, the `#info OutdatedCursor` the reference sends when it
  clamps a time cursor (the same frame, from its encoder), now or every few seconds.

The events kept play the reference's sealed archive (a time cursor is looked up in it; with
none, it starts at the floor, said as clamped, as the reference's does from seq 1). Not
modelled: the `dids` and `collections` filters of v2, compression.

It runs on its own thread and loop, so a test may use it from anywhere.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from . import jetstream_wire as wire

V2_PATH = "/xrpc/network.bsky.jetstream.subscribeEvents"
KINDS = ("commit", "identity", "account", "sync")
TIME_FROM = 10**15  # the reference's line between a seq cursor and a time cursor
DICTIONARY_ID = 20260811  # the reference's current zstd dictionary (its header's ID)
OPTIONS = "subscribe: invalid options"
TOMBSTONES = {  # the v1 names v2 refuses, with the reference's reasons
    "wantedDids": "wantedDids is the legacy /subscribe parameter; use dids",
    "wantedCollections": "wantedCollections is the legacy /subscribe parameter; use collections",
    "requireHello": "requireHello is not supported on this endpoint; it is server-push only "
    "(subscriber-sourced messages were removed)",
}


@dataclass(frozen=True, slots=True)
class Kept:
    """An event the instance keeps: its seq, when it was witnessed, what it is, and its
    frames on each endpoint (None: not sent on v1)."""

    seq: int
    time_us: int
    event: wire.Upstream
    v1: bytes | None
    v2: bytes


@dataclass
class Failure:
    """An error frame to end a connection with, after `after` frames."""

    code: str
    after: int
    sent: int = field(default=0)


class Refused(Exception):
    """A request refused before the upgrade, with the reference's error name and message."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name, self.message = name, message


class JetstreamStandIn:
    def __init__(self, firehose: str, *, first_seq: int = 1, v2: bool = True) -> None:
        self.firehose = firehose.rstrip("/") + "/xrpc/com.atproto.sync.subscribeRepos"
        self.kept: list[Kept] = []
        self.next_seq = self.floor = first_seq
        self.v2 = v2
        self.cursors: list[str | None] = []  # the cursor each v2 upgrade asked from
        self.cursors_v1: list[str | None] = []  # each v1 upgrade's
        self.asked_plainly: list[str | None] = []  # v2 requests without an upgrade
        self.protocols: list[str] = []  # the subprotocol each v2 connection got ("": none)
        self.connected = threading.Event()  # to the PDS
        self._failures: list[Failure] = []
        # live queues: an event, a frame sent as it is (v2's only), or None: stop
        self._clients: set[asyncio.Queue[Kept | bytes | None]] = set()
        self._v2_clients: set[asyncio.Queue[Kept | bytes | None]] = set()
        self._outdating: asyncio.Future[None] | None = None
        self.outdated_sent = 0  # the #info OutdatedCursor frames sent mid-stream
        self._last_us = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None
        self._reader: asyncio.Future[None] | None = None
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        self.url = f"ws://127.0.0.1:{self.port}"
        if not self.connected.wait(30):
            raise RuntimeError(f"the stand-in could not follow {self.firehose}")

    def __enter__(self) -> JetstreamStandIn:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def forget_before(self, seq: int) -> None:
        """The retention floor rises to `seq`: what came before is no longer kept."""
        asyncio.run_coroutine_threadsafe(self._forget(seq), self._loop).result(10)

    def fail_next(self, code: str, after: int = 0) -> None:
        """The next v2 connection sends `after` frames, then the error frame `code` (as the
        reference's subscriber loop does: ConsumerTooSlow, InternalError) and closes."""
        self._loop.call_soon_threadsafe(self._failures.append, Failure(code, after))

    def outdated_now(self) -> None:
        """Each live v2 connection is sent the reference's `#info OutdatedCursor` now."""
        self._loop.call_soon_threadsafe(self._outdated)

    def outdated_every(self, seconds: float | None) -> None:
        """The same, every `seconds` from now on (None: no more)."""
        asyncio.run_coroutine_threadsafe(self._outdate_every(seconds), self._loop).result(10)

    # --- on the stand-in's own loop ---------------------------------------------------

    def _outdated(self) -> None:
        said = f"requested timestamp cursor below retention floor; starting at seq {self.floor}"
        frame = wire.v2_info("OutdatedCursor", said)
        for client in self._v2_clients:
            client.put_nowait(frame)
        self.outdated_sent += 1

    async def _outdate_every(self, seconds: float | None) -> None:
        if self._outdating is not None:
            self._outdating.cancel()
            self._outdating = None
        if seconds is not None:
            self._outdating = asyncio.ensure_future(self._outdating_every(seconds))

    async def _outdating_every(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            self._outdated()

    async def _start(self) -> int:
        app = web.Application()
        app.router.add_get("/subscribe", self._subscribe)
        if self.v2:
            app.router.add_get(V2_PATH, self._subscribe_v2)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._reader = asyncio.ensure_future(self._follow())
        return int(self._runner.addresses[0][1])

    async def _stop(self) -> None:
        await self._outdate_every(None)
        if self._reader is not None:
            self._reader.cancel()
        for client in self._clients:
            client.put_nowait(None)
        await asyncio.sleep(0.05)  # the subscribers' handlers end, then the server
        if self._runner is not None:
            await self._runner.cleanup()

    async def _follow(self) -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(self.firehose, max_msg_size=0) as ws,
        ):
            self.connected.set()
            async for message in ws:
                if message.type is aiohttp.WSMsgType.BINARY:
                    self._publish(message.data)

    def _publish(self, frame: bytes) -> None:
        made = wire.events(frame)
        if not made:
            return
        # one witnessed time for a frame's events: the reference stamps each batch it reads
        # with one (here a batch is a frame), so v1 messages may share a time_us
        self._last_us = max(self._last_us + 1, int(time.time() * 1_000_000))
        for event in made:
            seq, self.next_seq = self.next_seq, self.next_seq + 1
            kept = Kept(
                seq,
                self._last_us,
                event,
                event.v1(self._last_us, seq),
                event.v2(seq, self._last_us),
            )
            self.kept.append(kept)
            for client in self._clients:
                client.put_nowait(kept)

    async def _forget(self, seq: int) -> None:
        self.kept = [kept for kept in self.kept if kept.seq >= seq]
        self.floor = max(self.floor, seq)

    def _start_at(self, raw: str | None, *, v2: bool) -> tuple[int, bool]:
        """Where a cursor starts (`ResolveCursor`), and whether a time was clamped to the
        oldest event kept. Raises `Refused`."""
        if not raw:
            return self.next_seq, False
        if not re.fullmatch(r"[+-]?[0-9]+", raw) or not -(2**63) <= int(raw) < 2**63:
            raise Refused("InvalidRequest", f"subscribe: invalid cursor: {json.dumps(raw)}")
        asked = int(raw)
        if asked < 0:
            raise Refused("InvalidRequest", f"subscribe: invalid cursor: negative value {asked}")
        if asked < TIME_FROM:
            if asked >= self.next_seq:
                return self.next_seq, False  # the live tip, without a word
            if max(asked, 1) >= self.floor:
                return max(asked, 1), False
            if not v2:
                return self.floor, False
            floor = f"cursor {asked} below lookback floor {self.floor}"
            too_old = f"subscribe: cursor too old: {floor}; re-backfill from your last seq"
            raise Refused("CursorTooOld", too_old)
        kept = list(self.kept)  # the archive the time is looked up in
        if asked > time.time() * 1_000_000:
            return self.next_seq, False
        start, clamped = 0, False  # an empty archive: from its floor, said as clamped
        if kept and asked > kept[-1].time_us:
            start = self.next_seq
        elif kept and asked <= kept[0].time_us:
            start, clamped = kept[0].seq, True
        elif kept:
            start = next(k.seq for k in kept if k.time_us >= asked)
        if start < max(self.floor, 1):
            start, clamped = max(self.floor, 1), True
        return start, clamped

    async def _subscribe(self, request: web.Request) -> web.StreamResponse:
        try:
            start, _ = self._start_at(request.query.get("cursor"), v2=False)
        except Refused as refused:  # v1 answers in plain text
            return web.Response(status=400, text=refused.message + "\n")
        wanted = request.query.getall("wantedCollections", [])
        self.cursors_v1.append(request.query.get("cursor"))

        def frame(kept: Kept) -> bytes | None:
            collection = kept.event.carried.get("collection", "")
            if kept.event.kind == "commit" and wanted and not _matches(collection, wanted):
                return None
            return kept.v1

        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await self._serve(ws, request, start, frame, None, v2=False)
        return ws

    async def _subscribe_v2(self, request: web.Request) -> web.StreamResponse:
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        (self.cursors if upgrade else self.asked_plainly).append(request.query.get("cursor"))
        try:
            kinds = _checked(request)
            start, clamped = self._start_at(request.query.get("cursor"), v2=True)
        except Refused as refused:
            body = wire.http_error(refused.name, refused.message)
            return web.Response(status=400, body=body, content_type="application/json")
        if not upgrade:
            return web.Response(status=426, text="WebSocket protocol violation\n")
        ws = web.WebSocketResponse(protocols=(wire.SUBPROTOCOL,))
        await ws.prepare(request)
        self.protocols.append(ws.ws_protocol or "")
        if clamped:
            said = f"requested timestamp cursor below retention floor; starting at seq {start}"
            await ws.send_str(wire.v2_info("OutdatedCursor", said).decode())
        failure = self._failures.pop(0) if self._failures else None
        chosen = set(kinds) or set(KINDS)
        await self._serve(
            ws,
            request,
            start,
            lambda kept: kept.v2 if kept.event.kind in chosen else None,
            failure,
            v2=True,
        )
        return ws

    async def _serve(
        self,
        ws: web.WebSocketResponse,
        request: web.Request,
        start: int,
        frame: Callable[[Kept], bytes | None],
        failure: Failure | None,
        *,
        v2: bool,
    ) -> None:
        """What is kept from `start` on, then what comes live, each as `frame` writes it (a
        live event also in the backlog is not sent twice; on `v2`, an info frame as it is),
        until the stand-in stops or the connection ends (`failure`: with its error frame)."""
        live: asyncio.Queue[Kept | bytes | None] = asyncio.Queue()
        self._clients.add(live)
        if v2:
            self._v2_clients.add(live)
        # the peer's frames are read (its close answered, as the reference's CloseRead does);
        # once it is gone, the live loop ends
        reader = asyncio.ensure_future(_read_until_closed(ws, live))
        try:
            backlog = [kept for kept in self.kept if kept.seq >= start]
            sent = start - 1
            for kept in backlog:
                if not await self._send(ws, request, kept, frame, failure):
                    return
                sent = kept.seq
            while not ws.closed:
                item = await live.get()
                if item is None:
                    await ws.close()
                    return
                if isinstance(item, bytes):
                    await ws.send_str(item.decode())
                    continue
                if item.seq > sent and not await self._send(ws, request, item, frame, failure):
                    return
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            reader.cancel()
            self._clients.discard(live)
            self._v2_clients.discard(live)

    async def _send(
        self,
        ws: web.WebSocketResponse,
        request: web.Request,
        kept: Kept,
        frame: Callable[[Kept], bytes | None],
        failure: Failure | None,
    ) -> bool:
        """One event to a subscriber; False when the connection ended instead."""
        body = frame(kept)
        if body is None:
            return True
        if failure is not None and failure.sent == failure.after:
            if failure.code == "ConsumerTooSlow":
                behind = f"{max(0, self.next_seq - kept.seq)} events behind the tip"
                said = f"reading below the floor rate {behind}; reconnect with cursor={kept.seq}"
            else:
                said = "stream read failed; reconnect"
            await ws.send_str(wire.v2_error(failure.code, said).decode())
            if request.transport is not None:
                request.transport.close()  # CloseNow: no close frame
            return False
        await ws.send_str(body.decode())
        if failure is not None:
            failure.sent += 1
        return True


async def _read_until_closed(
    ws: web.WebSocketResponse, live: asyncio.Queue[Kept | bytes | None]
) -> None:
    async for _ in ws:
        pass
    live.put_nowait(None)


def _checked(request: web.Request) -> list[str]:
    """A v2 request's kinds, after the checks the reference makes before its upgrade, in its
    order (compression, then the filter). Raises `Refused`."""
    query = request.query
    zstd = "zstd" in request.headers.get("Socket-Encoding", "")
    if query.get("compress") == "true" or zstd:
        raise Refused(
            "InvalidRequest",
            "compress=true / Socket-Encoding: zstd is the /subscribe (v1) opt-in; this endpoint "
            "uses zstdDictionary=<id> with the dictionary from getZstdDictionary",
        )
    if query.get("zstdDictionary"):
        asked = query["zstdDictionary"]
        if not asked.isdigit() or int(asked) == 0 or int(asked) >= 2**32:
            raise Refused(
                "InvalidRequest", "zstdDictionary must be a positive integer zstd dictionary ID"
            )
        raise Refused(
            "UnknownZstdDictionary",
            f"unknown zstd dictionary id {int(asked)}; current dictionary id is {DICTIONARY_ID} "
            "(fetch it via getZstdDictionary and reconnect)",
        )
    for name, why in TOMBSTONES.items():
        if name in query:
            raise Refused("InvalidRequest", f"{OPTIONS}: {why}")
    kinds = query.getall("kinds", [])
    if len(kinds) > 4:
        raise Refused("InvalidRequest", f"{OPTIONS}: too many kinds values: {len(kinds)} > 4")
    for kind in kinds:
        if kind not in KINDS:
            valid = "(valid: commit, identity, account, sync)"
            raise Refused("InvalidRequest", f"{OPTIONS}: unknown kind {json.dumps(kind)} {valid}")
    return kinds


def _matches(collection: str, wanted: list[str]) -> bool:
    """v1's `wantedCollections`: a name, or a prefix ending in `.*`."""
    return any(
        collection == name or (name.endswith(".*") and collection.startswith(name[:-1]))
        for name in wanted
    )
