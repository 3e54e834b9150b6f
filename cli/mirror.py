"""`atwhois plc mirror`: a verifying mirror of the PLC directory named by --plc-url.

It backfills from the stored cursor with progress on the terminal, then serves the
directory's read API on --listen and keeps following (or, with --once, stops when caught
up). `--report` prints what the upstream served that the rules refuse, and stops.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import time
from typing import Any

from aiohttp import web

from mirror import Follower, MirrorApi, MirrorState, Replica, Upstream, report
from mirror.store import SqlMirrorStore, default_mirror_path, open_mirror_store
from resolver.config import DEFAULT_PLC_URL
from server.metrics import CONTENT_TYPE, Exposition

from .export_workers import default_workers
from .main import configure


def open_from(merged: dict[str, Any]) -> SqlMirrorStore:
    return open_mirror_store(merged.get("plc_db") or default_mirror_path())


def follower_from(
    merged: dict[str, Any], store: SqlMirrorStore, *, progress: Any = None
) -> Follower:
    """The follower the settings describe (`stop()` it: it may have worker processes)."""
    workers = merged.get("plc_mirror_workers")
    workers = default_workers() if workers is None else int(workers)
    return Follower(
        Replica(store, workers=workers if store.writable else 0),
        Upstream(merged.get("plc_url") or DEFAULT_PLC_URL),
        interval=float(merged.get("plc_mirror_interval") or 5.0),
        progress=progress,
    )


class Progress:
    """One line on stderr every couple of seconds while backfilling: rate, DIDs, cursor."""

    def __init__(self, every: float = 2.0) -> None:
        self._every = every
        self._last = self._started = time.monotonic()

    def __call__(self, state: MirrorState) -> None:
        now = time.monotonic()
        if now - self._last < self._every:
            return
        self._last = now
        rate = state.ops / max(now - self._started, 1e-9)
        refused = sum(state.rejected.values())
        print(
            f"  {state.ops:,} ops verified ({rate:,.0f} ops/s), {state.dids:,} new DIDs, "
            f"cursor {state.cursor_time}, {refused:,} refused",
            file=sys.stderr,
            flush=True,
        )


def run(args: argparse.Namespace) -> int:
    merged, _ = configure(args)
    try:
        store = open_from(merged)
    except (OSError, ValueError) as err:
        print(f"{args.prog}: cannot open the mirror's database: {err}", file=sys.stderr)
        return 2
    if args.report:
        state = MirrorState.of(merged.get("plc_url") or DEFAULT_PLC_URL, store)
        _print_report(report(store, state, 1000), args.json)
        store.close()
        return 0
    if args.once and not store.writable:
        print(f"{args.prog}: another mirror process is writing {store.location}", file=sys.stderr)
        store.close()
        return 2
    follower = follower_from(merged, store, progress=Progress())
    try:
        if args.once:
            started = time.monotonic()
            state = follower.catch_up()
            seconds = time.monotonic() - started
            summary = {
                **state.to_json(),
                "seconds": round(seconds, 3),
                "ops_per_s": round(state.ops / max(seconds, 1e-9), 1),
                "store": {"backend": store.name, **store.counts()},
            }
            if args.json:
                print(json.dumps(summary, indent=2))
            else:
                print(
                    f"mirror caught up: {state.ops:,} ops verified in {seconds:.1f} s "
                    f"({summary['ops_per_s']:,.0f} ops/s); {summary['store']['dids']:,} DIDs; "
                    f"{sum(state.rejected.values()):,} refused; cursor {state.cursor_time}"
                )
            return 1 if state.rejected else 0
        return _serve(args, merged, store, follower)
    finally:
        follower.stop()
        store.close()


def _print_report(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(data, indent=2))
        return
    counts = data["store"]
    print(
        f"mirror of {data['mirror']['upstream']}: {counts['ops']:,} ops, {counts['dids']:,} "
        f"DIDs ({counts['tombstoned']:,} tombstoned); {counts['rejected']:,} ops refused, "
        f"{counts['flagged']:,} DIDs flagged"
    )
    for item in data["rejected"]:
        print(f"  refused {item['did']} {item['cid']}: {item['message']} [{item['rule']}]")
    for item in data["flagged"]:
        print(f"  flagged {item['did']}: {item['reason']}")


def _serve(
    args: argparse.Namespace, merged: dict[str, Any], store: SqlMirrorStore, follower: Follower
) -> int:
    host, _, port = args.listen.rpartition(":")
    api = MirrorApi(store, follower.state, profile=merged.get("plc_mirror_profile") or "directory")
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per poll says nothing

    async def main() -> None:
        app = web.Application()
        api.attach(app)
        app.router.add_get("/_health", lambda _: _health(follower.state))
        exposition = Exposition()  # the process's own figures beside the mirror's

        async def metrics(_: web.Request) -> web.Response:
            body = exposition.render(follower.state.metrics())
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host or "127.0.0.1", int(port or 0))
        await site.start()
        bound = runner.addresses[0]
        follower.start()
        logging.getLogger("atwhois.mirror").info(
            json.dumps(
                {
                    "event": "listening",
                    "url": f"http://{bound[0]}:{bound[1]}",
                    "upstream": follower.upstream.url,
                    "store": store.name,
                    "role": follower.state.role,
                }
            )
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await runner.cleanup()

    try:
        asyncio.run(main())
    except (OSError, ValueError) as err:
        print(f"{args.prog}: {err}", file=sys.stderr)
        return 2
    return 0


async def _health(state: MirrorState) -> web.Response:
    return web.json_response({"ok": state.last_error is None, **state.to_json()})
