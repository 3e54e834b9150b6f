"""The daemon under load, against a bare aiohttp handler answering ready bytes of the same
sizes on the same paths (the baseline), measured in the same run:

- one hot key (`resolveHandle`), closed loop: wrk, 1 thread, 100 connections;
- `--identities` distinct warm identities of the test network's bulk world (did:web, every
  one resolved and verified once before), `resolveHandle` and `resolveDid` at random: the
  cache and the composition of an answer are timed, not a memo of one URL;
- the same rotation at a fixed rate (open loop, `bench.open_loop`): p99 at a stated rate,
  counted from when each request was due.

Every answer must be a 2xx, and the warm-up checks each identity's answer is the right DID
and document (a wrong answer is never counted as throughput).

With `--fill`, the cache is not warmed by resolving every identity (a million cold
resolutions take hours here) but filled as a cache copied from a daemon that served them
would be: one identity is resolved and verified through the daemon, and its two entries
are written again for each of the others, their names changed (`fill_cache`); a sample of
the answers is then checked as above. What a cached identity costs in each store is
`bench store`'s.

    python -m bench serve [--connections 100] [--seconds 10] [--identities 10000]
                          [--rate 2000] [--workers N] [--fill] [--memory-cache-mb MIB]
                          [--answer-all]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

from bench import Row
from devnet import world
from devnet.atwhois import running_daemon
from devnet.network import running_devnet

XRPC = "/xrpc/com.atproto.identity."
HOT = XRPC + "resolveHandle?handle=alice.test"

# Ready bytes per method, of the sizes the daemon answers (a loopback send costs by the
# byte); any query string.
BARE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from aiohttp import web
    ready = Path(sys.argv[2])
    while not ready.exists() or not ready.stat().st_size:
        time.sleep(0.05)
    handle_body, document_body = ready.read_bytes().split(b"\\n", 1)
    async def handle(request):
        return web.Response(body=handle_body, content_type="application/json")
    async def did(request):
        return web.Response(body=document_body, content_type="application/json")
    app = web.Application()
    app.router.add_get("/xrpc/com.atproto.identity.resolveHandle", handle)
    app.router.add_get("/xrpc/com.atproto.identity.resolveDid", did)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
""")

# Chooses a path per request at random from a file (both servers run the same script:
# choosing costs wrk time too).
ROTATE = """
paths = {}
for line in io.lines("%s") do paths[#paths + 1] = line end
request = function()
  return wrk.format("GET", paths[math.random(#paths)])
end
"""


# The same paths in order, from the one numbered by the script's argument: `answer_all`.
IN_ORDER = """
paths = {}
for line in io.lines("%s") do paths[#paths + 1] = line end
init = function(args) sent = tonumber(args[1]) end
request = function()
  sent = sent + 1
  return wrk.format("GET", paths[(sent - 1) %% #paths + 1])
end
"""


