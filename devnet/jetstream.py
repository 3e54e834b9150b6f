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

It runs on its own thread and loop, so a test may use it from anywhere.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import aiohttp
import libipld
from aiohttp import web


class JetstreamStandIn:
    def __init__(self, firehose: str) -> None:
        self.firehose = firehose.rstrip("/") + "/xrpc/com.atproto.sync.subscribeRepos"
        self.kept: list[tuple[int, str, dict[str, Any]]] = []  # time_us, kind, message
        self.connected = threading.Event()  # to the PDS
        # each subscriber's queue of live messages (None: the stand-in stops)
        self._clients: set[asyncio.Queue[tuple[int, str, dict[str, Any]] | None]] = set()
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
        for client in self._clients:
            client.put_nowait(entry)

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
            while not ws.closed:
                entry = await live.get()
                if entry is None:
                    await ws.close()
                    break
                if entry[0] > sent:
                    await self._send(ws, entry, wanted)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._clients.discard(live)
        return ws

    @staticmethod
    async def _send(
        ws: web.WebSocketResponse, entry: tuple[int, str, dict[str, Any]], wanted: set[str]
    ) -> None:
        _, kind, message = entry
        if kind == "commit" and wanted and message["commit"]["collection"] not in wanted:
            return
        await ws.send_str(json.dumps(message))


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
