"""Every place the daemon reaches inside aiohttp or asyncio, in one module: what each hook
needs, why, and `missing()` to say which of them a new release has moved (the daemon logs
it at start-up; `tests/server/test_hooks.py` fails on it). pyproject.toml bounds aiohttp to the
minor releases these were read from."""

from __future__ import annotations

import asyncio
from asyncio import sslproto
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE, HttpVersion11

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


# After the caller's headers: what aiohttp adds to every answer (Date is made once a second)
_OK = b"HTTP/1.1 200 OK\r\n"
_DATE = b"Date: "
_END = f"\r\nServer: {SERVER_SOFTWARE}\r\n\r\n".encode()
_DATES: dict[str, bytes] = {}  # the last Date's text, encoded


def sent_whole(request: web.BaseRequest) -> bool:
    """Whether a `Written` answer may answer `request`: HTTP/1.1 on a connection kept open
    (no Connection header to add, as aiohttp would for any other)."""
    return request.version == HttpVersion11 and request.keep_alive


class Written(web.StreamResponse):
    """A 200 answer sent as ready bytes, its status line, headers and body in one write
    through the request's writer (which waits while the client's buffers are full), with
    the Date and Server headers aiohttp adds: none of aiohttp's per-response header work
    (a headers map, its checks, its serialisation), which cost a cached answer more than
    the rest of its handling (`bench hits`). Only where `sent_whole` says so."""

    def __init__(self, head: tuple[bytes, ...], body: bytes) -> None:
        """`head`: the header lines before Date and Server, each ending in CRLF, in parts."""
        # StreamResponse's own set-up makes a headers map this answer never fills
        self._status, self._reason, self._keep_alive = 200, "OK", True
        self._head, self._body_bytes = head, body

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self._eof_sent:
            return None
        self._eof_sent = True
        date = rfc822_formatted_time()
        encoded = _DATES.get(date)
        if encoded is None:
            _DATES.clear()
            encoded = _DATES[date] = date.encode()
        writer = request.writer
        data = b"".join((_OK, *self._head, _DATE, encoded, _END, self._body_bytes))
        await writer.write_eof(data)
        return writer

    async def write_eof(self, data: bytes = b"") -> None:
        return  # all of it was written by `prepare`


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
        if not all(hasattr(web.StreamResponse, name) for name in ("_eof_sent", "_keep_alive")):
            gone.append("aiohttp StreamResponse._eof_sent, _keep_alive (answers written whole)")
        if not hasattr(sslproto.SSLProtocol, "max_size"):
            gone.append("asyncio SSLProtocol.max_size (small TLS buffers)")
        return gone
    finally:
        if owned is not None:
            owned.close()


async def _nothing(request: web.BaseRequest) -> web.StreamResponse:
    return web.Response()
