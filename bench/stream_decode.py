"""Decoding a relay's stream on one core: `stream.decode` (libipld, events only for what an
identity resolver acts on) against the atproto SDK's way (`Frame.from_bytes`, then
`parse_subscribe_repos_message` into its models), on the same synthetic stream (96 %
commits with 0.5 to 6 KB of blocks, identity, account and sync events), interleaved, medians
of R rounds. Only a correct decoding counts: every frame must yield its sequence number.

Jetstream beside it: the same stream re-encoded as Jetstream's v1 JSON (`devnet.jetstream_wire`,
the reference's encoding: a message per commit operation, with its record), decoded by
`stream.decode_jetstream`
and applied through `Subscriber.feed`, against the raw library (`json.loads`, nothing
checked). The daemon asks a Jetstream for no commits, so what it decodes is the identity
and account messages; the rate over every kind is the upper bound of its cost.

    python -m bench stream [--frames 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable

from atproto_client.subscriptions import parse_com_atproto_sync_subscribe_repos_message
from atproto_subscription.frames import Frame

from atwhois.stream import AccountEvent, IdentityEvent, Skipped, decode
from atwhois.stream.cursors import MemoryCursor
from atwhois.stream.frames import decode_jetstream
from atwhois.stream.subscriber import Subscriber
from atwhois.stream.wires import JETSTREAM, Wire
from devnet.jetstream_wire import events
from devnet.relay_frames import stream

TARGET = 3.0  # events/s over the SDK's, on the same core
RELAY_RATE = (
    2000  # "sustained traffic of over 2,000 events per second" (docs.bsky.app/blog/relay-ops)
)


def ours(frames: list[bytes], decoder: Callable[[bytes], object] = decode) -> int:
    seqs = 0
    for raw in frames:
        event = decoder(raw)
        if isinstance(event, IdentityEvent | AccountEvent | Skipped) and event.seq is not None:
            seqs += 1
    return seqs


def jetstream(messages: list[bytes]) -> int:
    return ours(messages, decode_jetstream)


def json_loads(messages: list[bytes]) -> int:
    return sum(1 for raw in messages if json.loads(raw)["time_us"])


def applied(frames: list[bytes]) -> int:
    """Decoded and applied as the daemon does: through `Subscriber.feed` (the cursor kept,
    counters, identity and account events handed to a handler), one event loop."""
    return _applied(frames, None)


def jetstream_applied(messages: list[bytes]) -> int:
    return _applied(messages, JETSTREAM)


def _applied(frames: list[bytes], wire: Wire | None) -> int:
    handled = 0

    async def on_event(_: IdentityEvent | AccountEvent) -> None:
        nonlocal handled
        handled += 1

    async def run() -> int:
        subscriber = Subscriber("ws://bench", on_event, MemoryCursor(), save_every=3600)
        if wire is not None:
            subscriber.wire = wire
        for raw in frames:
            await subscriber.feed(raw)
        events = subscriber.state.events
        if handled != events["#identity"] + events["#account"]:
            return 0  # an event decoded but not handed on: not a correct run
        return sum(events.values())

    return asyncio.run(run())


def sdks(frames: list[bytes]) -> int:
    seqs = 0
    for raw in frames:
        message = parse_com_atproto_sync_subscribe_repos_message(Frame.from_bytes(raw))  # type: ignore[arg-type]
        if getattr(message, "seq", None) is not None:
            seqs += 1
    return seqs


def timed(decoder: Callable[[list[bytes]], int], frames: list[bytes]) -> float:
    started = time.process_time()
    decoded = decoder(frames)
    seconds = time.process_time() - started
    if decoded != len(frames):
        raise SystemExit(f"{decoder.__name__} decoded {decoded} of {len(frames)} frames")
    return len(frames) / seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench stream", description=__doc__)
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    frames = stream(args.frames)
    megabytes = sum(map(len, frames)) / 1e6
    encoded = (e.v1(10**15 + n, n + 1) for n, frame in enumerate(frames) for e in events(frame))
    messages = [m for m in encoded if m is not None]
    rates: dict[str, list[float]] = {
        "stream.decode (libipld)": [],
        "decoded and applied": [],
        "atproto SDK models": [],
        "Jetstream: decode_jetstream": [],
        "Jetstream: decoded, applied": [],
        "Jetstream: json.loads alone": [],
    }
    for _ in range(args.rounds):  # interleaved: the machine's noise falls on all alike
        rates["stream.decode (libipld)"].append(timed(ours, frames))
        rates["decoded and applied"].append(timed(applied, frames))
        rates["atproto SDK models"].append(timed(sdks, frames))
        rates["Jetstream: decode_jetstream"].append(timed(jetstream, messages))
        rates["Jetstream: decoded, applied"].append(timed(jetstream_applied, messages))
        rates["Jetstream: json.loads alone"].append(timed(json_loads, messages))
    print(
        f"{args.frames:,} frames ({megabytes:.1f} MB), medians of {args.rounds} rounds, CPU time:"
    )
    for name, samples in rates.items():
        rate = statistics.median(samples)
        per = 1e6 / rate
        print(f"  {name:<26} {rate:10,.0f} events/s   {per:6.1f} µs per event")
    ratio = statistics.median(rates["stream.decode (libipld)"]) / statistics.median(
        rates["atproto SDK models"]
    )
    applied_rate = statistics.median(rates["decoded and applied"])
    print(f"  ratio ours / SDK: {ratio:.1f}x (target {TARGET:.0f}x)")
    print(
        f"  decoded and applied on one core: {applied_rate / RELAY_RATE:.0f}x the network's "
        f"{RELAY_RATE:,} events/s (sustained relay traffic, docs.bsky.app/blog/relay-ops)"
    )
    jet = statistics.median(rates["Jetstream: decode_jetstream"])
    raw = statistics.median(rates["Jetstream: json.loads alone"])
    jet_applied = statistics.median(rates["Jetstream: decoded, applied"])
    print(
        f"  Jetstream ({len(messages):,} messages): decoding costs {raw / jet:.1f}x json.loads "
        f"alone; decoded and applied on one core: {jet_applied / RELAY_RATE:.0f}x the "
        f"network's {RELAY_RATE:,} events/s"
    )
