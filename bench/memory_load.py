"""Memory under an adversarial load: every request a new did:web identity whose document is
60 KB of small JSON objects (the costliest kind to hold decoded), from many clients at once,
for minutes. The daemon's RSS is sampled every second and compared with what it may use:
the configured memory cap plus 80 MiB for everything else (the issue's target); its RSS
after start-up, measured in the same run, is the baseline its growth is counted from.

With `--redis-outage`, the daemon shares a Redis of its own, which is stopped a third of
the way through and started again at two thirds; every answer is counted by status, and
any 5xx but an XRPC 502/503 is a failure.

    python -m bench memory [--minutes 10] [--clients 50] [--cap-mb 64] [--redis-outage]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx

from devnet.atwhois import Daemon, error_name, running_daemon
from devnet.network import running_devnet
from devnet.redis_server import RedisServer

XRPC = "/xrpc/com.atproto.identity.resolveDid"


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


class Highest:
    """The highest value `read()` gave, sampled every 0.2 s in a thread while the `with`
    block runs (a process's memory, its open sockets)."""

    def __init__(self, read: Callable[[], float]) -> None:
        self.read, self.value = read, read()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.value = max(self.value, self.read())
            self._stop.wait(0.2)

    def __enter__(self) -> Highest:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


async def load(
    daemon: Daemon, seconds: float, clients: int, outage: RedisServer | None
) -> tuple[Counter[str], list[float]]:
    answers: Counter[str] = Counter()
    samples: list[float] = []
    counter = itertools.count()
    started = time.monotonic()
    end = started + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(http: httpx.AsyncClient) -> None:
        while time.monotonic() < end:
            did = f"did:web:pad60-load{next(counter)}.bulk.test"
            try:
                response = await http.get(XRPC, params={"did": did})
            except httpx.HTTPError as err:
                answers[f"transport {type(err).__name__}"] += 1
                continue
            status = response.status_code
            if status >= 500:
                error = error_name(response)
                ok = status in (502, 503) and error is not None
                answers[f"{status} {error}" if ok else f"{status} BAD: {response.text[:80]}"] += 1
            else:
                answers[str(status)] += 1

    async def sampler() -> None:
        stopped = restarted = False
        while time.monotonic() < end:
            samples.append(rss_mib(daemon.process.pid))
            elapsed = time.monotonic() - started
            if outage is not None and not stopped and elapsed > seconds / 3:
                outage.stop()
                stopped = True
            if outage is not None and stopped and not restarted and elapsed > 2 * seconds / 3:
                outage.start()
                restarted = True
            await asyncio.sleep(1)

    async with httpx.AsyncClient(base_url=daemon.url, timeout=60, limits=limits) as http:
        await asyncio.gather(sampler(), *(client(http) for _ in range(clients)))
    return answers, samples


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench memory", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--cap-mb", type=float, default=64)
    parser.add_argument("--redis-outage", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="atwhois-memory-bench-") as tmp:
        work = Path(tmp)
        redis = RedisServer(work) if args.redis_outage else None
        store = ["--cache", redis.url] if redis else ["--cache", "memory:"]
        if redis:
            redis.start()
        try:
            with (
                running_devnet(work) as devnet,
                running_daemon(
                    devnet.env(),
                    work / "serve.log",
                    *store,
                    "--memory-cache-mb",
                    str(args.cap_mb),
                    "--no-request-log",
                ) as daemon,
            ):
                httpx.get(daemon.url + XRPC, params={"did": "did:web:pad60-warm.bulk.test"})
                baseline = rss_mib(daemon.process.pid)
                answers, samples = asyncio.run(load(daemon, args.minutes * 60, args.clients, redis))
                final = rss_mib(daemon.process.pid)
        finally:
            if redis:
                redis.stop()
    total = sum(answers.values())
    peak = max(samples)
    allowed = args.cap_mb + 80  # the target: the cap plus 80 MiB for everything else
    print(
        f"{args.minutes:g} min, {args.clients} clients, a new did:web with a 60 KB document "
        f"per request, --memory-cache-mb {args.cap_mb:g}"
        + (", Redis stopped at 1/3 and started at 2/3" if redis else ", memory: store")
    )
    print(f"  answers        {total:,} ({total / (args.minutes * 60):,.0f}/s): {dict(answers)}")
    print(f"  RSS baseline   {baseline:7.1f} MiB (the daemon after start-up, same run)")
    print(f"  RSS peak       {peak:7.1f} MiB   final {final:.1f} MiB")
    print(f"  growth         {peak - baseline:7.1f} MiB for a cap of {args.cap_mb:g} MiB")
    print(
        f"  peak / (cap + 80 MiB)   {peak / allowed:.2f}"
        f"   ({'within' if peak <= allowed else 'OVER'} the target)"
    )
    bad = [key for key in answers if "BAD" in key or key.startswith("transport")]
    if bad:
        raise SystemExit(f"answers that must never happen: {bad}")
