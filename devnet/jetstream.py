"""A Jetstream stand-in: no Jetstream server is on the registries, so this one re-encodes a
real event stream (the test network's PDS's `subscribeRepos`) as Jetstream's JSON, as
Jetstream does a relay's. The events come from the real PDS; only the encoding is ours.

Each frame the PDS sends becomes one message, `{"did", "time_us", "kind", …}`: `identity`
and `account` with the firehose body's fields, `commit` with its repository operations
(their action and path). `time_us` is when the stand-in received it, in microseconds,
strictly increasing. `GET /subscribe?cursor=T` replays the kept messages from `T` on
(inclusive, as Jetstream does), then goes on live; without a cursor, live only.
`wantedCollections` filters commits by collection; identity and account messages are sent
whatever it asks, as Jetstream sends them.

Jetstream v2 (`/xrpc/network.bsky.jetstream.subscribeEvents`, the `xrpc.v1.json`
framing) is served from the same events: each gets the instance's own `seq` (from
`first_seq`: two stand-ins number theirs apart, as two instances do), `kinds` filters them,
and `cursor` is a seq replayed inclusive, or (1e15 and more) a time in microseconds. The
stand-in keeps events from its retention floor on (`forget_before` raises it): a seq cursor
below it is refused before the upgrade (HTTP 400 `CursorTooOld`); a time cursor below it is
clamped to it with `#info OutdatedCursor`; a seq past the next one starts at the live tip
with `#info FutureCursor`. `v2=False` serves v1 alone, as an instance not yet upgraded.

It runs on its own thread and loop, so a test may use it from anywhere.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import libipld
from aiohttp import web

V2_PATH = "/xrpc/network.bsky.jetstream.subscribeEvents"
V2_TYPE = "network.bsky.jetstream.subscribeEvents#"
KINDS = ("commit", "identity", "account", "sync")


class JetstreamStandIn:
    def __init__(self, firehose: str, *, first_seq: int = 1, v2: bool = True) -> None:
        self.firehose = firehose.rstrip("/") + "/xrpc/com.atproto.sync.subscribeRepos"
        self.kept: list[tuple[int, str, dict[str, Any]]] = []  # time_us, kind, message
        self.seqs: list[int] = []  # each kept message's v2 seq, in the same order
        self.next_seq = self.floor = first_seq
        self.v2 = v2
        self.forgotten = False  # events below the floor were dropped
        self.cursors: list[str | None] = []  # the v2 cursors asked for, in order
        self.connected = threading.Event()  # to the PDS
        # each subscriber's queue of live messages (None: the stand-in stops)
        self._clients: set[asyncio.Queue[tuple[int, str, dict[str, Any]] | None]] = set()
        self._clients_v2: set[asyncio.Queue[tuple[int, tuple[int, str, dict[str, Any]]] | None]]
        self._clients_v2 = set()
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

    # --- on the stand-in's own loop ---------------------------------------------------

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
        if self._reader is not None:
            self._reader.cancel()
        for client in self._clients:
            client.put_nowait(None)
        for live in self._clients_v2:
            live.put_nowait(None)
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
        self._last_us = max(self._last_us + 1, int(time.time() * 1_000_000))
        message = jetstream_message(frame, self._last_us)
        if message is None:
            return
        entry = (self._last_us, message["kind"], message)
        self.kept.append(entry)
        self.seqs.append(self.next_seq)
        self.next_seq += 1
        for client in self._clients:
            client.put_nowait(entry)
        for live in self._clients_v2:
            live.put_nowait((self.seqs[-1], entry))

    async def _subscribe(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        wanted = set(request.query.getall("wantedCollections", []))
        cursor = request.query.get("cursor")
        live: asyncio.Queue[tuple[int, str, dict[str, Any]] | None] = asyncio.Queue()
        self._clients.add(live)
        try:
            backlog = [e for e in self.kept if cursor is not None and e[0] >= int(cursor)]
            for entry in backlog:
                await self._send(ws, entry, wanted)
            sent = backlog[-1][0] if backlog else 0
            await _send_live(ws, live, sent, lambda entry: self._send(ws, entry, wanted))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._clients.discard(live)
        return ws

    def forget_before(self, seq: int) -> None:
        """The retention floor rises to `seq`: what came before is no longer kept."""
        asyncio.run_coroutine_threadsafe(self._forget(seq), self._loop).result(10)

    async def _forget(self, seq: int) -> None:
        keep = [i for i, s in enumerate(self.seqs) if s >= seq]
        self.forgotten = self.forgotten or len(keep) < len(self.seqs)
        self.kept = [self.kept[i] for i in keep]
        self.seqs = [self.seqs[i] for i in keep]
        self.floor = max(self.floor, seq)

    async def _subscribe_v2(self, request: web.Request) -> web.StreamResponse:
        kinds = set(request.query.getall("kinds", [])) or set(KINDS)
        if not kinds <= set(KINDS):
            return web.json_response({"error": "InvalidRequest"}, status=400)
        cursor = request.query.get("cursor")
        self.cursors.append(cursor)
        notice, start = None, self.next_seq  # the live tip
        if cursor is not None:
            asked = int(cursor)
            if asked >= 10**15:  # a time: the first event witnessed then or after
                pairs = zip(self.seqs, self.kept, strict=True)
                first = next((s for s, e in pairs if e[0] >= asked), None)
                start = self.next_seq if first is None else first
                if self.forgotten and (not self.kept or asked < self.kept[0][0]):
                    notice = "OutdatedCursor"
            elif asked < self.floor:
                message = f"cursor {asked} is below the retention floor {self.floor}"
                return web.json_response({"error": "CursorTooOld", "message": message}, status=400)
            elif asked > self.next_seq:
                notice = "FutureCursor"
            else:
                start = asked
        ws = web.WebSocketResponse(protocols=("xrpc.v1.json",))
        await ws.prepare(request)
        live: asyncio.Queue[tuple[int, tuple[int, str, dict[str, Any]]] | None] = asyncio.Queue()
        self._clients_v2.add(live)
        try:
            if notice is not None:
                info = {"$type": V2_TYPE + "info", "name": notice, "message": f"from {start}"}
                await ws.send_str(json.dumps({"$type": "event", "payload": info}))
            sent = start - 1
            for seq, entry in zip(list(self.seqs), list(self.kept), strict=True):
                if seq >= start:
                    await self._send_v2(ws, seq, entry, kinds)
                    sent = seq
            await _send_live(ws, live, sent, lambda item: self._send_v2(ws, *item, kinds))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._clients_v2.discard(live)
        return ws

    @staticmethod
    async def _send_v2(
        ws: web.WebSocketResponse, seq: int, entry: tuple[int, str, dict[str, Any]], kinds: set[str]
    ) -> None:
        time_us, kind, message = entry
        if kind not in kinds:
            return
        when = datetime.datetime.fromtimestamp(time_us / 1e6, datetime.UTC).isoformat()
        payload = {"$type": V2_TYPE + kind, "seq": seq, "did": message["did"], "time": when}
        payload[kind] = message[kind]
        await ws.send_str(json.dumps({"$type": "event", "payload": payload}))

    @staticmethod
    async def _send(
        ws: web.WebSocketResponse, entry: tuple[int, str, dict[str, Any]], wanted: set[str]
    ) -> None:
        _, kind, message = entry
        if kind == "commit" and wanted and message["commit"]["collection"] not in wanted:
            return
        await ws.send_str(json.dumps(message))


Live = TypeVar("Live", bound=tuple[Any, ...])


async def _send_live(
    ws: web.WebSocketResponse,
    live: asyncio.Queue[Live | None],
    sent: int,
    send: Callable[[Live], Awaitable[None]],
) -> None:
    """What comes on `live` past `sent` (a consumer's backlog went already: a live item
    also in it is not sent twice), each by `send`, until None closes the socket."""
    while not ws.closed:
        item = await live.get()
        if item is None:
            await ws.close()
            return
        if item[0] > sent:  # each comes once: only the backlog's may come again
            await send(item)


def jetstream_message(frame: bytes, time_us: int) -> dict[str, Any] | None:
    """A subscribeRepos frame as Jetstream writes it (None: a kind it does not send)."""
    header, body = libipld.decode_dag_cbor_multi(frame)
    kind = {"#identity": "identity", "#account": "account", "#commit": "commit"}.get(
        header.get("t", "")
    )
    did = body.get("did") or body.get("repo")
    if kind is None or not isinstance(did, str):
        return None
    message: dict[str, Any] = {"did": did, "time_us": time_us, "kind": kind}
    if kind == "commit":
        ops = body.get("ops") or [{}]
        path = str(ops[0].get("path", "/"))
        message["commit"] = {
            "rev": body.get("rev"),
            "operation": ops[0].get("action"),
            "collection": path.split("/")[0],
            "rkey": path.split("/")[-1],
        }
    else:
        message[kind] = {k: v for k, v in body.items() if isinstance(v, str | int | bool)}
    return message
