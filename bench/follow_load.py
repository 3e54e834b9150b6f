"""The daemon following a relay at the network's rate while it serves a large cache: a
relay stand-in (`bench.relay_standin`) sends `--rate` events/s with bursts of
`--burst-rate` for `--burst-seconds` every `--burst-every` seconds, for `--seconds`, while
an open loop asks the daemon `resolveHandle` at `--serve-rate` requests/s over all of its
`--identities` cached identities (filled as `bench serve --fill` fills them).

The baseline is the same daemon in the same run: the stand-in sends its events to the
daemon's follower and to a consumer that drops them in turn, `--window` seconds each, so
every window without the stream sits between two with it, on the same warm cache and the
same two shared cores (a relay is another machine; its cost here is the same in both). A
run compared with another run measured mostly the machine's drift (p99s of the same
configuration 4.7 to 29.6 ms a minute apart). The first second of each window is left out
(events sent before the switch may still be on their way).

Measured: each event's lag (from when the stand-in sent it until the daemon's cursor, read
from `/_health` every 50 ms, passed it: the oldest event not yet passed, at each reading of
a window with the stream), p50 and p99; how long each burst took to absorb (from its end
until the lag is under 1 s again); CPU of the serving process with and without the stream
and of its stream process; RSS of both over time; the serve p99 with the stream against
without it, pooled and window pair by window pair.

    python -m bench follow [--identities 1000000] [--seconds 600] [--window 10]
                           [--rate 2000] [--burst-rate 20000] [--burst-seconds 5]
                           [--burst-every 120] [--serve-rate 1000] [--held-share 0.5]
                           [--memory-cache-mb MIB] [--answer-all]
"""

from __future__ import annotations

import argparse
import array
import asyncio
import bisect
import contextlib
import itertools
import os
import statistics
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
from bench.relay_standin import DRAIN_PATH, following
from bench.serve_load import (
    XRPC,
    answer_all,
    fill_cache,
    free_port,
    open_loop,
    require_wrk,
    wait_for,
    warm,
)
from devnet import world
from devnet.atwhois import running_daemon
from devnet.network import running_devnet
from devnet.process import children

TICK = os.sysconf("SC_CLK_TCK")
SETTLE = 1.0  # seconds at the start of each window left out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


@dataclass
class Reading:
    at: float  # time.monotonic
    cursor: int
    cpu: float  # the serving process's CPU seconds so far
    stream_cpu: float  # its stream process's


class Watch(threading.Thread):
    """Reads the daemon's stream cursor and CPU every 50 ms, and its RSS every 5 s."""

    def __init__(self, url: str, pid: int) -> None:
        super().__init__(daemon=True)
        self.url, self.pid = url, pid
        self.readings: list[Reading] = []
        self.rss: list[float] = []  # MiB, the daemon's and its stream process's
        self.stop = threading.Event()

    def run(self) -> None:
        last_rss = 0.0
        with httpx.Client(timeout=5) as http:
            while not self.stop.is_set():
                now = time.monotonic()
                streams = http.get(self.url + "/_health").json().get("streams") or []
                cursor = int((streams[0].get("cursor") if streams else None) or 0)
                stream_pids = children(self.pid)
                stream_cpu = sum(map(cpu_seconds, stream_pids))
                self.readings.append(Reading(now, cursor, cpu_seconds(self.pid), stream_cpu))
                if now - last_rss >= 5:
                    self.rss.append(sum(map(rss_mib, [self.pid, *stream_pids])))
                    last_rss = now
                time.sleep(0.05)


