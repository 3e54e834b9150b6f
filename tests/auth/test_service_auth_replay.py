"""The replay check under a flood (SA-JTI-2, issue 66), in memory, in SQLite and in Redis:
issuers sending valid tokens of their own, each with a new jti, fill their own share of the
nonces and not the bound, so every honest token from another issuer stays `valid`; a
replay is never `valid` twice; a nonce is never forgotten early (in memory, an LRU shared
with the identities forgot them); where the nonces live is said in the verdict; a receiver
may keep nonces a shorter time (SA-JTI-3); the metrics name the issuers at their share."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from atwhois.auth import ServiceAuthVerifier
from atwhois.auth.nonces import share_of
from atwhois.cache.stores import MemoryNonces, MemoryStore, NonceStore, SqliteStore, TieredStore
from atwhois.cache.stores.redis import RedisStore
from atwhois.resolver.service_auth import Expected, Verification
from atwhois.testing import World
from devnet.redis_server import REDIS_URL
from tests.support import metrics

AUDIENCE = "did:web:feed.example#bsky_fg"
METHOD = "app.bsky.feed.getFeedSkeleton"
EXPECTED = Expected(AUDIENCE, METHOD)
BOUND, SHARE = 200, 10  # the bound and each issuer's share, shrunk as the settings allow
ATTACKERS, HONEST = 10, 8  # issuers; each honest one sends fewer tokens than its share

# Two verifiers (two daemons) over one store, where the store is shared.
Pair = Callable[[Path], tuple[NonceStore, NonceStore]]


def _memory(_: Path) -> tuple[NonceStore, NonceStore]:
    one = MemoryNonces()
    return one, one  # one process: the same memory


def _sqlite(tmp: Path) -> tuple[NonceStore, NonceStore]:
    return SqliteStore(tmp / "a.db").nonces(), SqliteStore(tmp / "a.db").nonces()


def _redis(_: Path) -> tuple[NonceStore, NonceStore]:
    """Two daemons' nonces on one Redis. The command timeout is the store's own (0.5 s)
    times ten: a flood of hundreds of claims at once on a loaded machine queues for the
    pool longer than that, and what is tested here is the shares, not Redis's latency."""
    prefix = f"atwhois-test-{uuid.uuid4().hex}:"
    return (
        RedisStore(REDIS_URL, prefix=prefix, timeout=5.0).nonces(),
        RedisStore(REDIS_URL, prefix=prefix, timeout=5.0).nonces(),
    )


STORES: dict[str, Pair] = {"memory": _memory, "sqlite": _sqlite, "redis": _redis}


class Collected:
    """A verifier's metrics as the daemon's registry collects them."""

    def __init__(self, verifier: ServiceAuthVerifier) -> None:
        self.verifier = verifier

    def collect(self) -> Iterator[Metric]:
        return self.verifier.metrics()


def tally(results: list[Verification]) -> Counter[tuple[str, str | None]]:
    return Counter((r.outcome, r.rule) for r in results)


