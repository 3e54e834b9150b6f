"""One behaviour suite for every store (memory, SQLite, Redis, and the memory tier in front
of SQLite), against real SQLite files and the real Redis server on 127.0.0.1:6379."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from cache.stores import MemoryStore, RedisStore, SqliteStore, Store, TieredStore, open_store
from cache.stores.sqlite import SCHEMA_VERSION

REDIS_URL = "redis://127.0.0.1:6379/0"

Factory = Callable[[Path], Store]
FACTORIES: dict[str, Factory] = {
    "memory": lambda _: MemoryStore(),
    "sqlite": lambda tmp: SqliteStore(tmp / "cache.db"),
    "redis": lambda _: RedisStore(REDIS_URL, prefix=f"atwhois-test-{uuid.uuid4().hex}:"),
    "memory+sqlite": lambda tmp: TieredStore(MemoryStore(), SqliteStore(tmp / "tier.db")),
}


@pytest.fixture(params=sorted(FACTORIES))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    made = FACTORIES[request.param](tmp_path)
    yield made
    if isinstance(made, RedisStore):
        await made.delete(
            [
                k.decode().removeprefix(made.prefix)
                async for k in made._redis.scan_iter(match=made.prefix + "*")
            ]
        )
    await made.close()


async def test_put_get_overwrite_delete(store: Store) -> None:
    later = time.time() + 60
    assert await store.get("h:alice.test") is None
    await store.put("h:alice.test", b"one", later)
    assert await store.get("h:alice.test") == b"one"
    await store.put("h:alice.test", b"two", later)
    assert await store.get("h:alice.test") == b"two"
    await store.put("d:did:plc:x", b"\x00\xffbinary", later)
    assert await store.get("d:did:plc:x") == b"\x00\xffbinary"
    assert await store.count() == 2
    await store.delete(["h:alice.test", "h:never-there.test"])
    assert await store.get("h:alice.test") is None
    assert await store.count() == 1


async def test_entries_expire(store: Store) -> None:
    await store.put("h:short.test", b"soon gone", time.time() + 0.3)
    await store.put("h:long.test", b"stays", time.time() + 60)
    assert await store.get("h:short.test") == b"soon gone"
    await asyncio.sleep(0.45)
    assert await store.get("h:short.test") is None
    assert await store.get("h:long.test") == b"stays"


async def test_keys_are_opaque_strings(store: Store) -> None:
    odd = "h:" + "x" * 240 + ".test"
    await store.put(odd, b"v", time.time() + 60)
    await store.put("d:did:web:localhost%3A8080", b"w", time.time() + 60)
    assert await store.get(odd) == b"v"
    assert await store.get("d:did:web:localhost%3A8080") == b"w"


async def test_memory_store_is_bounded_by_entries_and_bytes() -> None:
    store = MemoryStore(max_entries=3, max_bytes=10_000)
    for i in range(5):
        await store.put(f"k{i}", b"x", time.time() + 60)
    assert await store.count() == 3 and await store.get("k0") is None
    await store.get("k2")  # recently used survives
    await store.put("k5", b"x", time.time() + 60)
    assert await store.get("k2") == b"x" and await store.get("k3") is None
    small = MemoryStore(max_entries=100, max_bytes=1000)
    for i in range(10):
        await small.put(f"k{i}", b"y" * 300, time.time() + 60)
    assert small.bytes <= 1000 and await small.count() == 3


async def test_sqlite_survives_reopening_and_versions_its_schema(tmp_path: Path) -> None:
    path = tmp_path / "persist.db"
    first = SqliteStore(path)
    await first.put("h:alice.test", b"kept", time.time() + 60)
    await first.close()
    second = SqliteStore(path)
    assert await second.get("h:alice.test") == b"kept"
    version = second._db.execute("SELECT value FROM meta WHERE name='schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),)
    # A cache written by another schema version is dropped, not misread.
    second._db.execute("UPDATE meta SET value='0' WHERE name='schema_version'")
    await second.close()
    third = SqliteStore(path)
    assert await third.get("h:alice.test") is None
    await third.close()


async def test_redis_prefixes_keep_instances_apart() -> None:
    one = RedisStore(REDIS_URL, prefix=f"atwhois-test-{uuid.uuid4().hex}:")
    two = RedisStore(REDIS_URL, prefix=f"atwhois-test-{uuid.uuid4().hex}:")
    try:
        await one.put("h:alice.test", b"mine", time.time() + 60)
        assert await two.get("h:alice.test") is None and await one.count() == 1
    finally:
        await one.delete(["h:alice.test"])
        await one.close()
        await two.close()


def test_open_store_urls(tmp_path: Path) -> None:
    assert isinstance(open_store("memory:"), MemoryStore)
    tiered = open_store(f"sqlite://{tmp_path}/a.db")
    assert isinstance(tiered, TieredStore) and isinstance(tiered.below, SqliteStore)
    assert isinstance(open_store(str(tmp_path / "b.db")), TieredStore)
    redis = open_store("redis://127.0.0.1:6379/0?prefix=x:")
    assert isinstance(redis, RedisStore) and redis.prefix == "x:"
    assert isinstance(open_store("redis://127.0.0.1:6379/0?memory=1"), TieredStore)
