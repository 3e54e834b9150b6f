"""The daemon following a relay at the network's rate while it serves a large cache: a
relay stand-in (`bench.relay_standin`) sends `--rate` events/s with bursts of
`--burst-rate` for `--burst-seconds` every `--burst-every` seconds, for `--seconds`, while
an open loop asks the daemon `resolveHandle` at `--serve-rate` requests/s over all of its
`--identities` cached identities (filled as `bench serve --fill` fills them). The same load
without the stream, on the same cache, in the same run, is the baseline: the stand-in then
sends the same events to a consumer that drops them, so that both runs share these two
cores with it (a relay is another machine; its cost here is not the follower's).

Measured: each event's lag (from when the stand-in sent it until the daemon's cursor, read
from `/_health` every 50 ms, passed it: the oldest event not yet passed, at each reading),
p50 and p99; how long each burst took to absorb (from its end until the lag is under 1 s
again); the daemon's CPU share with and without the stream; its RSS over time; and the
serve p99 with the stream against without it.

    python -m bench follow [--identities 1000000] [--seconds 600] [--rate 2000]
                           [--burst-rate 20000] [--burst-seconds 5] [--burst-every 120]
                           [--serve-rate 1000] [--memory-cache-mb MIB] [--answer-all]
"""

from __future__ import annotations

import argparse
import array
import asyncio
import bisect
import contextlib
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench import Row
from bench.memory_load import rss_mib
from bench.relay_standin import PATH
from bench.serve_load import (
    XRPC,
    answer_all,
    fill_cache,
    free_port,
    open_loop,
    wait_for,
    warm,
)
from devnet import world
from devnet.atwhois import running_daemon
from devnet.network import running_devnet

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Watch(threading.Thread):
    """Reads the daemon's stream cursor every 50 ms and its RSS every 5 s."""

    def __init__(self, url: str, pid: int) -> None:
        super().__init__(daemon=True)
        self.url, self.pid = url, pid
        self.cursors: list[tuple[float, int]] = []
        self.rss: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        last_rss = 0.0
        with httpx.Client(timeout=5) as http:
            while not self.stop.is_set():
                now = time.monotonic()
                streams = http.get(self.url + "/_health").json().get("streams") or []
                cursor = streams[0].get("cursor") if streams else None
                self.cursors.append((now, int(cursor or 0)))
                if now - last_rss >= 5:
                    self.rss.append((now, rss_mib(self.pid)))
                    last_rss = now
                time.sleep(0.05)


def lags(cursors: list[tuple[float, int]], sent: array.array[float]) -> list[tuple[float, float]]:
    """At each reading: how long the oldest event not yet passed has waited (0: none)."""
    found = []
    for at, cursor in cursors:
        waiting = cursor  # index of seq cursor + 1
        lag = at - sent[waiting] if waiting < len(sent) and sent[waiting] < at else 0.0
        found.append((at, max(lag, 0.0)))
    return found


