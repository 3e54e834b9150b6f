"""Idle and trickling connections against the daemon and the mirror (issue 36): 20,000
connections that send half a request head and then nothing, held by two helper processes
that open a new one whenever one is closed. Meanwhile a client asks `/_health` and
resolveIdentity (the daemon) or did:plc documents (the mirror) for several identities in turn,
one request at a time, every answer required to be a 200; its p50 and
p99 are compared with the same requests with no idle connection, measured in the same run.
Also reported: the most sockets the process had open (against its bound) and how many lines
its log grew by.

    python -m bench idle [--connections 20000] [--seconds 40] [--requests 400]
"""

from __future__ import annotations

import argparse
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench import Row
from bench.memory_load import Highest
from devnet.atwhois import Daemon, running_daemon
from devnet.network import running_devnet
from devnet.process import open_sockets

HEAD = b"GET /_health HTTP/1.1\r\nHost: idle\r\n"  # never finished
# verified did:plc identities of the test network: the requests rotate over them
IDENTITIES = ("alice.test", "carol.test", "grace.test", "henry.test")


def hold(url: str, count: int, seconds: float) -> None:
    """Keep `count` idle connections open to `url` for `seconds`, reopening closed ones."""
    host, port = url.removeprefix("http://").split(":")
    address = (host, int(port))
    selector = selectors.DefaultSelector()

    def open_one() -> None:
        try:
            conn = socket.create_connection(address, timeout=1)
            conn.sendall(HEAD)
            conn.setblocking(False)
            selector.register(conn, selectors.EVENT_READ)
        except OSError:
            time.sleep(0.01)

    end = time.monotonic() + seconds
    for _ in range(count):
        if time.monotonic() > end:
            break
        open_one()
    while time.monotonic() < end:
        for key, _ in selector.select(timeout=0.5):
            conn = key.fileobj
            assert isinstance(conn, socket.socket)
            try:
                data = conn.recv(4096)
            except OSError:
                data = b""
            if not data:  # closed by the server: open another in its place
                selector.unregister(conn)
                conn.close()
                open_one()
        while len(selector.get_map()) < count and time.monotonic() < end:
            open_one()


def _latencies(url: str, paths: list[str], requests: int) -> list[float]:
    timings: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(requests):
            started = time.perf_counter()
            answer = client.get(paths[i % len(paths)])
            timings.append((time.perf_counter() - started) * 1000)
            assert answer.status_code == 200, (answer.status_code, answer.text[:200])
    return timings


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def measure(what: str, daemon: Daemon, paths: list[str], args: argparse.Namespace) -> list[Row]:
    _latencies(daemon.url, paths, 50)  # warm: caches, connections
    idle = _latencies(daemon.url, paths, args.requests)
    log_before = len(daemon.log.read_text().splitlines())
    holders = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.idle_connections",
                "--hold",
                daemon.url,
                str(args.connections // 2),
                str(args.seconds),
            ]
        )
        for _ in range(2)
    ]
    with Highest(lambda: open_sockets(daemon.process.pid)) as sockets:
        time.sleep(min(10.0, args.seconds / 3))  # the connections opened
        loaded = _latencies(daemon.url, paths, args.requests)
    most_files = int(sockets.value)
    for holder in holders:
        holder.wait(args.seconds + 30)
    log_lines = len(daemon.log.read_text().splitlines()) - log_before
    bound = args.max_connections
    print(
        f"{what}: p50 {_p(idle, 50):.2f} ms idle, {_p(loaded, 50):.2f} ms under "
        f"{args.connections:,} idle connections; p99 {_p(idle, 99):.2f} / {_p(loaded, 99):.2f} "
        f"ms; most open sockets {most_files:,} (bound {bound:,}); "
        f"log grew {log_lines} lines"
    )
    return [
        Row(f"{what}: p99 under {args.connections:,} idle conns", _p(loaded, 99),
            _p(idle, 99), "the same, no idle conn", "ms", True),
        Row(f"{what}: most open sockets", most_files, bound, "max_connections", "sockets", True),
    ]  # fmt: skip


def main(argv: list[str]) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench idle")
    parser.add_argument("--connections", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--max-connections", type=int, default=10_000)
    args = parser.parse_args(argv)
    rows: list[Row] = []
    limits = ("--max-connections", str(args.max_connections), "--no-request-log")
    with tempfile.TemporaryDirectory() as tmp, running_devnet(Path(tmp)) as devnet:
        with running_daemon(
            devnet.env(), Path(tmp) / "serve.log", "--cache", "memory:", *limits
        ) as daemon:
            xrpc = "/xrpc/com.atproto.identity.resolveIdentity?identifier="
            paths = ["/_health", *(xrpc + name for name in IDENTITIES)]
            rows += measure("serve", daemon, paths, args)
        mirror_args = ("--plc-db", str(Path(tmp) / "mirror.db"), "--max-connections")
        with running_daemon(
            devnet.env(),
            Path(tmp) / "mirror.log",
            *mirror_args,
            str(args.max_connections),
            command=("plc", "mirror", "--listen", "127.0.0.1:0"),
        ) as mirror:
            alice = devnet.did("alice")
            deadline = time.monotonic() + 60
            while httpx.get(f"{mirror.url}/{alice}", timeout=10).status_code != 200:
                assert time.monotonic() < deadline, "the mirror did not catch up"
                time.sleep(0.2)
            dids = [f"/{devnet.did(name.removesuffix('.test'))}" for name in IDENTITIES]
            rows += measure("plc mirror", mirror, ["/_health", *dids], args)
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["--hold"]:
        hold(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        for row in main(sys.argv[1:]):
            print(row.line())
