"""A stand-in for an upstream whose `/export/stream` stalls: on its own thread, it forwards
every HTTP request to a real directory or mirror (its `/export` keeps growing), and re-sends
the real stream's messages to each consumer while `flowing`; once a test turns that off, it
sends nothing more, and its WebSockets stay open and answer pings (P-API-3's stream, re-sent
from a real one, then silent)."""

from __future__ import annotations

import asyncio
import threading

import aiohttp
from aiohttp import web


class StallingStream:
    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.flowing = True
        self.withheld = 0  # messages the real stream sent that no consumer got
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(20)
        self.url = f"http://127.0.0.1:{self.port}"

    async def _start(self) -> int:
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_get("/export/stream", self._stream)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    async def _forward(self, request: web.Request) -> web.Response:
        async with self._session.request(
            request.method, self.target + request.path_qs, data=await request.read()
        ) as answer:
            body = await answer.read()
            headers = {k: v for k, v in answer.headers.items() if k.lower().startswith("atwhois")}
            kind = answer.headers.get("Content-Type", "application/octet-stream")
            return web.Response(
                status=answer.status, body=body, headers={**headers, "Content-Type": kind}
            )

    async def _stream(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        url = self.target.replace("http", "ws", 1) + "/export/stream?" + request.query_string
        reading = asyncio.ensure_future(_read_all(ws))  # pings are answered as they are read
        try:
            async with self._session.ws_connect(url) as upstream:
                async for message in upstream:
                    if message.type is not aiohttp.WSMsgType.TEXT or reading.done():
                        break
                    if not self.flowing:
                        self.withheld += 1
                        continue
                    await ws.send_str(message.data)
        finally:
            reading.cancel()
        await ws.close()
        return ws

    def stop(self) -> None:
        async def shutdown() -> None:
            await self._session.close()  # the streams re-sent end with their upstreams
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(20)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


async def _read_all(ws: web.WebSocketResponse) -> None:
    async for _ in ws:
        pass