@dataclass
class Windows:
    """The run cut into the stand-in's windows: which had the stream, where each began."""

    started: float
    width: float

    def index(self, at: float) -> int | None:
        """The window `at` falls in, None in the settling first second of one (or before)."""
        elapsed = at - self.started
        if elapsed < 0 or elapsed % self.width < SETTLE:
            return None
        return int(elapsed // self.width)

    def streaming(self, window: int) -> bool:
        return following(window * self.width, self.width)


def lags(readings: list[Reading], sent: array.array[float]) -> list[tuple[float, float]]:
    """At each reading: how long the oldest event not yet passed has waited (0: none)."""
    found = []
    for reading in readings:
        waiting = reading.cursor  # index of seq cursor + 1
        at = reading.at
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


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else float("nan")


def cpu_shares(readings: list[Reading], windows: Windows) -> dict[bool, tuple[float, float]]:
    """With the stream and without: the serving process's and the stream process's share
    of a core, over the readings' intervals within windows of that kind."""
    spent = {True: [0.0, 0.0, 0.0], False: [0.0, 0.0, 0.0]}  # wall, serving, stream
    for before, after in itertools.pairwise(readings):
        window = windows.index(before.at)
        if window is None or windows.index(after.at) != window:
            continue
        totals = spent[windows.streaming(window)]
        totals[0] += after.at - before.at
        totals[1] += after.cpu - before.cpu
        totals[2] += after.stream_cpu - before.stream_cpu
    return {
        kind: (serving / wall, stream / wall) if wall else (float("nan"), float("nan"))
        for kind, (wall, serving, stream) in spent.items()
    }


# The consumer the stand-in sends to between the follower's windows: reads each frame and
# drops it.
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
def relay_standin(tmp: Path, args: argparse.Namespace) -> Iterator[tuple[str, Path, Path]]:
    """The stand-in's URL while it runs, the file of its start and send times once it
    stopped, and the file whose making starts its schedule."""
    port, sent_file, go = free_port(), tmp / "sent.bin", tmp / "go"
    schedule = (args.seconds, args.rate, args.burst_rate, args.burst_seconds, args.burst_every)
    relay = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.relay_standin",
            str(port),
            *map(str, schedule),
            str(args.window),
            str(args.held_share),
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


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench follow", description=__doc__)
    parser.add_argument("--identities", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--window", type=float, default=10)
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--burst-rate", type=float, default=20000)
    parser.add_argument("--burst-seconds", type=float, default=5)
    parser.add_argument("--burst-every", type=float, default=120)
    parser.add_argument("--serve-rate", type=int, default=1000)
    parser.add_argument(
        "--held-share",
        type=float,
        default=0.5,
        help="of the identity and account events, the share about identities the daemon "
        "holds (each #identity one a re-verification)",
    )
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
    if args.window <= SETTLE:
        parser.error(f"--window must be longer than the {SETTLE:g} s each window settles")
    if args.answer_all:
        require_wrk()  # before the minute of filling, not after it
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
        extra = ["--memory-cache-mb", str(args.memory_cache_mb)] if args.memory_cache_mb else []
        answered_file = tmp / "answered.bin"
        with (
            relay_standin(tmp, args) as (url, sent_file, go),
            running_daemon(
                env, tmp / "daemon.log", "--cache", cache, "--firehose", url, *extra
            ) as daemon,
        ):
            asyncio.run(warm(daemon.url, args.identities, 200))
            if args.answer_all:  # the open loop's keys answered once: it asks for hits
                answer_all(daemon.url, listing, 100)
            drain = subprocess.Popen([sys.executable, "-c", DRAIN, url + DRAIN_PATH])
            try:
                go.touch()  # the stand-in's schedule starts with the timed run
                watch = Watch(daemon.url, daemon.process.pid)
                watch.start()
                open_loop(daemon.url, listing, args.serve_rate, args.seconds, answered_file)
                watch.stop.set()
                watch.join()
            finally:
                drain.terminate()
                drain.wait()
        times: array.array[float] = array.array("d")
        times.frombytes(sent_file.read_bytes())
        answered: array.array[float] = array.array("d")
        answered.frombytes(answered_file.read_bytes())
    windows, sent = Windows(times[0], args.window), times[1:]
    return report(args, windows, sent, answered, watch)


def report(
    args: argparse.Namespace,
    windows: Windows,
    sent: array.array[float],
    answered: array.array[float],
    watch: Watch,
) -> list[Row]:
    by_window: dict[int, list[float]] = {}
    for due, latency in zip(answered[::2], answered[1::2], strict=True):
        window = windows.index(due)
        if window is not None:
            by_window.setdefault(window, []).append(latency * 1000)
    streaming = [w for w in sorted(by_window) if windows.streaming(w)]
    quiet = [w for w in sorted(by_window) if not windows.streaming(w)]
    busy_p99 = p99([v for w in streaming for v in by_window[w]])
    quiet_p99 = p99([v for w in quiet for v in by_window[w]])
    # each window with the stream against the mean of its neighbours without it
    pairs = [
        p99(by_window[w]) / statistics.mean(p99(by_window[n]) for n in near)
        for w in streaming
        if (near := [n for n in (w - 1, w + 1) if n in by_window])
    ]
    lagged = lags(
        [
            r
            for r in watch.readings
            if (w := windows.index(r.at)) is not None and windows.streaming(w)
        ],
        sent,
    )
    values = sorted(lag for _, lag in lagged) or [float("nan")]
    lag_p50, lag_p99 = values[len(values) // 2], values[int(len(values) * 0.99)]
    bursts = absorbed(lags(watch.readings, sent), windows.started, args)
    last = watch.readings[-1].cursor if watch.readings else 0
    cpu = cpu_shares(watch.readings, windows)
    rss = watch.rss or [0.0]
    print(
        f"relay stand-in: {args.rate:,.0f} events/s (bursts of {args.burst_rate:,.0f}/s for "
        f"{args.burst_seconds:g} s every {args.burst_every:g} s; {args.held_share:.0%} of the "
        f"identity and account events about held identities) for {args.seconds} s, to the "
        f"daemon in {len(streaming)} windows of {args.window:g} s and to a drain in "
        f"{len(quiet)}: the daemon was sent {len(sent):,} and passed {last:,}"
    )
    print(f"  event lag p50 {lag_p50:.3f} s  p99 {lag_p99:.3f} s  max {values[-1]:.3f} s")
    print(f"  bursts absorbed in {', '.join(f'{b:.1f} s' for b in bursts) or '-'}")
    print(
        f"  serving process CPU {cpu[True][0]:.0%} of a core with the stream, "
        f"{cpu[False][0]:.0%} without; its stream process {cpu[True][1]:.0%} with, "
        f"{cpu[False][1]:.0%} without"
    )
    every = ", ".join(f"{r:.0f}" for r in rss)
    print(f"  RSS over the run: {min(rss):.0f} to {max(rss):.0f} MiB (every 5 s: {every})")
    print(
        f"  serve at {args.serve_rate:,} req/s over {args.identities:,} identities: p99 "
        f"{busy_p99:.2f} ms in the windows with the stream, {quiet_p99:.2f} ms in those "
        f"without; window by window: {', '.join(f'{r:.2f}' for r in pairs)}"
    )
    longest = max(bursts, default=float("nan"))
    return [
        Row("follow: event lag p99", lag_p99, 1.0, "target", "s", True),
        Row("follow: longest burst absorbed", longest, 30, "target", "s", True),
        Row("follow: serve p99 with the stream", busy_p99, quiet_p99, "without", "ms", True),
    ]
