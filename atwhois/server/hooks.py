"""Every place the daemon reaches inside aiohttp or asyncio, in one module: what each hook
needs, why, and `missing()` to say which of them a new release has moved (the daemon logs
it at start-up; `tests/server/test_hooks.py` fails on it). pyproject.toml bounds aiohttp to the
minor releases these were read from."""

from __future__ import annotations

import asyncio
from asyncio import sslproto
from collections.abc import Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


def waiting_for_request(handler: web.RequestHandler) -> bool:
    """Whether a connection waits for a request's head: what aiohttp's own keep-alive timer
    closes, read the way it reads it (its private `_waiter`). At a full bound, these are
    evicted when no connection is stuck."""
    waiter = getattr(handler, "_waiter", None)
    return waiter is not None and not waiter.done()


def answer_first(server: web.Server, first: Callable[[Handler], Handler]) -> None:
    """`server`'s request handler wrapped by `first` (which gets the routed one): kept
    answers are served before the router and the middleware chain (`bench hits`)."""
    server.request_handler = first(server.request_handler)


def small_tls_buffers(size: int) -> None:
    """TLS read buffers of `size` bytes instead of asyncio's 256 KiB, for the whole process
    (asyncio has no per-connection setting): a daemon holding thousands of TLS connections
    would hold that much per connection."""
    if hasattr(sslproto.SSLProtocol, "max_size"):
        sslproto.SSLProtocol.max_size = size


def missing() -> list[str]:
    """The hooks whose target this aiohttp or Python no longer has."""
    try:
        loop, owned = asyncio.get_running_loop(), None
    except RuntimeError:
        loop = owned = asyncio.new_event_loop()
    try:
        gone = []
        server = web.Server(_nothing, loop=loop)
        if not hasattr(web.RequestHandler(server, loop=loop), "_waiter"):
            gone.append("aiohttp RequestHandler._waiter (the connection bound's idle test)")
        if not hasattr(server, "request_handler"):
            gone.append("aiohttp Server.request_handler (kept answers first)")
        if not hasattr(sslproto.SSLProtocol, "max_size"):
            gone.append("asyncio SSLProtocol.max_size (small TLS buffers)")
        return gone
    finally:
        if owned is not None:
            owned.close()


async def _nothing(request: web.BaseRequest) -> web.StreamResponse:
    return web.Response()
