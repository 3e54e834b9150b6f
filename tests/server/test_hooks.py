"""The daemon's hooks into aiohttp's and asyncio's insides (`server/hooks.py`) still find
what they reach for: a release that moves one fails here, not in production (issue 56)."""

from __future__ import annotations

import asyncio
import tomllib
from asyncio import sslproto

from aiohttp import web

from atwhois.server import hooks
from tests.house.test_layers import PRODUCT, ROOT, modules


async def test_every_hook_finds_its_target() -> None:
    assert hooks.missing() == []


async def test_the_hooks_do_what_they_say() -> None:
    """Each hook does what it names on this release (not only finds an attribute)."""

    async def routed(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response()

    async def first(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response()

    server = web.Server(routed)
    given = []
    hooks.answer_first(server, lambda handler: given.append(handler) or first)  # type: ignore[func-returns-value]
    assert given == [routed] and server.request_handler is first
    handler = web.RequestHandler(server, loop=asyncio.get_running_loop())
    assert not hooks.waiting_for_request(handler)  # no connection yet: no request awaited
    saved = sslproto.SSLProtocol.max_size
    try:
        hooks.small_tls_buffers(16 * 1024)
        assert sslproto.SSLProtocol.max_size == 16 * 1024
    finally:
        sslproto.SSLProtocol.max_size = saved


def test_only_the_hooks_module_reaches_inside_aiohttp() -> None:
    """No other product module reads a private name of aiohttp, asyncio or httpx."""
    reaching = {}
    for package in PRODUCT:
        for _, path in modules(package):
            if path.name == "hooks.py":
                continue
            text = path.read_text()
            for private in ("_waiter", "request_handler =", "SSLProtocol.max_size"):
                if private in text:
                    reaching.setdefault(str(path.relative_to(ROOT)), []).append(private)
    assert reaching == {}


def test_aiohttp_is_bounded_to_the_releases_the_hooks_were_read_from() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    aiohttp = next(r for r in project["dependencies"] if r.startswith("aiohttp"))
    assert "<" in aiohttp, aiohttp


def test_coincurve_is_bounded_and_its_private_functions_are_there() -> None:
    """resolver/plc/signature.py calls libsecp256k1 through coincurve's private module: the
    functions it calls are there in this release, and the release is within the bound
    pyproject.toml sets, as aiohttp's for its hooks."""
    from importlib.metadata import version

    from coincurve._libsecp256k1 import ffi, lib
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    bound = Requirement(next(r for r in project["dependencies"] if r.startswith("coincurve")))
    assert "<" in str(bound.specifier) and bound.specifier.contains(version("coincurve"))
    called = (ROOT / "atwhois" / "resolver" / "plc" / "signature.py").read_text()
    for name in ("secp256k1_ecdsa_signature_parse_compact", "secp256k1_ecdsa_verify"):
        assert f"lib.{name}" in called and callable(getattr(lib, name)), name
    assert callable(ffi.new)


def test_redis_is_bounded_and_the_cluster_clients_slot_map_is_there() -> None:
    """The cluster store walks the masters by the cluster client's slot map and has it
    learn new masters at once after a failover (`nodes_manager`, not a documented API):
    both are there in this release, within the bound pyproject.toml sets."""
    from importlib.metadata import version

    from packaging.requirements import Requirement
    from redis.asyncio.cluster import NodesManager

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    bound = Requirement(extras["optional-dependencies"]["redis"][0])
    assert "<" in str(bound.specifier) and bound.specifier.contains(version("redis"))
    assert callable(NodesManager.initialize)
    used = (ROOT / "atwhois" / "cache" / "stores" / "redis_cluster.py").read_text()
    assert "nodes_manager.slots_cache" in used and "nodes_manager.initialize()" in used
    assert "slots_cache" in NodesManager.__init__.__code__.co_names


async def _exchange(port: int, requests: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(requests)
    await writer.drain()
    answer = await reader.read()  # until the server closes (the last request asks it to)
    writer.close()
    return answer


def _heads(answer: bytes) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """Each response's status line and headers (a body is two bytes here)."""
    found = []
    while answer:
        head, _, rest = answer.partition(b"\r\n\r\n")
        status, *lines = head.split(b"\r\n")
        headers = dict(line.split(b": ", 1) for line in lines)
        found.append((status, headers))
        answer = rest[int(headers[b"Content-Length"]) :]
    return found


async def test_a_written_answer_is_what_aiohttps_own_response_sends() -> None:
    """`hooks.Written` sends what a `web.Response` with the same headers sends (status line,
    the headers, Date and Server, the body), on a connection kept open; where `sent_whole`
    says no (HTTP/1.0, Connection: close) aiohttp's own response answers."""

    async def answer(request: web.BaseRequest) -> web.StreamResponse:
        headers = {"Content-Type": "application/json", "Content-Length": "2"}
        if request.path == "/written" and hooks.sent_whole(request):
            head = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in headers.items())
            return hooks.Written((head,), b"{}")
        return web.Response(body=b"{}", headers={"Content-Type": "application/json"})

    runner = web.ServerRunner(web.Server(answer))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        ask = b"GET /%s HTTP/1.1\r\nHost: x\r\n\r\n"
        close = b"GET /written HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        sent = _heads(await _exchange(port, ask % b"written" + ask % b"routed" + close))
        assert [status for status, _ in sent] == [b"HTTP/1.1 200 OK"] * 3
        (_, written), (_, routed), (_, closed) = sent
        assert written == routed  # the same headers, Date and Server included
        assert set(written) == {b"Content-Type", b"Content-Length", b"Date", b"Server"}
        assert closed[b"Connection"] == b"close"  # aiohttp's own: not sent whole
        old = await _exchange(port, b"GET /written HTTP/1.0\r\n\r\n")
        assert old.startswith(b"HTTP/1.0 200 OK\r\n") and old.endswith(b"\r\n\r\n{}")
    finally:
        await runner.cleanup()
