"""A fleet's cold start (issue 69): `--daemons` daemons restarted on one warm shared store
(SQLite) that holds `--identities` identities, each told at once that it may have missed
events (a relay stand-in answers every connection with `#info OutdatedCursor`: a gap), so
each owes a pass re-verifying everything held. Measured at the PLC directory (a counting
proxy in front of the network world's, `bench.network_world`): the requests per held
identity that the restart cost (target 1: each re-verified once in the fleet, not once per
daemon), and the busiest second against the directory's rate (`--plc-rate`, which the
fleet splits: `--fleet-daemons`). Before the restart one daemon fills the store through its
own lookups; after it, the first answer of each daemon is read from the store at once.

    python -m bench coldstart [--identities 100000] [--daemons 3] [--plc-rate 100]
                              [--reverify-share 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from aiohttp import ClientSession, web

from bench import Row
from bench.network_world import running_network_world
from bench.serve_load import XRPC, answer_all, free_port
from devnet import relay_frames
from devnet.atwhois import Daemon, running_daemon

RELAY_PATH = "/xrpc/com.atproto.sync.subscribeRepos"


class Served(threading.Thread):
    """An aiohttp app on a port of loopback, on a loop of its own thread."""

    def __init__(self, app: web.Application) -> None:
        super().__init__(daemon=True)
        self.app, self.port = app, free_port()
        self.runner = web.AppRunner(app)
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        runner = self.runner
        self.loop.run_until_complete(runner.setup())
        self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self.ready.set()
        self.loop.run_forever()

    def __enter__(self) -> Served:
        self.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)


def counting_directory(upstream: str) -> tuple[web.Application, list[tuple[float, str]]]:
    """A proxy of the PLC directory at `upstream` that notes each request it passes on:
    (`time.monotonic`, path)."""
    asked: list[tuple[float, str]] = []
    sessions: list[ClientSession] = []

    async def forward(request: web.Request) -> web.Response:
        asked.append((time.monotonic(), request.path))
        if not sessions:
            sessions.append(ClientSession())
        async with sessions[0].get(upstream + request.path_qs) as answer:
            body = await answer.read()
            kind = answer.headers.get("Content-Type", "application/json")
            return web.Response(status=answer.status, body=body, headers={"Content-Type": kind})

    async def close(_: web.Application) -> None:
        for session in sessions:
            await session.close()

    app = web.Application()
    app.router.add_get("/{tail:.*}", forward)
    app.on_cleanup.append(close)
    return app, asked


def outdated_relay() -> web.Application:
    """A relay that answers every connection with `#info OutdatedCursor` (what came after
    the follower's cursor is gone: a gap), then stays quiet."""

    async def subscribe(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_bytes(relay_frames.info())
        async for _ in ws:
            pass
        return ws

    app = web.Application()
    app.router.add_get(RELAY_PATH, subscribe)
    return app


def passes_done(daemon: Daemon) -> bool:
    """Whether the daemon's pass after its gap has run to its end."""
    state = httpx.get(daemon.url + "/_health", timeout=5).json().get("gap_pass") or {}
    return bool(state.get("passes")) and not state.get("running")


def gap_pass(daemon: Daemon) -> dict[str, int]:
    state = httpx.get(daemon.url + "/_health", timeout=5).json().get("gap_pass") or {}
    return {k: int(state.get(k) or 0) for k in ("done", "left_to_others", "to_do")}


@contextlib.contextmanager
def fleet(
    env: dict[str, str], tmp: Path, count: int, cache: str, relay: str, *settings: str
) -> Iterator[list[Daemon]]:
    """`count` daemons on `cache`, following `relay`, started side by side."""
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(
                running_daemon(
                    env, tmp / f"daemon-{i}.log", "--cache", cache, "--firehose", relay, *settings
                )
            )
            for i in range(count)
        ]


def busiest_second(times: list[float]) -> int:
    """The most requests in any one second (a window starting at each request)."""
    most, start = 0, 0
    for end, at in enumerate(times):
        while at - times[start] >= 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench coldstart", description=__doc__)
    parser.add_argument("--identities", type=int, default=100_000)
    parser.add_argument("--daemons", type=int, default=3)
    parser.add_argument("--plc-rate", type=float, default=100)
    parser.add_argument("--reverify-share", type=float, default=1.0)
    parser.add_argument("--delay-ms", type=float, default=5, help="the world's edge latency")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-coldstart-bench-") as name,
        running_network_world(
            Path(name) / "world", args.identities, delay_ms=args.delay_ms, spread_ms=0
        ) as world,
    ):
        tmp = Path(name)
        proxy, asked = counting_directory(world.plc_url)
        directory = Served(proxy).__enter__()
        env = {
            **world.env(),
            "ATWHOIS_PLC_URL": directory.url,
            "ATWHOIS_ALLOW_NET": "127.0.0.0/8",
            "ATWHOIS_HOST_RATE": "100000",  # the handles' hosts: not what is measured
        }
        cache = f"sqlite://{tmp}/c.db"
        handles = sorted(world.dids)
        listing = tmp / "paths.txt"
        listing.write_text("".join(f"{XRPC}resolveHandle?handle={h}\n" for h in handles))
        started = time.perf_counter()
        with running_daemon(env, tmp / "fill.log", "--cache", cache) as daemon:
            answer_all(daemon.url, listing, 100)
        print(f"{len(handles):,} identities held in {time.perf_counter() - started:.0f} s")
        before = len(asked)
        settings = [
            "--fleet-daemons",
            str(args.daemons),
            "--plc-rate",
            str(args.plc_rate),
            "--reverify-share",
            str(args.reverify_share),
        ]
        with Served(outdated_relay()) as relay:
            ws = relay.url.replace("http", "ws")
            with fleet(env, tmp, args.daemons, cache, ws, *settings) as daemons:
                restarted = time.monotonic()
                first = httpx.get(
                    f"{daemons[0].url}{XRPC}resolveHandle?handle={handles[0]}", timeout=10
                )
                while not all(map(passes_done, daemons)):
                    time.sleep(0.5)
                took = time.monotonic() - restarted
                shares = [gap_pass(d) for d in daemons]
        directory.__exit__()
        times = [at for at, _ in asked[before:]]
    per_identity = len(times) / len(handles)
    busiest = busiest_second(times)
    print(
        f"restart of {args.daemons} daemons (fleet_daemons {args.daemons}, plc_rate "
        f"{args.plc_rate:g}/s, reverify_share {args.reverify_share:g}) on {len(handles):,} held "
        f"identities: the first answer {first.status_code} at once; the passes took {took:.0f} "
        f"s, {len(times):,} requests to the directory ({per_identity:.3f} per identity), "
        f"busiest second {busiest}; each daemon's share: "
        + ", ".join(f"{s['done']:,} re-verified, {s['left_to_others']:,} left" for s in shares)
    )
    return [
        Row("coldstart: directory requests per held identity", per_identity, 1, "target", "", True),
        Row(
            "coldstart: busiest second at the directory",
            busiest,
            args.plc_rate,
            "plc_rate",
            "",
            True,
        ),
    ]