def answer_all(url: str, listing: Path, connections: int) -> float:
    """Have the daemon answer every path of `listing` once, in order, in runs of wrk of 20 s
    (each run starts where the last one's answered requests end, less those that may have
    been in flight); the seconds it took."""
    script = listing.with_name("in-order.lua")
    script.write_text(IN_ORDER % listing)
    with listing.open() as paths:
        total = sum(1 for _ in paths)
    started, answered = time.perf_counter(), 0
    while answered < total:
        command = ["wrk", "-t1", f"-c{connections}", "-d20s", "-s", str(script), url]
        out = subprocess.run(
            [*command, "--", str(answered)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        done = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
        answered += max(done - connections, 1)
    return time.perf_counter() - started


def rotate_script(directory: Path, paths: list[str]) -> tuple[Path, Path]:
    """A file of `paths` and the wrk script choosing among them."""
    listing = directory / "paths.txt"
    listing.write_text("".join(path + "\n" for path in paths))
    script = directory / "rotate.lua"
    script.write_text(ROTATE % listing)
    return listing, script


def require_wrk() -> None:
    """Said before a benchmark that loads a server with wrk spends minutes on anything else
    (the mirror's curve backfills first: without wrk it failed only then)."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is missing: `make bench` installs it (Debian package wrk)")


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
    if re.search(r"Non-2xx|Socket errors", out):
        raise RuntimeError(f"failed answers under load:\n{out}")
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return rate, _percentile(out, "50"), _percentile(out, "99")


def _percentile(out: str, which: str) -> float:
    value, unit = re.search(rf"\s{which}%\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def open_loop(
    url: str, listing: Path, rate: int, seconds: int, answered: Path | None = None
) -> dict[str, float]:
    """`bench.open_loop`'s figures; with `answered`, its (due, latency) pairs written there."""
    extra = ["100", str(answered)] if answered is not None else []
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.open_loop",
            url,
            str(listing),
            str(rate),
            str(seconds),
            *extra,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds * 4 + 60,
    ).stdout
    result: dict[str, float] = json.loads(out)
    if result["non_2xx"] or result["errors"] or result["answered"] != result["sent"]:
        raise RuntimeError(f"failed answers at a fixed rate: {result}")
    return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(url: str) -> None:
    for _ in range(600):
        try:
            httpx.get(url, timeout=5)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


async def warm(url: str, identities: int, sample: int | None = None) -> tuple[bytes, bytes]:
    """Resolve every identity through the daemon (or `sample` of them, spread over all),
    then ask again (from its cache), checking each answer; the bodies of the first (for the
    bare handler)."""
    gate = asyncio.Semaphore(64)
    first: list[bytes] = []
    step = max(1, identities // sample) if sample else 1
    chosen = range(0, identities, step)

    async def one(http: httpx.AsyncClient, index: int) -> None:
        host = world.bulk_host(index)
        async with gate:  # the paths as wrk writes them: a rendered answer is kept per path
            handle = await http.get(f"{XRPC}resolveHandle?handle={host}")
            did = await http.get(f"{XRPC}resolveDid?did=did:web:{host}")
        if handle.status_code != 200 or handle.json() != {"did": f"did:web:{host}"}:
            raise RuntimeError(f"{host}: wrong answer {handle.status_code} {handle.text[:200]}")
        if did.status_code != 200 or did.json()["didDoc"]["id"] != f"did:web:{host}":
            raise RuntimeError(f"{host}: wrong document {did.status_code} {did.text[:200]}")
        if index == 0:
            first.extend([handle.content, did.content])

    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        await asyncio.gather(*(one(http, i) for i in chosen))
        first.clear()
        await asyncio.gather(*(one(http, i) for i in chosen))  # every answer a hit
    return first[0], first[1]


TEMPLATE = world.bulk_host(0)


def fill_cache(path: Path, identities: int) -> None:
    """The entries of `TEMPLATE` (resolved, verified, kept by a daemon) written again for
    `bulk_host(i)`, i < `identities`: the bytes a daemon would have kept for each, through
    the store's own write path (its schema is its own)."""
    asyncio.run(_fill(path, identities))


async def _fill(path: Path, identities: int) -> None:
    from atwhois.cache.entry import Entry
    from atwhois.cache.stores import SqliteStore

    store = SqliteStore(path)
    try:
        templates = []
        for key in (f"h:{TEMPLATE}", f"d:did:web:{TEMPLATE}"):
            held = await store.get(key)
            if held is None:
                raise RuntimeError(f"the template's entry {key} is not in the cache")
            templates.append((key, Entry.decode(held.value, key), held.expires_at))
        writes = []
        for index in range(1, identities):
            host = world.bulk_host(index)
            for key, entry, expires in templates:
                part = json.loads(json.dumps(entry.part).replace(TEMPLATE, host))
                body = entry.body.replace(TEMPLATE.encode(), host.encode()) if entry.body else None
                copied = dataclasses.replace(entry, part=part, body=body)
                name = key.replace(TEMPLATE, host)
                writes.append(store.put(name, copied.encode(name), expires))
            if len(writes) >= 256:  # a few hundred at once: each put is a write of its own
                await asyncio.gather(*writes)
                writes.clear()
        await asyncio.gather(*writes)
    finally:
        await store.close()


def rotation(identities: int) -> list[str]:
    paths = []
    for index in range(identities):
        host = world.bulk_host(index)
        paths.append(f"{XRPC}resolveHandle?handle={host}")
        paths.append(f"{XRPC}resolveDid?did=did:web:{host}")
    random.Random(0).shuffle(paths)
    return paths


def row(name: str, ours: tuple[float, float, float], base: tuple[float, float, float]) -> str:
    return (
        f"  {name:<44} {ours[0]:8,.0f} req/s  p50 {ours[1]:6.2f} ms  p99 {ours[2]:7.2f} ms"
        f"   bare {base[0]:7,.0f} req/s p99 {base[2]:6.2f} ms   ratio {ours[0] / base[0]:.2f}"
    )


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench serve", description=__doc__)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--identities", type=int, default=10_000)
    parser.add_argument("--rate", type=int, default=2000, help="open loop: requests/s")
    parser.add_argument("--workers", type=int, default=None, help="atwhois serve --workers")
    parser.add_argument(
        "--fill", action="store_true", help="fill the cache from one resolved identity's entries"
    )
    parser.add_argument(
        "--memory-cache-mb",
        type=float,
        default=None,
        help="atwhois serve --memory-cache-mb (default: the daemon's)",
    )
    parser.add_argument(
        "--answer-all",
        action="store_true",
        help="with --fill: have the daemon answer every key once before the timed runs "
        "(else a sample: the timed runs then compose most answers from the store)",
    )
    args = parser.parse_args(argv)
    require_wrk()
    options = ["--workers", str(args.workers)] if args.workers else []
    if args.memory_cache_mb is not None:
        options += ["--memory-cache-mb", str(args.memory_cache_mb)]
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-serve-bench-") as name,
        running_devnet(Path(name), bulk=1 if args.fill else args.identities) as devnet,
        contextlib.ExitStack() as stack,
    ):
        tmp = Path(name)
        serve = ("--cache", f"sqlite://{name}/c.db", *options)
        started = time.perf_counter()
        with running_daemon(devnet.env(), tmp / "resolving.log", *serve) as daemon:
            asyncio.run(warm(daemon.url, 1 if args.fill else args.identities))
        if args.fill:
            fill_cache(tmp / "c.db", args.identities)
        warmed = time.perf_counter() - started
        sample = 2000 if args.fill else None
        # The daemon under load starts anew on the cache the first one filled: what it holds
        # per identity once it has read and answered each one, without the high-water mark
        # that resolving them left in the first one's allocator (which made this figure vary
        # by 1.7 KB from run to run).
        daemon = stack.enter_context(running_daemon(devnet.env(), tmp / "serve.log", *serve))
        handle_body, document_body = asyncio.run(warm(daemon.url, args.identities, sample))
        assert httpx.get(daemon.url + HOT).json()["did"] == devnet.did("alice")
        listing, script = rotate_script(tmp, rotation(args.identities))
        if args.answer_all:  # the timed runs are hits, where memory holds every answer
            took = answer_all(daemon.url, listing, args.connections)
            print(f"every key answered once in {took:.0f} s")
        ready = tmp / "bodies"
        port = free_port()
        bare = subprocess.Popen([sys.executable, "-c", BARE, str(port), str(ready)])
        try:
            ready.write_bytes(httpx.get(daemon.url + HOT).content + b"\n" + document_body)
            bare_url = f"http://127.0.0.1:{port}"
            wait_for(bare_url + HOT)
            c, s = args.connections, args.seconds
            hot = (wrk(bare_url + HOT, c, s), wrk(daemon.url + HOT, c, s))
            wrk(daemon.url, c, s, script)  # every worker has now served most of the keys
            rotating = (wrk(bare_url, c, s, script), wrk(daemon.url, c, s, script))
            fixed = (
                open_loop(bare_url, listing, args.rate, s),
                open_loop(daemon.url, listing, args.rate, s),
            )
        finally:
            bare.terminate()
            bare.wait()
    print(
        f"atwhois serve {' '.join(options)}, SQLite cache, "
        f"request log on; {args.identities:,} bulk identities "
        f"{'filled' if args.fill else 'warmed'} in {warmed:.0f} s "
        f"(handle body {len(handle_body)} B, document body {len(document_body)} B)"
    )
    print(f" closed loop, wrk 1 thread, {c} connections, {s} s each:")
    print(row("one hot key (resolveHandle)", hot[1], hot[0]))
    print(row(f"{2 * args.identities:,} warm keys (resolveHandle, resolveDid)", *rotating[::-1]))
    base, ours = fixed
    print(f" open loop, {args.rate:,} requests/s for {s} s over the same keys, {c} connections:")
    print(
        f"  atwhois p50 {ours['p50_ms']:6.2f} ms  p99 {ours['p99_ms']:7.2f} ms  "
        f"p99.9 {ours['p999_ms']:7.2f} ms  max {ours['max_ms']:7.2f} ms"
    )
    print(
        f"  bare    p50 {base['p50_ms']:6.2f} ms  p99 {base['p99_ms']:7.2f} ms  "
        f"p99.9 {base['p999_ms']:7.2f} ms  max {base['max_ms']:7.2f} ms"
        f"   p99 ratio atwhois / bare {ours['p99_ms'] / base['p99_ms']:.2f}"
    )
    bare, options_note = "bare aiohttp handler", f" ({' '.join(options)})" if options else ""
    return [
        Row("serve: one hot key" + options_note, hot[1][0], hot[0][0], bare, "req/s"),
        Row(
            f"serve: {2 * args.identities:,} warm keys" + options_note,
            rotating[1][0],
            rotating[0][0],
            bare,
            "req/s",
        ),
        Row(
            f"serve: p99 at {args.rate:,} req/s (open loop)",
            ours["p99_ms"],
            base["p99_ms"],
            bare,
            "ms",
            True,
        ),
    ]
