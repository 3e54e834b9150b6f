"""How a daemon lives (`atwhois serve`, `atwhois plc mirror`): it listens, says so in one
JSON line with what it serves, runs until SIGTERM or SIGINT, then stops listening, lets the
requests in flight finish and runs the app's clean-up (which closes its stores)."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from collections.abc import Callable
from typing import Any

from aiohttp import web


async def serve_until_stopped(
    runner: web.AppRunner,
    host: str,
    port: int,
    *,
    log: logging.Logger,
    listening: Callable[[], dict[str, Any]],
    started: Callable[[], None] | None = None,
    reuse_port: bool = False,
) -> None:
    """`runner` (set up) on `host:port`; `started` runs once it listens, before the line
    that says so, whose fields `listening` gives beside the URL."""
    site = web.TCPSite(runner, host, port, reuse_port=reuse_port or None)
    await site.start()
    if started is not None:
        started()
    bound = runner.addresses[0]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    line = {"event": "listening", "url": f"http://{bound[0]}:{bound[1]}", **listening()}
    log.info(json.dumps(line))
    await stop.wait()
    log.info(json.dumps({"event": "stopping"}))
    await runner.cleanup()  # stops listening, lets in-flight requests finish, closes stores