@pytest.mark.parametrize("kind", sorted(STORES))
async def test_ten_issuers_flooding_cannot_make_another_issuers_token_unavailable(
    kind: str, tmp_path: Path
) -> None:
    """The target of issue 66: ten attacker issuers each send many valid tokens (a new
    jti each) through two daemons at once, with honest issuers' tokens among them; every
    honest token is valid, every replay refused, no token valid twice."""
    world = World()
    attackers = [world.add(f"attacker{n}.example.org") for n in range(ATTACKERS)]
    honest = [world.add(f"honest{n}.example.org") for n in range(HONEST)]
    one, two = STORES[kind](tmp_path)
    async with world.cached() as cached:
        daemons = [
            ServiceAuthVerifier(cached, nonces=nonces, max_nonces=BOUND, issuer_nonces=SHARE)
            for nonces in (one, two)
        ]
        flood = [
            world.service_token(did, AUDIENCE, method=METHOD)
            for _ in range(4 * SHARE)
            for did in attackers
        ]
        fair = [
            world.service_token(did, AUDIENCE, method=METHOD)
            for _ in range(SHARE - 2)
            for did in honest
        ]
        sent = flood[: len(flood) // 2] + fair + flood[len(flood) // 2 :]  # honest amid the flood
        first = await asyncio.gather(
            *(daemons[n % 2].verify(t, EXPECTED, replay=True) for n, t in enumerate(sent))
        )
        # every token again, through the other daemon: all replays
        again = await asyncio.gather(
            *(daemons[(n + 1) % 2].verify(t, EXPECTED, replay=True) for n, t in enumerate(sent))
        )
    by_token = dict(zip(sent, first, strict=True))
    assert tally([by_token[t] for t in fair]) == {("valid", None): len(fair)}
    attacked = tally([by_token[t] for t in flood])
    assert attacked == {
        ("valid", None): ATTACKERS * SHARE,
        ("unavailable", None): 3 * len(flood) // 4,
    }
    valid_twice = [t for t, a, b in zip(sent, first, again, strict=True) if a.valid and b.valid]
    assert valid_twice == []
    assert tally([b for a, b in zip(first, again, strict=True) if a.valid]) == {
        ("invalid", "SA-JTI-2"): ATTACKERS * SHARE + len(fair)
    }
    assert {r.replay for r in first} == {"process" if kind == "memory" else "shared"}
    full = next(r for r in first if r.outcome == "unavailable")
    assert "holds its share, 10 nonces (service_auth_issuer_nonces)" in (full.reason or "")


async def test_a_nonce_is_never_forgotten_before_its_token_expires() -> None:
    """Issue 66: the verifier's own memory store gave three quarters of its bound to decoded
    entries, and its LRU forgot a nonce after a few thousand others: the replay was valid
    again. One issuer's flood, at the bound's size, leaves every nonce held."""
    world = World()
    alice, attacker = world.add("alice.example.org"), world.add("attacker.example.org")
    token = world.service_token(alice, AUDIENCE)
    async with world.cached() as cached:
        verifier = ServiceAuthVerifier(cached, max_nonces=1000, issuer_nonces=1000)
        assert (await verifier.verify(token, Expected(AUDIENCE), replay=True)).valid
        flood = [world.service_token(attacker, AUDIENCE) for _ in range(998)]
        results = [await verifier.verify(t, Expected(AUDIENCE), replay=True) for t in flood]
        assert tally(results) == {("valid", None): 998}
        again = await verifier.verify(token, Expected(AUDIENCE), replay=True)
        assert (again.outcome, again.rule) == ("invalid", "SA-JTI-2")
        last = await verifier.verify(
            world.service_token(alice, AUDIENCE), Expected(AUDIENCE), replay=True
        )
        assert last.valid  # the bound's last place
        assert len(verifier.held) == 1000


async def test_nonces_in_a_shared_store_push_no_identity_out_of_the_memory_tier(
    tmp_path: Path,
) -> None:
    """Issue 66: a nonce added through the memory tier was kept there too, among the
    identities it pushed out. The daemon's nonces are the store below's alone."""
    world = World()
    dids = [world.add(f"user{n}.example.org") for n in range(5)]
    store = TieredStore(MemoryStore(), SqliteStore(tmp_path / "cache.db"))
    async with world.cached(store) as cached:
        verifier = ServiceAuthVerifier(cached, nonces=store.nonces())
        for did in dids:
            assert (
                await verifier.verify(world.service_token(did, AUDIENCE), Expected(AUDIENCE))
            ).valid
        held = await store.memory.count()
        for did in dids * 40:
            token = world.service_token(did, AUDIENCE)
            assert (await verifier.verify(token, Expected(AUDIENCE), replay=True)).valid
        assert await store.memory.count() == held and await store.count() == held


def test_an_issuers_share_is_its_did_or_its_did_webs_registrable_domain() -> None:
    plc = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
    assert share_of(plc) == plc
    for did in (
        "did:web:example.com",
        "did:web:feed.example.com",
        "did:web:a.b.c.EXAMPLE.com",
        "did:web:example.com%3A8443",
        "did:web:labeler.example.com:users:alice",
    ):
        assert share_of(did) == "did:web:example.com", did
    assert share_of("did:web:localhost%3A2584") == "did:web:localhost"
    assert share_of("did:web:example.org") != share_of("did:web:example.com")


async def test_a_receiver_may_keep_nonces_a_shorter_time() -> None:
    """SA-JTI-3: with the replay check on, a token may live at most the receiver's
    replay lifetime (it bounds how long a nonce is kept); without it, the hour of SA-TIME-2."""
    world = World()
    did = world.add("alice.example.org")
    async with world.cached() as cached:
        verifier = ServiceAuthVerifier(cached, replay_lifetime=120)
        hour = world.service_token(did, AUDIENCE, lifetime=3600)
        refused = await verifier.verify(hour, Expected(AUDIENCE), replay=True)
        assert (refused.outcome, refused.rule) == ("invalid", "SA-JTI-3")
        assert refused.reason == "a lifetime of 3600 s; the replay check keeps 120 s"
        assert (await verifier.verify(hour, Expected(AUDIENCE))).valid
        short = world.service_token(did, AUDIENCE, lifetime=120)
        assert (await verifier.verify(short, Expected(AUDIENCE), replay=True)).valid


async def test_the_metrics_name_the_issuers_at_their_share() -> None:
    world = World()
    loud, quiet = world.add("loud.example.org"), world.add("quiet.example.org")
    async with world.cached() as cached:
        verifier = ServiceAuthVerifier(cached, max_nonces=50, issuer_nonces=3)
        for _ in range(8):
            await verifier.verify(
                world.service_token(loud, AUDIENCE), Expected(AUDIENCE), replay=True
            )
        await verifier.verify(world.service_token(quiet, AUDIENCE), Expected(AUDIENCE), replay=True)
    registry = CollectorRegistry()
    registry.register(Collected(verifier))
    text = generate_latest(registry).decode()
    assert metrics.value(text, "atwhois_service_auth_issuers_at_share", issuer=loud) == 5
    assert (
        metrics.value(text, "atwhois_service_auth_issuers_at_share", issuer=quiet, missing=0) == 0
    )
    assert (
        metrics.value(text, "atwhois_service_auth_replays_not_ruled_out_total", full="issuer") == 5
    )
    assert metrics.value(text, "atwhois_service_auth_nonces_held") == 4
    assert metrics.value(text, "atwhois_service_auth_nonces_limit") == 50