def absorbed(
    lagged: list[tuple[float, float]], start: float, args: argparse.Namespace
) -> list[float]:
    """Seconds from each burst's end until the lag was under 1 s again."""
    times = [at for at, _ in lagged]
    result = []
    ends = [
        start + k * args.burst_every for k in range(1, int(args.seconds // args.burst_every) + 1)
    ]
    for end in ends:
        i = bisect.bisect_left(times, end)
        while i < len(lagged) and lagged[i][1] >= 1.0:
            i += 1
        if i < len(lagged):
            result.append(lagged[i][0] - end)
    return result


@dataclass
class Served:
    p50: float  # ms, open loop
    p99: float
    cpu: float  # the daemon's share of a core
    cursors: list[tuple[float, int]]
    rss: list[tuple[float, float]]


# The baseline's consumer of the stand-in's events: reads each frame and drops it.
DRAIN = textwrap.dedent("""
    import asyncio, sys, aiohttp
    async def main():
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(sys.argv[1], max_msg_size=0) as ws:
                async for _ in ws:
                    pass
    asyncio.run(main())
""")


@contextlib.contextmanager
def relay_standin(
    tmp: Path, args: argparse.Namespace, tag: str
) -> Iterator[tuple[str, Path, Path]]:
    """The stand-in's URL while it runs, the file of its send times once it stopped, and
    the file whose making starts its schedule."""
    port, sent_file, go = free_port(), tmp / f"sent-{tag}.bin", tmp / f"go-{tag}"
    schedule = (args.seconds, args.rate, args.burst_rate, args.burst_seconds, args.burst_every)
    relay = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.relay_standin",
            str(port),
            *map(str, schedule),
            str(sent_file),
            str(go),
        ]
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/")
        yield f"ws://127.0.0.1:{port}", sent_file, go
    finally:
        relay.terminate()
        relay.wait(timeout=30)


def serve_run(
    env: dict[str, str],
    log: Path,
    cache: str,
    listing: Path,
    args: argparse.Namespace,
    relay: tuple[str, Path, Path],
    *,
    follow: bool,
) -> Served:
    """The open loop against the daemon while `relay` sends; the daemon follows it, or (not
    `follow`) a consumer that drops every event does."""
    url, _, go = relay
    extra = ["--firehose", url] if follow else []
    if args.memory_cache_mb is not None:
        extra += ["--memory-cache-mb", str(args.memory_cache_mb)]
    with (
        running_daemon(env, log, "--cache", cache, *extra) as daemon,
        contextlib.ExitStack() as stack,
    ):
        pid = daemon.process.pid
        asyncio.run(warm(daemon.url, args.identities, 200))
        if args.answer_all:  # the open loop's keys answered once: it asks for hits
            answer_all(daemon.url, listing, 100)
        if not follow:
            drain = subprocess.Popen([sys.executable, "-c", DRAIN, url + PATH])
            stack.callback(drain.wait)
            stack.callback(drain.terminate)
        go.touch()  # the stand-in's schedule starts with the timed run
        watch = Watch(daemon.url, pid)
        cpu, started = cpu_seconds(pid), time.monotonic()
        watch.start()
        fixed = open_loop(daemon.url, listing, args.serve_rate, args.seconds)
        wall = time.monotonic() - started
        watch.stop.set()
        watch.join()
        cpu = (cpu_seconds(pid) - cpu) / wall
        return Served(fixed["p50_ms"], fixed["p99_ms"], cpu, watch.cursors, watch.rss)


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench follow", description=__doc__)
    parser.add_argument("--identities", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--burst-rate", type=float, default=20000)
    parser.add_argument("--burst-seconds", type=float, default=5)
    parser.add_argument("--burst-every", type=float, default=120)
    parser.add_argument("--serve-rate", type=int, default=1000)
    parser.add_argument(
        "--memory-cache-mb", type=float, default=None, help="atwhois serve --memory-cache-mb"
    )
    parser.add_argument(
        "--answer-all",
        action="store_true",
        help="have the daemon answer every key of the open loop once first (else most of its "
        "answers are composed from the SQLite entries)",
    )
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-follow-bench-") as name,
        running_devnet(Path(name), bulk=1) as devnet,
    ):
        tmp = Path(name)
        cache = f"sqlite://{tmp}/c.db"
        env = {**devnet.env(), "ATWHOIS_ALLOW_NET": "127.0.0.0/8"}
        started = time.perf_counter()
        with running_daemon(env, tmp / "fill.log", "--cache", cache) as daemon:
            asyncio.run(warm(daemon.url, 1))
        fill_cache(tmp / "c.db", args.identities)
        print(f"{args.identities:,} identities filled in {time.perf_counter() - started:.0f} s")
        listing = tmp / "paths.txt"
        listing.write_text(
            "".join(
                f"{XRPC}resolveHandle?handle={world.bulk_host(i)}\n"
                for i in range(0, args.identities, max(1, args.identities // 200_000))
            )
        )
        with relay_standin(tmp, args, "quiet") as relay:
            quiet = serve_run(env, tmp / "quiet.log", cache, listing, args, relay, follow=False)
        with relay_standin(tmp, args, "busy") as relay:
            busy = serve_run(env, tmp / "busy.log", cache, listing, args, relay, follow=True)
        sent_file = relay[1]
        sent: array.array[float] = array.array("d")
        sent.frombytes(sent_file.read_bytes())
    lagged = lags(busy.cursors, sent)
    values = sorted(lag for _, lag in lagged)
    p50, p99 = values[len(values) // 2], values[int(len(values) * 0.99)]
    bursts = absorbed(lagged, min(sent) if sent else 0.0, args)
    last = busy.cursors[-1][1] if busy.cursors else 0
    rss = [mib for _, mib in busy.rss] or [0.0]
    print(
        f"relay stand-in: {len(sent):,} events in {args.seconds} s ({args.rate:,.0f}/s, bursts of "
        f"{args.burst_rate:,.0f}/s for {args.burst_seconds:g} s every {args.burst_every:g} s); "
        f"the daemon passed {last:,}"
    )
    print(f"  event lag p50 {p50:.3f} s  p99 {p99:.3f} s  max {values[-1]:.3f} s")
    print(f"  bursts absorbed in {', '.join(f'{b:.1f} s' for b in bursts) or '-'}")
    print(
        f"  daemon CPU {busy.cpu:.0%} of a core with the stream, {quiet.cpu:.0%} without "
        f"(the follower: {busy.cpu - quiet.cpu:.0%})"
    )
    every = ", ".join(f"{r:.0f}" for r in rss)
    print(f"  RSS over the run: {min(rss):.0f} to {max(rss):.0f} MiB (every 5 s: {every})")
    print(
        f"  serve at {args.serve_rate:,} req/s over {args.identities:,} identities: p99 "
        f"{busy.p99:.2f} ms following the stream, {quiet.p99:.2f} ms while a consumer that "
        "drops it follows it"
    )
    longest = max(bursts, default=float("nan"))
    return [
        Row("follow: event lag p99", p99, 1.0, "target", "s", True),
        Row("follow: longest burst absorbed", longest, 30, "target", "s", True),
        Row("follow: serve p99 with the stream", busy.p99, quiet.p99, "without", "ms", True),
    ]
