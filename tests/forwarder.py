"""A stand-in for the PLC directory: a real HTTP server on loopback that forwards every GET to
the reference one, optionally editing chosen answers (a lying mirror), and that a test can
stop (an upstream outage)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

Edit = Callable[[Any], Any]  # parsed JSON in, parsed JSON out


async def forwarding_server(target: str, edits: dict[str, Edit] | None = None) -> web.AppRunner:
    """Forward to `target`; `edits` maps a request path to a change of its 200 answer.
    The server's address is `runner.addresses[0]`; `await runner.cleanup()` stops it."""
    session = aiohttp.ClientSession()
    edits = edits or {}

    async def forward(request: web.Request) -> web.Response:
        async with session.get(target + request.path) as upstream:
            body = await upstream.read()
            if upstream.status == 200 and request.path in edits:
                body = json.dumps(edits[request.path](json.loads(body))).encode()
            return web.Response(status=upstream.status, body=body, content_type="application/json")

    async def close(_: web.Application) -> None:
        await session.close()

    app = web.Application()
    app.router.add_get("/{tail:.*}", forward)
    app.on_cleanup.append(close)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


def url_of(runner: web.AppRunner) -> str:
    host, port = runner.addresses[0][:2]
    return f"http://{host}:{port}"
