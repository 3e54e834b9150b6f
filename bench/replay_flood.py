"""The replay check under a flood (issue 66): how many valid tokens of their own attacker
issuers must send (a new jti each, for the receiver's audience, the longest lifetime
allowed) before an honest issuer's new token is answered `unavailable`, or an honest token
already used is accepted `valid` again (a replay), with the default settings.

Two places for the nonces, as a service has them: in memory (the library's
`ServiceAuthVerifier(cached)` as the guide shows it, and `serve --cache memory:`) and in a
shared SQLite file (the daemon's default cache). The clock stands still, so no nonce
expires during the run: each figure is what an attacker holds within one token lifetime.
Every `--every` attacker tokens, an honest issuer's new token is checked, and one of its
tokens used before the flood is replayed (each once); the run stops at the first failure
of either, or at `--cap` tokens.

    python -m bench replay [--attackers 1 10 100] [--cap 150000] [--every 500]

It reads the verifier through the API both before and after issue 66 offer, so the same
command measures a checkout of either (the figures of both are in bench/results/).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from atwhois.auth import ServiceAuthVerifier
from atwhois.cache.stores import MemoryStore, SqliteStore, TieredStore
from atwhois.resolver.service_auth import Expected
from atwhois.testing import World

AUDIENCE = "did:web:feed.example#bsky_fg"
AT = 1_800_000_000.0  # the clock, standing still
LIFETIME = 3600  # the longest a token may live (SA-TIME-2): an attacker's choice


def _shared_nonces(path: Path) -> Any:
    """The nonces in a SQLite file the daemons share: the store's own since issue 66
    (`Store.nonces()`), the tiered store itself before it."""
    store = TieredStore(MemoryStore(), SqliteStore(path))
    return store.nonces() if hasattr(store, "nonces") else store


async def flood(where: str, attackers: int, cap: int, every: int) -> tuple[int, str]:
    """Attacker tokens sent until an honest token failed (how), or `cap` (none failed)."""
    world = World()
    bad = [world.add(f"attacker{n}.example.org") for n in range(attackers)]
    honest = world.add("honest.example.org")
    expected = Expected(AUDIENCE)

    def token(did: str) -> str:
        return world.service_token(did, AUDIENCE, lifetime=LIFETIME, now=AT)

    with tempfile.TemporaryDirectory(prefix="atwhois-replay-bench-") as tmp:
        async with world.cached(clock=lambda: AT) as cached:
            options: dict[str, Any] = {"clock": lambda: AT}
            if where == "sqlite":
                options["nonces"] = _shared_nonces(Path(tmp) / "cache.db")
            verifier = ServiceAuthVerifier(cached, **options)
            # Honest tokens used before the flood, each replayed once only: a replay checked
            # again and again would keep its nonce the most recently used in an LRU.
            used = [token(honest) for _ in range(cap // every)]
            for first in used:
                assert (await verifier.verify(first, expected, replay=True)).valid
            for sent in range(1, cap + 1):
                await verifier.verify(token(bad[sent % attackers]), expected, replay=True)
                if sent % every:
                    continue
                again = await verifier.verify(used[sent // every - 1], expected, replay=True)
                if again.valid:
                    return sent, "a replay of an honest token was valid"
                fresh = await verifier.verify(token(honest), expected, replay=True)
                if fresh.outcome == "unavailable":
                    return sent, f"an honest token was unavailable: {fresh.reason}"
    return cap, "none (cap reached)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench replay", description=__doc__)
    parser.add_argument("--attackers", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--cap", type=int, default=150_000, help="attacker tokens at most")
    parser.add_argument("--every", type=int, default=500, help="attacker tokens per check")
    parser.add_argument("--where", nargs="+", default=["memory", "sqlite"])
    args = parser.parse_args(argv)
    print(f"{'nonces':8} {'attackers':>9} {'tokens sent':>12} {'seconds':>8}  first failure")
    for where in args.where:
        for attackers in args.attackers:
            started = time.monotonic()
            sent, failure = asyncio.run(flood(where, attackers, args.cap, args.every))
            seconds = time.monotonic() - started
            print(f"{where:8} {attackers:9} {sent:12,} {seconds:8.1f}  {failure}", flush=True)
