"""Moderation labels verified in process, the labeler's document warm in a cache (issue 68):
`atwhois.LabelVerifier` over a `CachedResolver` (each label read from its JSON form and its
fields checked, the labeler's document from the cache, its `#atproto_label` key found, the
DRISL of the fields as received rebuilt, the signature checked), one label at a time and in
batches, against the bare signature check on the same labels in the same run: libsecp256k1
(coincurve) verifying each label's signed bytes, encoded and converted to DER beforehand,
under the key already parsed; what a service that held the key and trusted the bytes would
do at least. Interleaved rounds, medians; only correct verdicts count (every label verified
and in force, every bare signature valid).

The labeler lives in `atwhois.testing.World` (its document answered in memory): with the
cache warm, nothing is asked of a directory, so the figures are those of the test network's.

    python -m bench labels [--labels 2000] [--batch 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import coincurve
import libipld
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from atwhois.auth import LabelVerifier
from atwhois.resolver.keys import parse_did_key
from atwhois.testing import World
from bench import Row

POST = "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/app.bsky.feed.post/3l6oveex3ii2l"

Bare = tuple[coincurve.PublicKey, bytes, bytes]  # the key, the signed bytes, the DER signature


def bare_inputs(labels: list[dict[str, Any]], did_key: str) -> list[Bare]:
    """What the bare check is given: the key parsed, each label's bytes and signature."""
    key = coincurve.PublicKey(parse_did_key(did_key).compressed)
    inputs = []
    for label in labels:
        fields = {name: value for name, value in label.items() if name != "sig"}
        raw = base64.b64decode(label["sig"]["$bytes"] + "==")
        der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
        inputs.append((key, libipld.encode_dag_cbor(fields), der))
    return inputs


def bare(inputs: list[Bare]) -> int:
    return sum(key.verify(der, message) for key, message, der in inputs)


async def timed(run: Callable[[], Awaitable[int]], count: int) -> float:
    started = time.perf_counter()
    verified = await run()
    seconds = time.perf_counter() - started
    assert verified == count, f"{verified} of {count} verified"
    return count / seconds


async def measure(args: argparse.Namespace) -> tuple[float, float, float]:
    world = World()
    did = world.add_labeler("mod.example.org")
    cts = "2026-12-06T12:00:00.000Z"
    labels = [world.label(did, POST, f"label-{n}", cts=cts) for n in range(args.labels)]
    async with world.cached() as cached:
        verifier = LabelVerifier(cached)
        warm = await verifier.verify(labels[0])
        assert warm.in_force and warm.key is not None, warm.reason
        inputs = bare_inputs(labels, warm.key)

        async def one_at_a_time() -> int:
            return sum([(await verifier.verify(label)).in_force for label in labels])

        async def batched() -> int:
            verified = 0
            for start in range(0, len(labels), args.batch):
                verdicts = await verifier.verify_many(labels[start : start + args.batch])
                verified += sum(verdict.in_force for verdict in verdicts)
            return verified

        async def baseline() -> int:
            return bare(inputs)

        rates: dict[str, list[float]] = {"one": [], "batch": [], "bare": []}
        for _ in range(args.rounds):
            rates["one"].append(await timed(one_at_a_time, len(labels)))
            rates["batch"].append(await timed(batched, len(labels)))
            rates["bare"].append(await timed(baseline, len(labels)))
        assert world.asked["plc"] == 1  # warm: the document was asked once, for the first
    one, batch, theirs = (statistics.median(rates[kind]) for kind in ("one", "batch", "bare"))
    return one, batch, theirs


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench labels", description=__doc__)
    parser.add_argument("--labels", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    one, batch, theirs = asyncio.run(measure(args))
    print(
        f"{args.labels:,} labels of one labeler, its document cached, medians of "
        f"{args.rounds} rounds:"
    )
    print(f"  atwhois one at a time   {one:9,.0f} labels/s   ratio {one / theirs:.2f}")
    print(
        f"  atwhois batches of {args.batch:<4} {batch:9,.0f} labels/s   ratio {batch / theirs:.2f}"
    )
    print(f"  bare signature check    {theirs:9,.0f} labels/s")
    against, unit = "bare signature check", "labels/s"
    return [
        Row("labels verified/s, warm cache, one at a time", one, theirs, against, unit),
        Row(
            f"labels verified/s, warm cache, batches of {args.batch}", batch, theirs, against, unit
        ),
    ]


if __name__ == "__main__":
    main()
