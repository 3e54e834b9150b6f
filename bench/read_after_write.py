"""Read after write through the PLC mirror (issue 65): a DID asked about the moment its
operation is in the mirror's upstream is served, not denied, in either way of following.

    python -m bench mirror-raw [--dids 50] [--seed 1]

On the test network: mirror A polls the reference PLC directory (every 0.1 s); mirror B
follows A, through A's `/export/stream` (stream mode) or by polling A's `/export` (poll
mode), resting the default interval (5 s) between reads. For each DID, one after another:
it is made at the directory; A is asked about it (A reads the directory for it, and answers
once the operation is written: from that answer on, the operation is in B's upstream; it
comes a few milliseconds after A stored it); B is asked at once. Measured: B's answer time
less A's, and B's status (every one should be 200). A random pause of up to a poke gap
between DIDs spreads where each question falls in B's rhythm of reads (A's own gap is
short, so that a question may come anywhere in B's).

Targets, in the same run: stream mode, 0.5 s (the operation comes over the stream within a
tick or two, and the question waits for it); poll mode, the poke gap (`follow.POKE_GAP`:
polls start at least that far apart) plus a round trip: B's poll with no gap to wait out
(A asked, the page verified and stored, the question answered), measured the same way on 10
DIDs asked more than a poke gap after the one before, its p99.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from atwhois.mirror.follow import POKE_GAP
from bench import Row
from devnet.atwhois import Daemon, running_daemon
from devnet.network import DevnetState, running_devnet
from devnet.plc_ops import PlcAccount, new_handle

STREAM_TARGET = 0.5  # seconds from the operation in the upstream to B's answer
A_INTERVAL = 0.1  # seconds between A's polls of the directory (and its poke gap: short)


def _health(daemon: Daemon) -> dict[str, object]:
    answer: dict[str, object] = httpx.get(f"{daemon.url}/_health", timeout=10).json()
    return answer


def _until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:g} s")
        time.sleep(0.05)


def _mirror(
    env: dict[str, str], workdir: Path, name: str, *args: str
) -> contextlib.AbstractContextManager[Daemon]:
    """`atwhois plc mirror`, its store in `workdir`."""
    return running_daemon(
        env,
        workdir / f"{name}.log",
        "--plc-db",
        str(workdir / f"{name}.db"),
        *args,
        command=("plc", "mirror", "--listen", "127.0.0.1:0"),
    )


ROUND_TRIPS = 10  # DIDs asked a poke gap after the one before (poll mode): B's round trip


class Measured:
    def __init__(self) -> None:
        self.seconds: list[float] = []  # B's answer less the operation in A
        self.statuses: list[int] = []

    def add(self, seconds: float, status: int) -> None:
        self.seconds.append(seconds)
        self.statuses.append(status)


def _p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _asked(
    devnet: DevnetState, client: httpx.Client, a: Daemon, b: Daemon, pause: float
) -> tuple[float, int]:
    """After `pause` seconds, a new DID: B's answer less A's, and B's status."""
    time.sleep(pause)
    did = PlcAccount(devnet.plc_url, new_handle("raw")).did
    upstream = client.get(f"{a.url}/{did}")
    if upstream.status_code != 200:
        raise RuntimeError(f"A answered {upstream.status_code} for {did}")
    in_upstream = time.perf_counter()
    answer = client.get(f"{b.url}/{did}")
    return time.perf_counter() - in_upstream, answer.status_code


def _phase(
    devnet: DevnetState, workdir: Path, a: Daemon, follows: str, dids: int, rng: random.Random
) -> tuple[Measured, Measured]:
    """B following A as `follows` says (`auto`: its stream; `off`: polling), asked about
    `dids` new DIDs the moment A has each; polling, first about `ROUND_TRIPS` more, each
    past a poke gap (its round trip)."""
    env = {**devnet.env(), "ATWHOIS_PLC_URL": a.url}
    source = "stream" if follows == "auto" else "poll"
    measured, trips = Measured(), Measured()
    with (
        _mirror(env, workdir, f"b-{source}", "--plc-mirror-stream", follows) as b,
        httpx.Client(timeout=30) as client,
    ):
        _until(lambda: _health(b)["behind_s"] is not None, f"B ({source}) caught up")
        _until(lambda: _health(b)["source"] == source, f"B following by {source}")
        for _ in range(ROUND_TRIPS if source == "poll" else 0):
            trips.add(*_asked(devnet, client, a, b, POKE_GAP + 0.25))
        for _ in range(dids):
            measured.add(*_asked(devnet, client, a, b, rng.uniform(0, POKE_GAP)))
        said = _health(b)
        if said["source"] != source or said["stream_stalls"]:
            raise RuntimeError(f"B did not follow by {source} throughout: {said}")
    return measured, trips


def _rows(mode: str, measured: Measured, target: float) -> list[Row]:
    seconds, asked = measured.seconds, len(measured.statuses)
    served = measured.statuses.count(200)
    p50, p99, most = _p(seconds, 50), _p(seconds, 99), max(seconds)
    print(
        f"  {mode}: {asked} DIDs, {served} answered 200, "
        f"{measured.statuses.count(404)} answered 404; answer less the operation in the "
        f"upstream p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {most * 1000:.0f} ms "
        f"(target {target * 1000:.0f} ms)"
    )
    what = f"raw {mode}: answer less op in upstream"
    return [
        Row(f"{what}, p50", p50 * 1000, target * 1000, "target", "ms", True),
        Row(f"{what}, p99", p99 * 1000, target * 1000, "target", "ms", True),
        Row(f"{what}, max", most * 1000, target * 1000, "target", "ms", True),
        Row(f"raw {mode}: answered 200", served, asked, "asked", "DIDs"),
    ]


def main(argv: list[str]) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench mirror-raw", description=__doc__)
    parser.add_argument("--dids", type=int, default=50, help="DIDs asked about in each mode")
    parser.add_argument("--seed", type=int, default=1, help="of the pauses between DIDs")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="atwhois-bench-") as folder:
        workdir = Path(folder)
        with running_devnet(workdir) as devnet:
            interval = ("--plc-mirror-interval", str(A_INTERVAL))
            with _mirror(devnet.env(), workdir, "a", *interval) as a:
                _until(lambda: _health(a)["behind_s"] is not None, "A caught up")
                stream, _ = _phase(devnet, workdir, a, "auto", args.dids, rng)
                poll, trips = _phase(devnet, workdir, a, "off", args.dids, rng)
    trip = _p(trips.seconds, 99)
    print(
        f"  poll mode's round trip (asked past a poke gap, {len(trips.seconds)} DIDs, "
        f"{trips.statuses.count(200)} answered 200): p50 {_p(trips.seconds, 50) * 1000:.0f} ms, "
        f"p99 {trip * 1000:.0f} ms"
    )
    return [
        *_rows("stream", stream, STREAM_TARGET),
        *_rows("poll", poll, POKE_GAP + trip),
    ]
