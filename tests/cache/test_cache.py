"""`CachedResolver` on the test network: levels, freshness, coalescing, failures."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from atwhois.cache import CachedResolver, MemoryStore, Policy, SqliteStore, Store
from atwhois.cache.entry import Entry
from atwhois.cache.packing import unpack
from atwhois.cache.policy import Lifetime
from atwhois.cache.stores.redis import RedisStore
from atwhois.resolver import Config, Resolver, Status
from atwhois.resolver.dns import DnsClient
from atwhois.resolver.fetch import Fetcher
from atwhois.resolver.response import Response
from devnet.forwarder import PlcStandIn
from devnet.network import DevnetState
from devnet.redis_server import REDIS_URL
from tests.support.clock import Clock
from tests.support.waiting import eventually


class CountingDns(DnsClient):
    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.txt_queries: Counter[str] = Counter()

    async def txt(self, name: str) -> list[list[bytes]]:
        self.txt_queries[name] += 1
        return await super().txt(name)


class CountingFetcher(Fetcher):
    def __init__(self, config: Config, dns: DnsClient, *, guarded: bool = True) -> None:
        super().__init__(config, dns, guarded=guarded)
        self.urls: Counter[str] = Counter()

    async def get(self, url: str, **kwargs: Any) -> Response:
        self.urls[url] += 1
        return await super().get(url, **kwargs)


def counting_resolver(
    config: Config,
) -> tuple[Resolver, CountingDns, CountingFetcher, CountingFetcher]:
    dns = CountingDns(config)
    web_fetcher, plc = CountingFetcher(config, dns), CountingFetcher(config, dns, guarded=False)
    return Resolver(config, dns=dns, web=web_fetcher, plc=plc), dns, web_fetcher, plc


STORES: dict[str, Callable[[Path, Clock], Store]] = {
    "memory": lambda _, clock: MemoryStore(clock=clock),
    "sqlite": lambda tmp, clock: SqliteStore(tmp / "cache.db", clock=clock),
    "redis": lambda _, __: RedisStore(REDIS_URL, prefix=f"atwhois-test-{uuid.uuid4().hex}:"),
}


def untimed(evidence: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {**method, "ms": None} if isinstance(method, dict) else method
        for name, method in evidence.items()
    }


@pytest.fixture(params=sorted(STORES))
async def cached(
    request: pytest.FixtureRequest, devnet_config: Config, tmp_path: Path
) -> AsyncIterator[tuple[CachedResolver, CountingDns, CountingFetcher, CountingFetcher]]:
    # Redis expires entries by the real clock; the fake clock stays within their lifetime.
    clock = Clock()
    resolver, dns, web_fetcher, plc = counting_resolver(devnet_config)
    async with CachedResolver(
        resolver, STORES[request.param](tmp_path, clock), clock=clock
    ) as cached:
        yield cached, dns, web_fetcher, plc


async def test_hits_at_both_levels(cached: Any, devnet: DevnetState) -> None:
    resolver, dns, _, plc = cached
    first = await resolver.lookup("alice.test")
    assert first.status is Status.VERIFIED and first.cache.state == "miss"
    again = await resolver.lookup("alice.test")
    assert again.cache.cached and again.cache.state == "fresh"
    # the same report, but the timings a kept binding drops (issue 69: `cache.compact`)
    assert untimed(again.to_json()["evidence"]) == untimed(first.to_json()["evidence"])
    methods = [m for m in again.to_json()["evidence"].values() if isinstance(m, dict)]
    assert methods and all(method["ms"] is None for method in methods)
    # The DID lookup reuses the document and the handle resolution: no new traffic.
    by_did = await resolver.lookup(devnet.did("alice"))
    assert by_did.status is Status.VERIFIED and by_did.cache.cached
    assert dns.txt_queries["_atproto.alice.test"] == 1
    assert sum(plc.urls.values()) == 1


async def test_entries_are_compact_earlier_forms_read_and_unreadable_ones_dropped(
    cached: Any,
) -> None:
    """A verified binding is kept in its compact form (`cache.compact`, issue 69); entries
    written before it (packed whole, plain deflate, a line of JSON) are still hits, read in
    place (a store migrates lazily, as its entries are written again); bytes that are none
    of these, or packed with another dictionary, or cut short, are dropped and resolved
    again."""
    resolver, dns, _, _ = cached
    await resolver.lookup("alice.test")
    stored = await resolver.store.get("h:alice.test")
    # the short kind of a handle naming one did:plc (3): its methods' codes in a byte
    assert stored is not None and stored.value[:1] == b"\x03" and len(stored.value) < 38
    entry = Entry.decode(stored.value, "h:alice.test")
    packed = entry.encode_whole()
    plain = unpack(packed)
    assert plain.startswith(b'{"part":') and packed[:1] == b"\x78"
    other = zlib.compressobj(1, zdict=b'"part":{"handle":"alice.test"')
    for earlier in (packed, zlib.compress(plain, 1), plain):
        await resolver.store.put("h:alice.test", earlier, stored.expires_at)
        again = await resolver.lookup("alice.test")
        assert again.status is Status.VERIFIED and again.cache.state == "fresh"
    for unreadable in (
        b"\x78\x01not deflate at all",
        b"{not json",
        other.compress(plain) + other.flush(),
        packed[: len(packed) // 2],
        stored.value[: len(stored.value) - 3],
        stored.value + b"\0",
    ):
        await resolver.store.put("h:alice.test", unreadable, stored.expires_at)
        before = dns.txt_queries["_atproto.alice.test"]
        resolved = await resolver.lookup("alice.test")
        assert resolved.status is Status.VERIFIED and resolved.cache.state == "miss"
        assert dns.txt_queries["_atproto.alice.test"] == before + 1


async def test_a_handle_lookup_reuses_a_cached_document(cached: Any, devnet: DevnetState) -> None:
    resolver, _, _, plc = cached
    await resolver.lookup(devnet.did("bob"))  # caches bob's document and bob.test
    old = await resolver.lookup("bob-old.test")  # new handle entry, cached document
    assert old.status is Status.HANDLE_MISMATCH and old.cache.state == "miss"
    assert plc.urls[f"{devnet.plc_url}/{devnet.did('bob')}"] == 1


async def test_purge_and_refresh_forget_both_levels(cached: Any, devnet: DevnetState) -> None:
    resolver, dns, _, plc = cached
    await resolver.lookup("alice.test")
    purged = await resolver.purge("alice.test")
    assert purged == ["h:alice.test", f"d:{devnet.did('alice')}"]
    assert (await resolver.lookup(devnet.did("alice"))).cache.state == "miss"
    refreshed = await resolver.refresh(devnet.did("alice"))
    assert refreshed.cache.state == "miss" and refreshed.status is Status.VERIFIED
    assert dns.txt_queries["_atproto.alice.test"] == 3
    assert plc.urls[f"{devnet.plc_url}/{devnet.did('alice')}"] == 3


async def test_negative_answers_are_cached_transient_ones_never(cached: Any) -> None:
    resolver, dns, _, _ = cached
    for _ in range(2):
        absent = await resolver.lookup("nobody.test")
    assert absent.status is Status.HANDLE_NOT_FOUND and absent.cache.cached
    assert dns.txt_queries["_atproto.nobody.test"] == 1
    for _ in range(2):
        failed = await resolver.lookup("blackhole.test")  # DNS timeout: never cached
    assert failed.status is Status.UNAVAILABLE and not failed.cache.cached
    assert dns.txt_queries["_atproto.blackhole.test"] == 2
    assert (await resolver.stats())["upstream_failures"] == 2


async def test_freshness_windows(devnet_config: Config, tmp_path: Path) -> None:
    clock = Clock()
    policy = Policy(
        verified=Lifetime(60, 600), unverified=Lifetime(10, 100), absent=Lifetime(5, 20)
    )
    resolver, _, _, _ = counting_resolver(devnet_config)
    async with CachedResolver(resolver, MemoryStore(clock=clock), policy, clock=clock) as c:
        await c.lookup("alice.test")
        await c.lookup("bob-old.test")  # unverified: shorter
        await c.lookup("nobody.test")  # absent: shortest
        clock.now += 30
        states = [
            (await c.lookup(q)).cache.state for q in ("alice.test", "bob-old.test", "nobody.test")
        ]
        assert states == ["fresh", "stale", "miss"]  # nobody.test expired at 20 s
        await eventually(lambda: c.inflight == 0)  # the background refresh of bob-old.test
        clock.now += 600  # past every maximum age
        assert (await c.lookup("alice.test")).cache.state == "miss"


async def test_stale_while_revalidate(devnet_config: Config) -> None:
    clock = Clock()
    resolver, dns, _, _ = counting_resolver(devnet_config)
    async with CachedResolver(resolver, MemoryStore(clock=clock), clock=clock) as c:
        await c.lookup("slow.test")  # DNS answers after 1.5 s (the HTTPS method is quick)
        clock.now += Policy().verified.fresh + 1
        stale = await asyncio.gather(*(c.lookup("slow.test") for _ in range(10)))
        assert {s.cache.state for s in stale} == {"stale"}
        # served at once: the one refresh for the ten is still under way (DNS takes 1.5 s)
        assert (await c.stats())["refreshing"] == 1
        while (await c.stats())["refreshing"]:
            await asyncio.sleep(0.05)
        assert (await c.lookup("slow.test")).cache.state == "fresh"
        assert dns.txt_queries["_atproto.slow.test"] == 2
        assert (await c.stats())["refreshes"] == 1


async def test_stale_if_error_when_the_plc_directory_is_down(devnet: DevnetState) -> None:
    clock = Clock()
    with PlcStandIn(devnet.plc_url) as stand_in:
        config = devnet.config(plc_url=stand_in.url)
        async with CachedResolver(Resolver(config), MemoryStore(clock=clock), clock=clock) as c:
            assert (await c.lookup(devnet.did("carol"))).status is Status.VERIFIED
            stand_in.set_fault("down")  # the directory is gone: connections are refused
            clock.now += Policy().verified.fresh + 1
            first = await c.lookup(devnet.did("carol"))
            assert first.status is Status.VERIFIED and first.cache.state == "stale"
            while (await c.stats())["refreshing"]:
                await asyncio.sleep(0.05)
            served = await c.lookup(devnet.did("carol"))
            assert served.status is Status.VERIFIED and served.cache.state == "stale"
            assert served.cache.refresh_error and "cannot connect" in served.cache.refresh_error
            report = served.to_json()
            assert report["evidence"]["refresh"]["outcome"] == "failed"
            assert "stale_upstream_failed" in report["warnings"]
            assert (await c.stats())["refreshes"] == 1  # no retry before retry_after
            clock.now = clock.now + Policy().verified.max_age  # past the hard maximum
            gone = await c.lookup(devnet.did("carol"))
            assert gone.status is Status.UNAVAILABLE and not gone.cache.cached


async def test_coalescing_one_upstream_resolution(devnet_config: Config) -> None:
    resolver, dns, web_fetcher, _ = counting_resolver(devnet_config)
    async with CachedResolver(resolver, MemoryStore()) as c:
        answers = await asyncio.gather(*(c.lookup("alice.test") for _ in range(100)))
    assert {a.status for a in answers} == {Status.VERIFIED}
    assert dns.txt_queries == Counter({"_atproto.alice.test": 1})
    assert web_fetcher.urls == Counter({"https://alice.test/.well-known/atproto-did": 1})
    assert (await c.stats())["coalesced"] == 99


async def test_cancellations_and_caller_deadlines_are_never_cached(
    devnet_config: Config,
) -> None:
    config = dataclasses.replace(devnet_config, dns_timeout=3.0)
    resolver, dns, _, _ = counting_resolver(config)
    async with CachedResolver(resolver, MemoryStore()) as c:
        caller = asyncio.create_task(c.lookup("slow.test"))
        await asyncio.sleep(0.1)
        caller.cancel()  # the caller goes away; the shared resolution does not
        with pytest.raises(asyncio.CancelledError):
            await caller
        hurried = await c.lookup("slow.test", timeout=0.2)  # joins it, gives up early
        assert hurried.status is Status.UNAVAILABLE and "deadline" in (hurried.error or "")
        assert not (hurried.cache and hurried.cache.cached)
        patient = await c.lookup("slow.test")
        assert patient.status is Status.VERIFIED and "dns_unavailable" not in patient.warnings
        assert dns.txt_queries["_atproto.slow.test"] == 1
        assert (await c.lookup("slow.test")).cache.state == "fresh"


async def test_sqlite_cache_survives_a_restart(devnet_config: Config, tmp_path: Path) -> None:
    path = tmp_path / "restart.db"
    async with CachedResolver(Resolver(devnet_config), SqliteStore(path)) as first:
        await first.lookup("grace.test")
    resolver, dns, _, plc = counting_resolver(devnet_config)
    async with CachedResolver(resolver, SqliteStore(path)) as second:
        again = await second.lookup("grace.test")
    assert again.status is Status.VERIFIED and again.cache.cached
    assert not dns.txt_queries and not plc.urls


async def test_two_instances_share_redis(devnet_config: Config, devnet: DevnetState) -> None:
    prefix = f"atwhois-test-{uuid.uuid4().hex}:"
    one_resolver, _, _, _ = counting_resolver(devnet_config)
    two_resolver, dns, _, plc = counting_resolver(devnet_config)
    async with (
        CachedResolver(one_resolver, RedisStore(REDIS_URL, prefix=prefix)) as one,
        CachedResolver(two_resolver, RedisStore(REDIS_URL, prefix=prefix)) as two,
    ):
        await one.lookup("henry.test")
        seen = await two.lookup(devnet.did("henry"))
        assert seen.status is Status.VERIFIED and seen.cache.cached
        assert not dns.txt_queries and not plc.urls
        await two.purge("henry.test")  # a purge by one daemon is seen by the other,

        async def purged() -> bool:  # once its notice has come through Redis
            return (await one.lookup("henry.test")).cache.state == "miss"

        await eventually(purged, timeout=5, what="the other daemon's purge was never seen")
        await one.purge("henry.test")


async def test_invalid_input_is_answered_without_touching_the_cache(
    devnet_config: Config,
) -> None:
    store = MemoryStore()
    async with CachedResolver(Resolver(devnet_config), store) as c:
        assert (await c.lookup("bad..handle")).status is Status.INVALID_INPUT
        assert await c.purge("bad..handle") == []
        assert await store.count() == 0


async def test_an_answer_is_as_fresh_as_its_stalest_part(
    devnet_config: Config, devnet: DevnetState
) -> None:
    clock = Clock()
    policy = Policy(verified=Lifetime(100, 1000), unverified=Lifetime(100, 1000))
    resolver, _, _, plc = counting_resolver(devnet_config)
    async with CachedResolver(resolver, MemoryStore(clock=clock), policy, clock=clock) as c:
        await c.lookup(devnet.did("bob"))  # the document: fresh until t=100
        clock.now += 60
        old = await c.lookup("bob-old.test")  # a new handle part, fresh until t=160
        assert old.cache.state == "miss" and plc.urls[f"{devnet.plc_url}/{devnet.did('bob')}"] == 1
        assert round(old.cache.fresh_for_s) == 40  # the document's, not the new part's 100
        assert old.cache.age_s == pytest.approx(60)
        clock.now += 41
        assert (await c.lookup("bob-old.test")).cache.state == "stale"


async def test_a_miss_resolves_a_stale_part_again_rather_than_reuse_it(
    devnet_config: Config, devnet: DevnetState
) -> None:
    clock = Clock()
    policy = Policy(unverified=Lifetime(10, 1000))
    resolver, _, _, plc = counting_resolver(devnet_config)
    async with CachedResolver(resolver, MemoryStore(clock=clock), policy, clock=clock) as c:
        await c.lookup("bob-old.test")  # unverified: the document is fresh for 10 s
        clock.now += 20
        await c.lookup("bob.test")  # a miss: bob's document is stale, so it is fetched again
        assert plc.urls[f"{devnet.plc_url}/{devnet.did('bob')}"] == 2


async def test_refresh_resolves_every_part_afresh(
    devnet_config: Config, devnet: DevnetState
) -> None:
    resolver, dns, _, plc = counting_resolver(devnet_config)
    async with CachedResolver(resolver, MemoryStore()) as c:
        await c.lookup("alice.test")
        refreshed = await c.refresh("alice.test")
        assert refreshed.status is Status.VERIFIED and refreshed.cache.state == "miss"
        assert dns.txt_queries["_atproto.alice.test"] == 2
        assert plc.urls[f"{devnet.plc_url}/{devnet.did('alice')}"] == 2
        assert (await c.lookup("alice.test")).cache.state == "fresh"
