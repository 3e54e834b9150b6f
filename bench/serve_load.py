"""The daemon under load: `wrk` against cached `resolveHandle`, and in the same run against a
bare aiohttp handler returning a fixed JSON body (the baseline), same connections.

    python -m bench serve [--connections 100] [--seconds 10]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

from tests.daemon import running_daemon
from tests.devnet.network import running_devnet

BARE = textwrap.dedent("""
    import json, sys
    from aiohttp import web
    body = json.dumps({"did": "did:plc:5cyonhzbgiso6fi6oapfffs3"}).encode()
    async def handle(request):
        return web.Response(body=body, content_type="application/json")
    app = web.Application()
    app.router.add_get("/xrpc/com.atproto.identity.resolveHandle", handle)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
""")


def wrk(
    url: str, connections: int, seconds: int, script: Path | None = None
) -> tuple[float, float, float]:
    """Requests/s, p50 and p99 in milliseconds (one wrk thread: the other core serves);
    `script`: a wrk Lua script (which URLs to ask)."""
    extra = ["-s", str(script)] if script else []
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", *extra, url],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 60,
    ).stdout
    if re.search(r"Non-2xx", out):
        raise RuntimeError(f"non-2xx answers under load:\n{out}")
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return rate, _percentile(out, "50"), _percentile(out, "99")


def _percentile(out: str, which: str) -> float:
    value, unit = re.search(rf"\s{which}%\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench serve", description=__doc__)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is missing: `make bench` installs it (Debian package wrk)")
    path = "/xrpc/com.atproto.identity.resolveHandle?handle=alice.test"
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-serve-bench-") as tmp,
        running_devnet(Path(tmp)) as devnet,
        running_daemon(
            devnet.env(), Path(tmp) / "serve.log", "--cache", f"sqlite://{tmp}/cache.db"
        ) as daemon,
    ):
        port = free_port()
        bare = subprocess.Popen([sys.executable, "-c", BARE, str(port)])
        try:
            bare_url = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    httpx.get(bare_url + path)
                    break
                except httpx.TransportError:
                    time.sleep(0.05)
            assert httpx.get(daemon.url + path).json()["did"] == devnet.did("alice")  # warm
            base = wrk(bare_url + path, args.connections, args.seconds)
            ours = wrk(daemon.url + path, args.connections, args.seconds)
        finally:
            bare.terminate()
            bare.wait()
        with running_daemon(
            devnet.env(),
            Path(tmp) / "quiet.log",
            "--cache",
            f"sqlite://{tmp}/cache.db",
            "--no-request-log",
        ) as quiet:
            httpx.get(quiet.url + path)
            silent = wrk(quiet.url + path, args.connections, args.seconds)
    print(
        f"wrk, 1 thread, {args.connections} connections, {args.seconds}s each, cached "
        "resolveHandle (memory tier over SQLite), JSON request log on"
    )
    print(
        f"  bare aiohttp handler   {base[0]:9,.0f} req/s   p50 {base[1]:6.2f} ms   "
        f"p99 {base[2]:6.2f} ms"
    )
    print(
        f"  atwhois serve          {ours[0]:9,.0f} req/s   p50 {ours[1]:6.2f} ms   "
        f"p99 {ours[2]:6.2f} ms"
    )
    print(f"  ratio atwhois / bare   {ours[0] / base[0]:.2f}")
    print(
        f"  atwhois, no request log {silent[0]:8,.0f} req/s   p50 {silent[1]:6.2f} ms   "
        f"p99 {silent[2]:6.2f} ms   ratio {silent[0] / base[0]:.2f}"
    )
