"""What a cached answer costs the daemon itself: requests fed to aiohttp's protocol in
process, with no socket, against the bare aiohttp handler fed the same way in the same run.

On these machines a loopback request costs the two servers about as much in the kernel as
in Python, and how much varies from machine to machine (`bench serve` saw the bare handler
at 30-42k requests/s on one kind of machine): this measures the part that is the daemon's
code (routing, the answer cache, request id, log line, metrics, headers), with the request
log on as by default. Answers are kept as a hit leaves them; the keys rotate over
`--identities` (resolveHandle and resolveDid each) or stay on one.

    python -m bench hits [--requests 100000] [--identities 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import itertools
import random
import time
from typing import Any

import uvloop
from aiohttp import web

from atwhois.cache import CachedResolver, MemoryStore
from atwhois.resolver import Resolver
from atwhois.resolver.config import Config
from atwhois.server.service import Service, Settings
from bench import Row
from devnet.identities import verified

XRPC = "/xrpc/com.atproto.identity."
BATCH = 50  # requests per read, as a client keeping 100 connections busy sends them
DOCUMENT = (
    b'{"@context":["https://www.w3.org/ns/did/v1","https://w3id.org/security/multikey/v1"],'
    b'"id":"did:web:%s","alsoKnownAs":["at://%s"],"verificationMethod":[{"id":'
    b'"did:web:%s#atproto","type":"Multikey","controller":"did:web:%s","publicKeyMultibase":'
    b'"zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF"}],"service":[{"id":"#atproto_pds",'
    b'"type":"AtprotoPersonalDataServer","serviceEndpoint":"https://pds.bulk.test"}]}'
)


class Transport(asyncio.Transport):
    """Where the server writes (one write a response, headers and body together): counts
    the responses, and those that are not a 200 answer (a fake: nothing here is timed)."""

    def __init__(self) -> None:
        super().__init__()
        self.responses = 0
        self.wrong: bytes | None = None  # the first response that was not an answer

    def write(self, data: Any) -> None:
        self.responses += 1
        if self.wrong is None and bytes(data[:13]) != b"HTTP/1.1 200 ":
            self.wrong = bytes(data)

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8080)}.get(
            name, default
        )

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None: ...

    def get_write_buffer_size(self) -> int:
        return 0


def _request(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n".encode()


async def per_second(
    app: web.Application, paths: list[str], count: int, service: Service | None = None
) -> float:
    """Requests answered a second, `paths` asked in turn, `BATCH` a read; the daemon's
    app runs as `atwhois serve` runs it (`service.runner`)."""
    if service is not None:
        runner = await service.runner(app, access_log=None)
    else:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
    assert runner.server is not None
    protocol = runner.server()
    transport = Transport()
    protocol.connection_made(transport)
    batches = [
        (b"".join(map(_request, paths[i : i + BATCH])), len(paths[i : i + BATCH]))
        for i in range(0, len(paths), BATCH)
    ]
    try:
        started, done = time.perf_counter(), 0
        for batch, size in itertools.cycle(batches):
            if done >= count:
                break
            protocol.data_received(batch)
            done += size
            while transport.responses < done:
                await asyncio.sleep(0)
        elapsed = time.perf_counter() - started
        if transport.wrong is not None:  # only answers count
            raise RuntimeError(f"not an answer: {transport.wrong[:200]!r}")
        return done / elapsed
    finally:
        protocol.connection_lost(None)
        await runner.cleanup()


def apps(hosts: list[str]) -> tuple[web.Application, Service, list[str]]:
    """The bare handler's app, the daemon's service with an answer kept for each path, the
    paths."""
    bodies: dict[str, bytes] = {}  # path -> the answer, for both servers
    service = Service(CachedResolver(Resolver(Config()), MemoryStore()), Settings())
    service.request_log._stream = io.StringIO()  # written as to stderr, then dropped
    for host in hosts:
        document = DOCUMENT.replace(b"%s", host.encode())
        service.answers.put(verified(f"did:web:{host}", host), document, service.answers.changes)
        bodies[f"{XRPC}resolveHandle?handle={host}"] = b'{"did":"did:web:%s"}' % host.encode()
        bodies[f"{XRPC}resolveDid?did=did:web:{host}"] = b'{"didDoc":' + document + b"}"

    async def answer(request: web.Request) -> web.Response:
        # the one lookup a server that knows every answer needs (no query string parsed)
        return web.Response(body=bodies[request.raw_path], content_type="application/json")

    bare = web.Application()
    bare.router.add_get(XRPC + "resolveHandle", answer)
    bare.router.add_get(XRPC + "resolveDid", answer)
    paths = list(bodies)
    if not all((service.answers.get(path) or (b"",))[0] == bodies[path] for path in paths):
        raise RuntimeError("answers were not kept: the cache would be timed, not the hit")
    random.Random(0).shuffle(paths)
    return bare, service, paths


async def measure(requests: int, identities: int) -> list[Row]:
    hosts = [f"user{i}.bulk.test" for i in range(identities)]
    bare, service, paths = apps(hosts)
    ours = service.app()
    hot = [f"{XRPC}resolveHandle?handle={hosts[0]}"] * BATCH
    figures: dict[str, list[float]] = {}
    for _ in range(3):  # alternated: the machine's drift reaches both alike
        for name, app, asked in (
            ("bare hot", bare, hot),
            ("ours hot", ours, hot),
            ("bare warm", bare, paths),
            ("ours warm", ours, paths),
        ):
            daemon = service if app is ours else None
            figures.setdefault(name, []).append(await per_second(app, asked, requests, daemon))
    best = {name: max(rates) for name, rates in figures.items()}
    print("cached answers fed to aiohttp in process (no socket), request log on, best of 3:")
    for kind, what in (("hot", "one hot key"), ("warm", f"{len(paths):,} warm keys")):
        ours_rate, bare_rate = best[f"ours {kind}"], best[f"bare {kind}"]
        print(
            f"  {what:<24} atwhois {ours_rate:9,.0f} req/s ({1e6 / ours_rate:5.1f} us)   "
            f"bare {bare_rate:9,.0f} req/s ({1e6 / bare_rate:5.1f} us)   "
            f"ratio {ours_rate / bare_rate:.2f}"
        )
    return [
        Row(
            f"hits in process: {what}",
            best[f"ours {kind}"],
            best[f"bare {kind}"],
            "bare aiohttp handler",
            "req/s",
        )
        for kind, what in (("hot", "one hot key"), ("warm", f"{len(paths):,} warm keys"))
    ]


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench hits", description=__doc__)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--identities", type=int, default=10_000)
    args = parser.parse_args(argv)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(measure(args.requests, args.identities))
