"""Where the replay check's nonces are kept (SA-JTI-2, `cache.stores.nonces`), for every
store: a nonce is recorded once and refused after, a share holds at most its limit, a nonce
lives until its token expires and no longer, the nonces are apart from the cache's entries
(no memory tier holds them: they pushed identities out, issue 66), processes sharing a
SQLite file or a Redis server record each nonce once and each share to its limit (several
processes at once), and a store that cannot be asked says so."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from atwhois.cache.stores import (
    MemoryStore,
    NoncesUnavailable,
    SqliteStore,
    Store,
    TieredStore,
)
from atwhois.cache.stores.redis import RedisStore
from atwhois.cache.stores.redis_cluster import RedisClusterStore
from devnet.pds import free_port
from devnet.redis_server import REDIS_URL


def _prefix() -> str:
    return f"atwhois-test-{uuid.uuid4().hex}:"


STORES: dict[str, Callable[[Path], Store]] = {
    "memory": lambda _: MemoryStore(),
    "sqlite": lambda tmp: SqliteStore(tmp / "cache.db"),
    "redis": lambda _: RedisStore(REDIS_URL, prefix=_prefix()),
    "memory+sqlite": lambda tmp: TieredStore(MemoryStore(), SqliteStore(tmp / "tier.db")),
    "memory+redis": lambda _: TieredStore(MemoryStore(), RedisStore(REDIS_URL, prefix=_prefix())),
}


@pytest.fixture(params=[*sorted(STORES), "memory+redis-cluster"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param.endswith("cluster"):  # a share's nonces on one node: `{nonce:SHARE}`
        url = request.getfixturevalue("redis_cluster").url
        made: Store = TieredStore(MemoryStore(), RedisClusterStore(url, prefix=_prefix()))
    else:
        made = STORES[request.param](tmp_path)
    yield made
    await made.close()


async def test_a_nonce_is_recorded_once_and_a_share_holds_its_limit(store: Store) -> None:
    nonces, now = store.nonces(), time.time()
    assert await nonces.claim("did:plc:a", "n1", now + 60, 2, now) == "first"
    assert await nonces.claim("did:plc:a", "n1", now + 60, 2, now) == "seen"
    assert await nonces.claim("did:plc:a", "n2", now + 30, 2, now) == "first"
    assert await nonces.claim("did:plc:a", "n3", now + 60, 2, now) == "share"  # full
    assert await nonces.claim("did:plc:a", "n3", now + 60, 2, now) == "share"  # not recorded
    assert await nonces.claim("did:plc:b", "n1", now + 60, 2, now) == "first"  # its own share
    # n2's last moment is its expiry: then its place is free, and n1 is held still
    assert await nonces.claim("did:plc:a", "n3", now + 60, 2, now + 30) == "first"
    assert await nonces.claim("did:plc:a", "n1", now + 60, 2, now + 30) == "seen"
    assert await nonces.claim("did:plc:a", "n2", now + 90, 2, now + 60) == "first"  # anew


async def test_the_nonces_are_apart_from_the_entries(store: Store) -> None:
    """Thousands of nonces: not one cache entry, and nothing in a memory tier."""
    nonces, now = store.nonces(), time.time()
    await store.put("d:did:plc:alice", b"an identity", now + 600)
    for n in range(2000):
        assert await nonces.claim(f"did:plc:{n % 20}", f"n{n}", now + 60, 100, now) == "first"
    assert await store.count() == 1
    if isinstance(store, TieredStore):
        assert await store.memory.count() == 1 and store.memory.slot("d:did:plc:alice")
    assert nonces.shared == (not isinstance(store, MemoryStore))


def _claims_in_a_process(make: str, target: str, results: Any, start: Any) -> None:
    """One of several processes claiming the same 50 nonces of one share (limit 30)."""

    async def run() -> list[str]:
        store: Store = (
            SqliteStore(Path(target)) if make == "sqlite" else RedisStore(REDIS_URL, prefix=target)
        )
        nonces, now, made = store.nonces(), time.time(), []
        start.wait()
        for n in range(50):
            try:
                made.append(f"{n}:{await nonces.claim('did:plc:x', str(n), now + 60, 30, now)}")
            except NoncesUnavailable:
                made.append(f"{n}:unavailable")
        await store.close()
        return made

    results.put(asyncio.run(run()))


@pytest.mark.parametrize("make", ["sqlite", "redis"])
def test_processes_sharing_a_store_record_each_nonce_once_and_a_share_to_its_limit(
    make: str, tmp_path: Path
) -> None:
    """Four processes claim the same nonces at once: each nonce is first to one of them,
    and the share's limit holds across them (SQLite: a transaction; Redis: one script)."""
    forked = multiprocessing.get_context("fork")
    target = str(tmp_path / "shared.db") if make == "sqlite" else _prefix()
    if make == "sqlite":
        SqliteStore(Path(target))  # the schema, before the race
    results, start = forked.Queue(), forked.Event()
    workers = [
        forked.Process(target=_claims_in_a_process, args=(make, target, results, start))
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    start.set()
    claims = [claim for _ in workers for claim in results.get(timeout=60)]
    for worker in workers:
        worker.join(60)
    firsts = [claim.split(":")[0] for claim in claims if claim.endswith(":first")]
    unavailable = sum(claim.endswith(":unavailable") for claim in claims)
    assert len(firsts) == len(set(firsts))  # no nonce recorded twice
    assert len(firsts) == 30 or (len(firsts) < 30 and unavailable)
    assert unavailable < len(claims) // 2


async def test_a_store_that_cannot_be_asked_says_so(tmp_path: Path) -> None:
    """Whether a nonce was seen is then unknown: `NoncesUnavailable`, never a guess."""
    now = time.time()
    store = SqliteStore(tmp_path / "cache.db")
    locker = sqlite3.connect(tmp_path / "cache.db", isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # another process writing, past the busy timeout
    with pytest.raises(NoncesUnavailable, match="SQLite: database is locked"):
        await store.nonces().claim("did:plc:a", "n", now + 60, 10, now)
    locker.execute("ROLLBACK")
    assert await store.nonces().claim("did:plc:a", "n", now + 60, 10, now) == "first"
    await store.close()
    away = RedisStore(f"redis://127.0.0.1:{free_port()}/0", prefix=_prefix())
    with pytest.raises(NoncesUnavailable, match="Redis: "):
        await away.nonces().claim("did:plc:a", "n", now + 60, 10, now)
    await away.close()


async def test_redis_keeps_a_share_under_one_hash_tagged_key_that_expires_with_it() -> None:
    """A share is one key, `{nonce:SHARE}` (a Redis Cluster would hold it on one node), which
    Redis drops once its last nonce has expired: nothing is left behind."""
    store = RedisStore(REDIS_URL, prefix=_prefix())
    nonces, now = store.nonces(), time.time()
    try:
        await nonces.claim("did:web:example.com", "n1", now + 60, 10, now)
        await nonces.claim("did:web:example.com", "n2", now + 120, 10, now)
        keys = [k.decode() async for k in store._redis.scan_iter(match=store.prefix + "*")]
        assert keys == [store.prefix + "{nonce:did:web:example.com}"]
        expires = await store._redis.pexpiretime(keys[0])
        assert abs(expires - (now + 120) * 1000) < 2
    finally:
        await store._redis.delete(store.prefix + "{nonce:did:web:example.com}")
        await store.close()
