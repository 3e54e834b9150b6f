"""Clients that ask and never read against the daemon (issue 55, item 1; issue 65): connections
that pipeline a thousand requests each and read nothing, held by helper processes that open a
new one a second after one is closed, all from 127.0.0.1; and the probe asks from 127.0.0.1
too, as every local client of a daemon does (and every client behind a reverse proxy).

For each count of readers, a daemon whose `--max-connections` is that count (the readers fill
its bound: their address's share of it, and would fill all of it). Once they hold it, the
probe asks twice a second, 30 rounds: `/_health` and then resolveHandle on one kept-alive
connection, and `/_health` again on a new connection each time (which must get in: take the
place of a stuck one), every request given 10 s. Targets: at least 28 of 30 answered for
each, and no gap over 2 s between two answers of one (from the first round to the last).
Memory: the daemon's highest RSS while the readers are held, less its RSS before they came,
over the most sockets it held beyond those it held before; the target is 80 KiB each (800
MiB at the default bound). With the readers coming and going, that counts the work of
answering their new connections too; `--many` readers held at the default bound, with no
share per address (as behind a proxy) and no write timeout to speak of, are every one
admitted and kept: the memory each held connection costs.

    python -m bench slow [--readers 300 1000] [--rounds 30] [--many 8000]
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench import Row
from bench.memory_load import Highest, rss_mib
from devnet.atwhois import running_daemon
from devnet.network import running_devnet
from devnet.process import open_sockets

RESOLVE = "/xrpc/com.atproto.identity.resolveHandle?handle=alice.test"
# what the probe asks each round, and on which connection: kept, or new each time
PATHS = {
    "/_health": ("/_health", True),
    "resolveHandle": (RESOLVE, True),
    "/_health (new conn)": ("/_health", False),
}
EVERY = 0.5  # seconds between two rounds of the probe: twice a second
ANSWERED = 28  # of 30: the target for each path
GAP = 2.0  # seconds: the longest wait between two answers of one path, the target
KIB_PER_CONNECTION = 80.0  # the target: at most 800 MiB at the default bound


@dataclass
class Probes:
    """What the probe saw: for each path, when it was answered, and what failed; the
    daemon's counts of connections closed, from its last `/_health`."""

    rounds: int
    started: float = 0.0
    ended: float = 0.0
    answered: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PATHS})
    failures: dict[str, list[str]] = field(default_factory=lambda: {p: [] for p in PATHS})
    closed: dict[str, int] = field(default_factory=dict)

    def gap(self, path: str) -> float:
        """The longest wait for an answer: from the first round, between two answers, to the
        end of the last round."""
        times = [self.started, *self.answered[path], self.ended]
        return max(later - earlier for earlier, later in itertools.pairwise(times))


def _client(url: str) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address="127.0.0.1")
    return httpx.Client(base_url=url, transport=transport, timeout=10)


def probe(url: str, rounds: int) -> Probes:
    """`rounds` of the probe from 127.0.0.1, one every `EVERY` s."""
    probes = Probes(rounds)
    with _client(url) as kept:
        probes.started = time.monotonic()
        for index in range(rounds):
            for path, (ask, keep) in PATHS.items():
                try:
                    if keep:
                        answer = kept.get(ask)
                    else:
                        with _client(url) as new:
                            answer = new.get(ask)
                except httpx.TransportError as error:
                    probes.failures[path].append(type(error).__name__)
                    continue
                if ask == "/_health" and answer.status_code in (200, 503):
                    probes.closed = dict(answer.json()["connections"]["closed"])
                elif ask == "/_health" or not answer.is_success:
                    probes.failures[path].append(str(answer.status_code))
                    continue
                probes.answered[path].append(time.monotonic())
            time.sleep(max(0.0, probes.started + (index + 1) * EVERY - time.monotonic()))
        probes.ended = time.monotonic()
    return probes


