"""The cache on a Redis Cluster (`redis-cluster://`, `cache.stores.redis_cluster`):
its URL (no database number), a change one daemon's tier makes heard by another's whatever
node each subscribed to, and a master's failover: the memory tiers answer through it, and
once the masters changed one daemon of the fleet is told to re-verify what is held. The
behaviour every store shares runs on the cluster too (tests/cache/test_stores.py,
test_nonce_stores.py)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from atwhois.cache.stores import MemoryStore, TieredStore, open_store, redis_buckets
from atwhois.cache.stores.redis_cluster import BadClusterUrl, RedisClusterStore, cluster_nodes
from devnet.redis_cluster import RedisCluster
from tests.support.stores import walk_all
from tests.support.waiting import eventually


def _prefix() -> str:
    return f"atwhois-test-{uuid.uuid4().hex}:"


def test_a_cluster_url_names_its_nodes_and_its_credentials() -> None:
    nodes, settings = cluster_nodes("redis-cluster://10.0.0.1:7000,10.0.0.2:7001")
    assert nodes == [("10.0.0.1", 7000), ("10.0.0.2", 7001)] and settings == {"ssl": False}
    nodes, settings = cluster_nodes("rediss-cluster://fleet:s%40cret@[::1]:7000/")
    assert nodes == [("::1", 7000)]
    assert settings == {"ssl": True, "username": "fleet", "password": "s@cret"}


@pytest.mark.parametrize(
    "url", ["redis-cluster://127.0.0.1:7000/0", "redis-cluster://127.0.0.1:7000,127.0.0.1:7001/3"]
)
def test_a_cluster_url_with_a_database_number_is_refused(url: str) -> None:
    """A cluster has database 0 only: a number is a configuration to fix, said at once."""
    with pytest.raises(BadClusterUrl, match="no database number"):
        open_store(url)
    with pytest.raises(BadClusterUrl, match="is not HOST:PORT"):
        open_store("redis-cluster://127.0.0.1")


async def test_open_store_puts_a_memory_tier_before_the_cluster(
    redis_cluster: RedisCluster,
) -> None:
    tier = open_store(f"{redis_cluster.url}?prefix=x{uuid.uuid4().hex}:")
    try:
        assert isinstance(tier, TieredStore) and isinstance(tier.below, RedisClusterStore)
        await tier.put("h:alice.test", b"v", time.time() + 60)
        assert await tier.below.get("h:alice.test") is not None
        await tier.delete(["h:alice.test"])
    finally:
        await tier.close()


async def _following(tier: TieredStore) -> bool:
    await tier.get("h:probe.test")  # a read starts the tier's watch
    return tier.following


async def _value(tier: TieredStore, key: str) -> bytes | None:
    found = await tier.get(key)
    return found.value if found is not None else None


async def test_a_change_by_one_daemon_reaches_the_others_memory(
    redis_cluster: RedisCluster,
) -> None:
    """Keys on every master (many handles), notices by plain PUBLISH: each tier hears the
    other's changes on the node it subscribed to."""
    prefix = _prefix()
    one = TieredStore(MemoryStore(), RedisClusterStore(redis_cluster.url, prefix=prefix))
    two = TieredStore(MemoryStore(), RedisClusterStore(redis_cluster.url, prefix=prefix))
    handles = [f"h:user{i}.test" for i in range(30)]  # over the three masters' slots
    try:
        for key in handles:
            await one.put(key, b"old", time.time() + 60)
            found = await two.get(key)
            assert found is not None and found.value == b"old"  # in two's memory now
        await eventually(lambda: _following(two))
        for key in handles:
            await one.put(key, b"new", time.time() + 60)

        async def all_new() -> bool:
            return [await _value(two, k) for k in handles] == [b"new"] * len(handles)

        await eventually(all_new)  # following, two answers from memory but for the notices
        await one.delete(handles)

        async def all_gone() -> bool:
            return [await _value(two, k) for k in handles] == [None] * len(handles)

        await eventually(all_gone)
    finally:
        await one.close()
        await two.close()


async def test_through_a_failover_memory_answers_and_one_daemon_re_verifies(
    tmp_path: Path,
) -> None:
    """A master killed: each tier answers what it holds from memory (never absent) while
    its shard is away; once a replica took over, both follow again, read again what they
    hold, and the fleet's re-verification is owed once (to one daemon), not once each."""
    with RedisCluster(tmp_path) as cluster:
        prefix = _prefix()
        tiers = [
            TieredStore(MemoryStore(), RedisClusterStore(cluster.url, prefix=prefix))
            for _ in range(2)
        ]
        gaps = [0, 0]
        for i, tier in enumerate(tiers):
            tier.gaps.append(lambda i=i: gaps.__setitem__(i, gaps[i] + 1))
        handles = [f"h:user{i}.test" for i in range(30)]
        try:
            for key in handles:
                await tiers[0].put(key, key.encode(), time.time() + 600)
            for tier in tiers:
                await eventually(lambda tier=tier: _following(tier))
                for key in handles:
                    assert await tier.get(key) is not None
            killed = await asyncio.to_thread(cluster.kill_master)
            failed_over = asyncio.ensure_future(
                asyncio.to_thread(cluster.wait_for_failover, killed)
            )
            while not failed_over.done():  # every read answered, from memory where it must
                for tier in tiers:
                    for key in handles:
                        found = await tier.get(key)
                        assert found is not None and found.value == key.encode()
                await asyncio.sleep(0.05)
            await failed_over

            async def followed_again() -> bool:
                return sum(gaps) >= 1 and all([await _following(t) for t in tiers])

            await eventually(followed_again, timeout=30)
            await asyncio.sleep(2)  # time for a second daemon's pass, were it owed one
            assert sorted(gaps) == [0, 1]
            for tier in tiers:  # read again from the cluster: the replica had them
                for key in handles:
                    found = await tier.get(key)
                    assert found is not None and found.value == key.encode()
        finally:
            for tier in tiers:
                await tier.close()


async def test_a_cluster_of_a_key_per_entry_is_moved_into_buckets(
    redis_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The previous version's keys, on every master: read as they are while one daemon
    moves them, master by master, into buckets (listpacks on nodes set as deployments set
    them); then every entry is in a bucket, and the walk finds them there."""
    monkeypatch.setattr(redis_buckets, "_MOVE_BATCH", 30)
    monkeypatch.setattr(redis_buckets, "_MOVE_PAUSE", 0.05)
    prefix, later = _prefix(), int((time.time() + 600) * 1000)
    store = RedisClusterStore(redis_cluster.url, prefix=prefix, buckets=32)
    held = {f"d:did:plc:{i:024d}": b"doc %d" % i for i in range(300)}
    try:
        for key, value in held.items():
            await store._redis.set(prefix + key, value, pxat=later)
        reads = 0
        while reads == 0 or store.moving:
            for key, value in held.items():
                found = await store.get(key)
                assert found is not None and found.value == value, key
            reads += 1
            assert reads < 100, "the move did not end"
        assert store.moved == len(held)
        old = [k async for k in store._redis.scan_iter(match=prefix + "d:*", _type="string")]
        assert old == []
        buckets = [k async for k in store._redis.scan_iter(match=prefix + "#*")]
        assert len(buckets) == 32
        assert {await store._redis.object("ENCODING", key) for key in buckets} == {b"listpack"}
        assert sorted(await walk_all(store, "d:", 40)) == sorted(held)
    finally:
        async for key in store._redis.scan_iter(match=prefix + "*"):
            await store._redis.delete(key)
        await store.close()
