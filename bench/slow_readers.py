"""Clients that ask and never read against the daemon (issue 55, item 1): connections that
pipeline a thousand requests each and read nothing, from one address, held by helper
processes that open a new one whenever one is closed. Meanwhile another address asks
`/_health` and resolveHandle in turn, one request at a time: how many were answered, and their
p50 and p99 against the same requests with no slow reader, in the same run. Then the
daemon's resident memory with many more slow readers at the default bound, against it idle.

    python -m bench slow [--readers 600] [--max-connections 600] [--seconds 20]
                         [--many 8000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench import Row
from bench.memory_load import Highest, rss_mib
from devnet.atwhois import Daemon, running_daemon
from devnet.network import running_devnet

PATHS = ("/_health", "/xrpc/com.atproto.identity.resolveHandle?handle=alice.test")


def _asked(url: str, seconds: float) -> tuple[list[float], int]:
    """Latencies (ms) of the answered requests, and how many failed, over `seconds`."""
    timings: list[float] = []
    failed = 0
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=url, transport=transport, timeout=10) as client:
        end = time.monotonic() + seconds
        index = 0
        while time.monotonic() < end:
            started = time.perf_counter()
            try:
                answer = client.get(PATHS[index % 2])
                ok = answer.status_code in (200, 503) if index % 2 == 0 else answer.is_success
            except httpx.TransportError:
                ok = False
            if ok:
                timings.append((time.perf_counter() - started) * 1000)
            else:
                failed += 1
            index += 1
            time.sleep(0.02)
    return timings, failed


def _p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def _readers(url: str, count: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    """Helper processes holding `count` slow readers for `seconds` (a thousand each)."""
    each = [min(1000, count - i) for i in range(0, count, 1000)]
    return [
        subprocess.Popen([sys.executable, "-m", "devnet.slow_readers", url, str(n), str(seconds)])
        for n in each
    ]


def _held(daemon: Daemon, readers: int, seconds: float) -> tuple[list[float], int, float]:
    """The other address's answers while `readers` slow readers are held, and the daemon's
    highest resident memory meanwhile (MiB)."""
    helpers = _readers(daemon.url, readers, seconds + 10)
    with Highest(lambda: rss_mib(daemon.process.pid)) as most:
        time.sleep(5)  # the readers connected, their answers stuck
        timings, failed = _asked(daemon.url, seconds)
    for helper in helpers:
        helper.kill()
        helper.wait()
    return timings, failed, most.value


def main(argv: list[str]) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench slow", description=__doc__)
    parser.add_argument("--readers", type=int, default=600)
    parser.add_argument("--max-connections", type=int, default=600)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--many", type=int, default=8000)
    args = parser.parse_args(argv)
    rows: list[Row] = []
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-bench-") as workdir,
        running_devnet(Path(workdir)) as devnet,
    ):
        bound = ("--max-connections", str(args.max_connections))
        log = Path(workdir) / "bounded.log"
        with running_daemon(devnet.env(), log, "--cache", "memory:", *bound) as daemon:
            _asked(daemon.url, 2)  # warm
            quiet, quiet_failed = _asked(daemon.url, args.seconds)
            loaded, failed, _ = _held(daemon, args.readers, args.seconds)
        print(
            f"{args.readers} slow readers against --max-connections {args.max_connections}: "
            f"another address had {len(loaded)} answers and {failed} failures "
            f"({len(quiet)} and {quiet_failed} with no slow reader); p50 {_p(quiet, 50):.1f} / "
            f"{_p(loaded, 50):.1f} ms, p99 {_p(quiet, 99):.1f} / {_p(loaded, 99):.1f} ms"
        )
        rows += [
            Row(f"p99 with {args.readers} slow readers", _p(loaded, 99), _p(quiet, 99),
                "the same, none", "ms", True),
            Row(f"  failures with {args.readers} slow readers", failed, max(quiet_failed, 1),
                "the same, none (at least 1)", "requests", True),
        ]  # fmt: skip
        log = Path(workdir) / "default.log"
        with running_daemon(devnet.env(), log, "--cache", "memory:") as daemon:
            _asked(daemon.url, 2)
            idle = rss_mib(daemon.process.pid)
            _, _, most = _held(daemon, args.many, 10)
        print(
            f"{args.many} slow readers at the default bound: resident memory {idle:.0f} MiB "
            f"idle, at most {most:.0f} MiB held"
        )
        rows.append(Row(f"RSS with {args.many} slow readers", most, idle, "idle", "MiB", True))
    return rows