def _readers(url: str, count: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    """Helper processes holding `count` slow readers for `seconds` (a thousand each)."""
    each = [min(1000, count - i) for i in range(0, count, 1000)]
    return [
        subprocess.Popen([sys.executable, "-m", "devnet.slow_readers", url, str(n), str(seconds)])
        for n in each
    ]


def _stop(helpers: list[subprocess.Popen[bytes]]) -> None:
    for helper in helpers:
        helper.kill()
        helper.wait()


def _kib_each(before: float, most: float, connections: int) -> float:
    return (most - before) * 1024 / max(1, connections)


def _held(url: str, pid: int, readers: int, rounds: int) -> list[Row]:
    """The probe while `readers` slow readers are held, and the daemon's memory meanwhile."""
    before, sockets = rss_mib(pid), open_sockets(pid)
    helpers = _readers(url, readers, rounds * EVERY + 20)
    with Highest(lambda: rss_mib(pid)) as most, Highest(lambda: open_sockets(pid)) as held:
        time.sleep(5)  # the readers connected, their answers stuck, the bound full
        probes = probe(url, rounds)
    _stop(helpers)
    more = int(held.value) - sockets
    kib = _kib_each(before, most.value, more)
    answered = {path: len(times) for path, times in probes.answered.items()}
    print(
        f"{readers} slow readers against --max-connections {readers}, the probe on their "
        f"address: answered {answered} of {rounds}, longest gaps "
        f"{ {path: round(probes.gap(path), 2) for path in PATHS} } s, failures "
        f"{probes.failures}; RSS {before:.0f} -> {most.value:.0f} MiB with at most {more} "
        f"sockets more: {kib:.1f} KiB each; closed by the bound {probes.closed}"
    )
    rows = []
    for path in PATHS:
        rows += [
            Row(f"{readers} readers: {path}, answered", answered[path], ANSWERED,
                f"target (of {rounds})", "probes"),
            Row(f"{readers} readers: {path}, longest gap", probes.gap(path), GAP, "target",
                "s", True),
        ]  # fmt: skip
    rows.append(Row(f"{readers} readers: RSS growth per socket", kib, KIB_PER_CONNECTION,
                    "target", "KiB", True))  # fmt: skip
    return rows


def _memory(env: dict[str, str], workdir: Path, readers: int) -> Row:
    """The daemon's RSS per connection, `readers` slow readers held at the default bound with
    no share per address and no write timeout to speak of: every one admitted, and kept."""
    log = workdir / "default.log"
    keep = ("--max-connections-per-client", "10000", "--write-timeout", "3600")
    with running_daemon(env, log, "--cache", "memory:", "--no-request-log", *keep) as daemon:
        probe(daemon.url, 4)
        pid = daemon.process.pid
        before, sockets = rss_mib(pid), open_sockets(pid)
        helpers = _readers(daemon.url, readers, 600)
        held, grown_at = sockets, time.monotonic()
        while time.monotonic() - grown_at < 10:  # until no more come in for 10 s
            time.sleep(1)
            now_held = open_sockets(pid)
            if now_held > held:
                held, grown_at = now_held, time.monotonic()
        with Highest(lambda: rss_mib(pid)) as most:
            time.sleep(2)
        _stop(helpers)
    kib = _kib_each(before, most.value, held - sockets)
    print(
        f"{readers} slow readers at the default bound, no share per address: RSS "
        f"{before:.0f} -> {most.value:.0f} MiB with {held - sockets} sockets more: {kib:.1f} "
        f"KiB each ({kib * 10_000 / 1024:.0f} MiB for 10,000)"
    )
    return Row(f"{readers} readers held: RSS per connection", kib, KIB_PER_CONNECTION,
               "target", "KiB", True)  # fmt: skip


def main(argv: list[str]) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench slow", description=__doc__)
    parser.add_argument("--readers", type=int, nargs="+", default=[300, 1000])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--many", type=int, default=8000, help="0: not this run")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-bench-") as workdir,
        running_devnet(Path(workdir)) as devnet,
    ):
        for readers in args.readers:
            log = Path(workdir) / f"bound-{readers}.log"
            bound = ("--max-connections", str(readers))
            with running_daemon(devnet.env(), log, "--cache", "memory:", *bound) as daemon:
                probe(daemon.url, 4)  # warm: the answer cached
                rows += _held(daemon.url, daemon.process.pid, readers, args.rounds)
        if args.many:
            rows.append(_memory(devnet.env(), Path(workdir), args.many))
    return rows
