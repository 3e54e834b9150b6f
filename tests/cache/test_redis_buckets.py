"""How the Redis store keeps its entries (issue 69): as fields of hashed buckets kept compact
(listpacks), each field's expiry in its value, a bucket expiring with its latest field, a
paced sweep of the expired fields of live buckets, a bucket past what Redis keeps compact
still correct; and the move, in place, from the previous version's key per entry. On Redis
servers of the tests' own (set as deployments set them), or on the machine's shared one."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from atwhois.cache.stores import redis as redis_store
from atwhois.cache.stores import redis_buckets
from atwhois.cache.stores.redis import RedisStore
from devnet.redis_server import RedisServer
from tests.support.stores import walk_all
from tests.support.waiting import eventually


def _prefix() -> str:
    return f"atwhois-test-{uuid.uuid4().hex}:"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of the test's own, set as the deployments set theirs (`LISTPACK`)."""
    with RedisServer(tmp_path) as running:
        yield running


@pytest.fixture
async def raw(server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(server.url)
    yield client
    await client.aclose()


async def _encodings(raw: Redis, store: RedisStore) -> set[bytes]:
    return {
        await raw.object("ENCODING", key) async for key in raw.scan_iter(match=store.prefix + "#*")
    }


async def test_an_expired_field_is_absent_while_its_bucket_lives(
    server: RedisServer, raw: Redis
) -> None:
    """Redis expires keys, not fields: the read says a field past its time is absent, while
    the bucket and its other fields live on."""
    store = RedisStore(server.url, prefix=_prefix(), buckets=1)
    try:
        await store.put("h:short.test", b"soon gone", time.time() + 0.3)
        await store.put("h:long.test", b"stays", time.time() + 60)
        found = await store.get("h:short.test")
        assert found is not None and found.value == b"soon gone"
        await asyncio.sleep(0.4)
        assert await store.get("h:short.test") is None
        stayed = await store.get("h:long.test")
        assert stayed is not None and stayed.value == b"stays"
        assert await raw.hexists(store.prefix + "#0", "h:short.test")  # held, yet absent
    finally:
        await store.close()


async def test_a_bucket_expires_with_its_latest_field(
    server: RedisServer, raw: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`PEXPIREAT … GT`: a field expiring sooner does not bring its bucket's time forward;
    once every field's time passed, the bucket is gone."""
    monkeypatch.setattr(redis_buckets, "_BUCKET_EXPIRY_MARGIN_MS", 0)
    store = RedisStore(server.url, prefix=_prefix(), buckets=1)
    bucket, now = store.prefix + "#0", time.time()
    try:
        await store.put("h:a.test", b"a", now + 0.6)
        await store.put("h:b.test", b"b", now + 0.3)
        assert abs(await raw.pexpiretime(bucket) - (now + 0.6) * 1000) < 2
        await asyncio.sleep(0.4)
        assert await raw.exists(bucket)  # h:a.test lives on in it
        await eventually(lambda: _gone(raw, bucket), timeout=5)
    finally:
        await store.close()


async def _gone(raw: Redis, key: str) -> bool:
    return not await raw.exists(key)


async def test_the_sweep_deletes_the_expired_fields_of_live_buckets(
    server: RedisServer, raw: Redis
) -> None:
    """A bucket every `_SWEEP_EVERY` writes: its expired fields deleted, its live ones kept
    (nothing reads the expired one again: only the sweep deletes it)."""
    store = RedisStore(server.url, prefix=_prefix(), buckets=1)
    bucket = store.prefix + "#0"
    try:
        await store.put("h:short.test", b"x", time.time() + 0.2)
        await store.put("h:long.test", b"y", time.time() + 60)
        await asyncio.sleep(0.3)
        for i in range(redis_store._SWEEP_EVERY):
            await store.put(f"h:{i}.test", b"z", time.time() + 60)
        assert not await raw.hexists(bucket, "h:short.test")
        assert await raw.hlen(bucket) == redis_store._SWEEP_EVERY + 1
        assert await raw.hexists(bucket, "h:long.test")
    finally:
        await store.close()


async def test_buckets_are_listpacks_once_filled(
    server: RedisServer, raw: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Entries of a DID document's size (~90 B with their expiry), ~125 to a bucket: every
    bucket a listpack, on a server set as the deployments set theirs (not on Redis's
    default: its 64 B keep such buckets as hash tables), and no warning said."""
    store = RedisStore(server.url, prefix=_prefix(), buckets=16)
    try:
        with caplog.at_level(logging.WARNING, logger="atwhois.cache"):
            for i in range(2000):
                await store.put(f"d:did:plc:{i:024d}", bytes(84), time.time() + 600)
        assert await _encodings(raw, store) == {b"listpack"}
        assert len([key async for key in raw.scan_iter(match=store.prefix + "#*")]) == 16
        assert not caplog.records
    finally:
        await store.close()


async def test_a_server_keeping_buckets_uncompact_is_told(
    server: RedisServer, raw: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis's default (64 B): a warning at start, naming the setting to change."""
    await raw.config_set("hash-max-listpack-value", 64)
    store = RedisStore(server.url, prefix=_prefix(), buckets=4)
    try:
        with caplog.at_level(logging.WARNING, logger="atwhois.cache"):
            await store.put("h:a.test", b"a", time.time() + 60)
        assert ["hash-max-listpack-value 1024" in r.getMessage() for r in caplog.records] == [True]
    finally:
        await store.close()


async def test_a_bucket_past_what_redis_keeps_compact_is_still_correct(
    server: RedisServer, raw: Redis
) -> None:
    """More fields than `hash-max-listpack-entries` (64 here) and a value past
    `hash-max-listpack-value`: the bucket becomes a hash table, and every read, count, scan
    and walk still finds each entry once (HSCAN then gives it a part at a time)."""
    await raw.config_set("hash-max-listpack-entries", 64)
    store = RedisStore(server.url, prefix=_prefix(), buckets=2)
    held = {f"d:did:plc:{i:024d}": b"v%d" % i for i in range(3000)}
    held["d:did:web:big.test"] = bytes(300)
    try:
        for key, value in held.items():
            await store.put(key, value, time.time() + 600)
        await store.put("h:other.test", b"h", time.time() + 600)
        assert await _encodings(raw, store) == {b"hashtable"}
        for key in [
            "d:did:plc:" + "0" * 24,
            "d:did:plc:" + "0" * 20 + "2999",
            "d:did:web:big.test",
        ]:
            found = await store.get(key)
            assert found is not None and found.value == held[key]
        assert await store.count() == len(held) + 1
        assert dict(await store.scan("d:", 10_000)) == held
        assert sorted(await walk_all(store, "d:", 500)) == sorted(held)
    finally:
        await store.close()


async def test_count_scan_and_walk_go_over_every_bucket(server: RedisServer) -> None:
    """Entries spread over buckets: counted once each, the scan finds a prefix's unexpired
    ones, a walk's pages hold about `limit` of the prefix's keys each, and every one in the
    end; a position resumes where it left (the pages meet no key twice)."""
    store = RedisStore(server.url, prefix=_prefix(), buckets=64)
    dids = {f"d:did:plc:{i:024d}" for i in range(300)}
    try:
        for key in sorted(dids) + [f"h:{i}.test" for i in range(50)]:
            await store.put(key, b"v", time.time() + 600)
        await store.put("d:did:plc:expired", b"old", time.time() + 0.1)
        await asyncio.sleep(0.2)
        assert await store.count() == 351  # an expired entry may be counted
        assert {key for key, _ in await store.scan("d:", 1000)} == dids
        assert len(await store.scan("d:", 20)) == 20
        seen: list[str] = []
        pages, position = 0, ""
        while True:
            page, position = await store.walk("d:", 40, position)
            pages += 1
            seen += page
            assert len(page) < 40 + 20  # its limit, and what one bucket holds more
            if not position:
                break
        assert len(seen) == len(set(seen)) and set(seen) - {"d:did:plc:expired"} == dids
        assert pages >= 301 // 60
    finally:
        await store.close()


async def test_the_bucket_count_is_the_caches_own(server: RedisServer, raw: Redis) -> None:
    """Set when the cache is made: a daemon set otherwise takes it, or it would look for
    entries in other buckets than the fleet writes them to."""
    prefix = _prefix()
    first, second = RedisStore(server.url, prefix=prefix, buckets=8), None
    try:
        await first.put("h:a.test", b"a", time.time() + 60)
        second = RedisStore(server.url, prefix=prefix, buckets=1000)
        found = await second.get("h:a.test")
        assert found is not None and found.value == b"a" and second.buckets == 8
        assert await raw.get(prefix + "{layout}") == b"8"
    finally:
        await first.close()
        if second is not None:
            await second.close()


# --- the move from a key per entry -------------------------------------------------------


async def test_a_cache_of_a_key_per_entry_is_moved_into_buckets_in_place(
    server: RedisServer, raw: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The previous version's keys (`SET PREFIX+KEY VALUE PXAT`): read as they are while two
    daemons start on them, one of which moves them into buckets, a step at a time; every
    entry read throughout, none lost, none brought back once deleted, none older than a
    write made meanwhile; the nonces and marks left alone; then reads stop looking at old
    keys."""
    monkeypatch.setattr(redis_buckets, "_MOVE_BATCH", 40)
    monkeypatch.setattr(redis_buckets, "_MOVE_PAUSE", 0.1)
    monkeypatch.setattr(redis_buckets, "_MOVE_LOOK", 0.2)
    prefix, later = _prefix(), int((time.time() + 600) * 1000)
    held = {f"d:did:plc:{i:024d}": b"doc %d" % i for i in range(400)}
    for key, value in held.items():
        await raw.set(prefix + key, value, pxat=later)
    await raw.zadd(prefix + "{nonce:did:web:a.test}", {"n1": later})
    await raw.set(prefix + "{failover:abc}", b"x", px=600_000)
    one = RedisStore(server.url, prefix=prefix, buckets=16)
    two = RedisStore(server.url, prefix=prefix, buckets=16)
    try:
        first = await one.get("d:did:plc:" + "0" * 24)  # the move starts
        assert first is not None and first.value == b"doc 0"
        assert abs(first.expires_at * 1000 - later) < 2
        await two.get("d:did:plc:" + "0" * 24)
        deleted, rewritten = "d:did:plc:" + "0" * 21 + "399", "d:did:plc:" + "0" * 21 + "398"
        await one.delete([deleted])
        await two.put(rewritten, b"new", time.time() + 600)
        del held[deleted]
        held[rewritten] = b"new"
        assert one.moving and two.moving
        assert set(await walk_all(two, "d:", 50)) == set(held)  # a walk during the move
        reads, deadline = 0, time.monotonic() + 30
        while one.moving or two.moving:  # read throughout the move, by both
            for store in (one, two):
                for key, value in held.items():
                    found = await store.get(key)
                    assert found is not None and found.value == value, key
                assert await store.get(deleted) is None
                reads += 1
            assert time.monotonic() < deadline, "the move did not end"
        assert reads >= 4  # the move took steps, read in between
        # one daemon moved them all (the deleted one too, if it went first)
        assert min(one.moved, two.moved) == 0 and max(one.moved, two.moved) in (399, 400)
        assert [k async for k in raw.scan_iter(match=prefix + "d:*")] == []
        assert await raw.exists(prefix + "{nonce:did:web:a.test}", prefix + "{failover:abc}") == 2
        assert not await raw.exists(prefix + "{moving}")
        for store in (one, two):
            assert dict(await store.scan("d:", 1000)) == held
            assert await store.count() == len(held)
            found = await store.get("d:did:plc:" + "0" * 24)
            assert found is not None and abs(found.expires_at * 1000 - later) < 2
        # the old keys are no longer looked at: one written now is not read
        await raw.set(prefix + "d:did:plc:late", b"old form", pxat=later)
        assert await one.get("d:did:plc:late") is None
    finally:
        await one.close()
        await two.close()


async def test_a_new_cache_ends_its_move_at_once(server: RedisServer, raw: Redis) -> None:
    """Nothing to move: the first daemon's pass over no old keys ends the move, and the
    reads of old keys with it."""
    store = RedisStore(server.url, prefix=_prefix(), buckets=4)
    try:
        await store.put("h:a.test", b"a", time.time() + 60)
        await eventually(lambda: not store.moving, timeout=5)
        assert not await raw.exists(store.prefix + "{moving}") and store.moved == 0
    finally:
        await store.close()
