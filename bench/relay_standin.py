"""A relay stand-in for `bench follow`: `subscribeRepos` at a schedule of rates, the
network's mix (`devnet.relay_frames`: 96 % commits with 0.5 to 6 KB of blocks, 3 % syncs,
0.5 % identity and 0.5 % account events, HELD_SHARE of those about identities the daemon
caches: each of those it re-verifies),
each frame encoded as it is sent.

Two consumers connect: the daemon's follower (on the relay's path) and a drain that drops
what it reads (on DRAIN_PATH). The schedule's events go to one of them at a time, in
windows of WINDOW seconds: the drain in even windows, the follower in odd ones, so the
daemon is measured with and without the stream in the same run while the stand-in (another
machine, on a real network) costs the same throughout. The follower's events are numbered
`seq` 1, 2, ... and the stand-in keeps when it sent each (`time.monotonic`, which every
process of the machine shares); when it stops it writes the moment its schedule started,
then those times, as doubles. The schedule starts once GO_FILE exists (the bench's timed run
begins) and both consumers are connected.

    python -m bench.relay_standin PORT SECONDS RATE BURST_RATE BURST_SECONDS BURST_EVERY WINDOW
                                  HELD_SHARE SENT_FILE GO_FILE
"""

from __future__ import annotations

import array
import asyncio
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from devnet import relay_frames, world

PATH = "/xrpc/com.atproto.sync.subscribeRepos"
DRAIN_PATH = "/drain"
CACHED_SAMPLE = 100_000  # cached identities the stand-in's events name (the devnet serves them)


class Schedule:
    """`rate` events/s, and `burst_rate` for `burst_seconds` every `burst_every` seconds
    (the first burst after one period)."""

    def __init__(self, rate: float, burst_rate: float, burst_seconds: float, every: float) -> None:
        self.rate, self.burst_rate, self.burst_seconds, self.every = (
            rate,
            burst_rate,
            burst_seconds,
            every,
        )

    def due(self, elapsed: float) -> int:
        """Events due by `elapsed` seconds from the start."""
        periods, into = divmod(elapsed, self.every)
        bursting = max(0.0, into - (self.every - self.burst_seconds))
        extra = (self.burst_rate - self.rate) * (periods * self.burst_seconds + bursting)
        return int(self.rate * elapsed + extra)


def following(elapsed: float, window: float) -> bool:
    """Whether the follower (not the drain) gets the events due `elapsed` seconds in."""
    return int(elapsed // window) % 2 == 1


class Relay:
    def __init__(
        self, schedule: Schedule, seconds: float, window: float, held_share: float, go: Path
    ) -> None:
        self.schedule, self.seconds, self.window, self.go = schedule, seconds, window, go
        self.held_share = held_share
        self.sent = array.array("d")  # the follower's events, index seq - 1: when sent
        self.drained = 0  # events the drain was sent
        self.rng = random.Random(7)
        self.blocks = [self.rng.randbytes(self.rng.randint(500, 6000)) for _ in range(512)]
        self.consumers: dict[str, web.WebSocketResponse] = {}
        self.started: float | None = None

    def frame(self, seq: int) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.01:
            cached = rng.random() < self.held_share
            host = world.bulk_host(rng.randrange(CACHED_SAMPLE))
            stranger = "did:plc:" + "".join(rng.choices("abcdefghijklmnopqrstuvwxyz234567", k=24))
            did = f"did:web:{host}" if cached else stranger
            if roll < 0.005:
                return relay_frames.identity(seq, did, host if cached else None)
            return relay_frames.account(seq, True, None, did)
        if roll < 0.04:
            return relay_frames.sync(seq, rng)
        body: dict[str, Any] = {
            "seq": seq,
            "rebase": False,
            "tooBig": False,
            "repo": relay_frames.DID,
            "commit": relay_frames.CID,
            "rev": f"3k{seq:011d}",
            "since": None,
            "blocks": self.blocks[seq % len(self.blocks)],
            "ops": [
                {
                    "action": "create",
                    "path": f"app.bsky.feed.post/3k{seq:010d}",
                    "cid": relay_frames.CID,
                }
            ],
            "blobs": [],
            "time": relay_frames.TIME,
        }
        return relay_frames.frame({"op": 1, "t": "#commit"}, body)

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        self.consumers["drain" if request.path == DRAIN_PATH else "follower"] = ws
        async for _ in ws:  # until it leaves; it says nothing that matters
            pass
        return ws

    async def send(self) -> None:
        """The schedule, to whichever consumer's window it is."""
        while not self.go.exists() or len(self.consumers) < 2:
            await asyncio.sleep(0.05)
        self.started = time.monotonic()
        while (elapsed := time.monotonic() - self.started) <= self.seconds:
            due = self.schedule.due(elapsed)
            to_follower = following(elapsed, self.window)
            ws = self.consumers["follower" if to_follower else "drain"]
            while len(self.sent) + self.drained < due:
                if to_follower:
                    frame = self.frame(len(self.sent) + 1)
                else:
                    frame = self.frame(self.drained + 1)
                try:
                    await ws.send_bytes(frame)
                except ConnectionResetError:  # it left: the run is over
                    return
                if to_follower:
                    self.sent.append(time.monotonic())
                else:
                    self.drained += 1
            await asyncio.sleep(0.002)


async def serve(port: int, relay: Relay, out: Path) -> None:
    app = web.Application()
    app.router.add_get(PATH, relay.handle)
    app.router.add_get(DRAIN_PATH, relay.handle)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    sending = asyncio.create_task(relay.send())
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    sending.cancel()
    out.write_bytes(array.array("d", [relay.started or 0.0]).tobytes() + relay.sent.tobytes())
    await runner.cleanup()


def main(argv: list[str]) -> None:
    port, seconds, rate, burst_rate, burst_seconds, every, window, held, out, go = argv
    schedule = Schedule(float(rate), float(burst_rate), float(burst_seconds), float(every))
    relay = Relay(schedule, float(seconds), float(window), float(held), Path(go))
    asyncio.run(serve(int(port), relay, Path(out)))


if __name__ == "__main__":
    main(sys.argv[1:])
