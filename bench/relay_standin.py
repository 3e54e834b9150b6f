"""A relay stand-in for `bench follow`: `subscribeRepos` at a schedule of rates, the
network's mix (`devnet.relay_frames`: 96 % commits with 0.5 to 6 KB of blocks, 3 % syncs,
0.5 % identity and 0.5 % account events, half of those about identities the daemon caches),
each frame encoded as it is sent with its own `seq`. It keeps when it sent each `seq`
(`time.monotonic`, which every process of the machine shares) and writes them out when it
stops, for the bench to tell each event's lag. The schedule starts once GO_FILE exists (the
bench's timed run begins), and not before a subscriber connected.

    python -m bench.relay_standin PORT SECONDS RATE BURST_RATE BURST_SECONDS BURST_EVERY SENT_FILE
                                  GO_FILE
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


class Relay:
    def __init__(self, schedule: Schedule, seconds: float, go: Path) -> None:
        self.schedule, self.seconds, self.go = schedule, seconds, go
        self.sent = array.array("d")  # index seq - 1: when it was sent
        self.rng = random.Random(7)
        self.blocks = [self.rng.randbytes(self.rng.randint(500, 6000)) for _ in range(512)]
        self.started: float | None = None

    def frame(self, seq: int) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.01:
            cached = rng.random() < 0.5
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
        while not self.go.exists() and not ws.closed:
            await asyncio.sleep(0.05)
        if self.started is None:
            self.started = time.monotonic()
        while not ws.closed:
            elapsed = time.monotonic() - self.started
            if elapsed > self.seconds:
                break
            due = self.schedule.due(elapsed)
            while len(self.sent) < due and not ws.closed:
                seq = len(self.sent) + 1
                await ws.send_bytes(self.frame(seq))
                self.sent.append(time.monotonic())
            await asyncio.sleep(0.002)
        await ws.close()
        return ws


async def serve(port: int, relay: Relay, out: Path) -> None:
    app = web.Application()
    app.router.add_get(PATH, relay.handle)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    out.write_bytes(relay.sent.tobytes())
    await runner.cleanup()


def main(argv: list[str]) -> None:
    port, seconds, rate, burst_rate, burst_seconds, every, out, go = argv
    schedule = Schedule(float(rate), float(burst_rate), float(burst_seconds), float(every))
    asyncio.run(serve(int(port), Relay(schedule, float(seconds), Path(go)), Path(out)))


if __name__ == "__main__":
    main(sys.argv[1:])
