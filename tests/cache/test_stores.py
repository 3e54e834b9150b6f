"""One behaviour suite for every store (memory, SQLite, Redis, and the memory tier in front
of SQLite and Redis), against real SQLite files and real Redis servers; then what the memory
tier promises: a bound in bytes, other processes' changes followed, a store outage
survived."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from atwhois.cache.compact import plc_did
from atwhois.cache.stores import (
    MemoryStore,
    SqliteStore,
    Store,
    Stored,
    StoreUnavailable,
    TieredStore,
    open_store,
)
from atwhois.cache.stores.redis import RedisStore
from atwhois.cache.stores.redis_cluster import RedisClusterStore
from atwhois.cache.stores.sqlite import SCHEMA_VERSION
from atwhois.cache.stores.sqlite import _stored as sqlite_key
from devnet.redis_server import REDIS_URL, RedisServer
from tests.support.clock import Clock
from tests.support.waiting import eventually


def _prefix() -> str:
    return f"atwhois-test-{uuid.uuid4().hex}:"


Factory = Callable[[Path], Store]
FACTORIES: dict[str, Factory] = {
    "memory": lambda _: MemoryStore(),
    "sqlite": lambda tmp: SqliteStore(tmp / "cache.db"),
    "redis": lambda _: RedisStore(REDIS_URL, prefix=_prefix()),
    "memory+sqlite": lambda tmp: TieredStore(MemoryStore(), SqliteStore(tmp / "tier.db")),
    "memory+redis": lambda _: TieredStore(MemoryStore(), RedisStore(REDIS_URL, prefix=_prefix())),
}


# on the session's Redis Cluster (`redis_cluster`), by its URL
ON_CLUSTER: dict[str, Callable[[str], Store]] = {
    "redis-cluster": lambda url: RedisClusterStore(url, prefix=_prefix()),
    "memory+redis-cluster": lambda url: TieredStore(
        MemoryStore(), RedisClusterStore(url, prefix=_prefix())
    ),
}


@pytest.fixture(params=sorted(FACTORIES) + sorted(ON_CLUSTER))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param in ON_CLUSTER:
        made = ON_CLUSTER[request.param](request.getfixturevalue("redis_cluster").url)
    else:
        made = FACTORIES[request.param](tmp_path)
    yield made
    redis = made.below if isinstance(made, TieredStore) else made
    if isinstance(redis, RedisStore):
        await _emptied(redis)
    await made.close()


async def _emptied(redis: RedisStore) -> None:
    """Every key under the store's prefix deleted (its buckets, layout, marks)."""
    async for key in redis._redis.scan_iter(match=redis.prefix + "*"):
        await redis._redis.delete(key)  # one at a time: a cluster holds them on several nodes


async def value(store: Store, key: str) -> bytes | None:
    found = await store.get(key)
    return found.value if found else None


async def test_put_get_overwrite_delete(store: Store) -> None:
    later = time.time() + 60
    assert await store.get("h:alice.test") is None
    await store.put("h:alice.test", b"one", later)
    assert await value(store, "h:alice.test") == b"one"
    await store.put("h:alice.test", b"two", later)
    assert await value(store, "h:alice.test") == b"two"
    await store.put("d:did:plc:x", b"\x00\xffbinary", later)
    assert await value(store, "d:did:plc:x") == b"\x00\xffbinary"
    assert await store.count() == 2
    await store.delete(["h:alice.test", "h:never-there.test"])
    assert await store.get("h:alice.test") is None
    assert await store.count() == 1


CLOCKED: dict[str, Callable[[Path, Clock], Store]] = {
    "memory": lambda _, clock: MemoryStore(clock=clock),
    "sqlite": lambda tmp, clock: SqliteStore(tmp / "cache.db", clock=clock),
    "memory+sqlite": lambda tmp, clock: TieredStore(
        MemoryStore(clock=clock), SqliteStore(tmp / "tier.db", clock=clock)
    ),
}


@pytest.mark.parametrize("kind", sorted(CLOCKED))
async def test_entries_expire_and_say_when(kind: str, tmp_path: Path) -> None:
    """By the store's clock (moved on here, not waited for): an entry is gone once its time
    is past, another stays; the tier in front expires it with the store."""
    clock = Clock()
    store = CLOCKED[kind](tmp_path, clock)
    soon, later = clock.now + 30, clock.now + 3600
    await store.put("h:short.test", b"soon gone", soon)
    await store.put("h:long.test", b"stays", later)
    found = await store.get("h:short.test")
    assert found is not None and found.value == b"soon gone"
    # SQLite keeps it to the tenth of a second, cut (schema 4): never later than given
    assert soon - 0.1 < found.expires_at <= soon
    clock.now = found.expires_at  # its last moment: gone (it lives until, not through, it)
    assert await store.get("h:short.test") is None
    assert await value(store, "h:long.test") == b"stays"
    await store.close()


@pytest.mark.parametrize("kind", ["redis", "memory+redis"])
async def test_redis_expires_entries_by_its_own_time(kind: str, tmp_path: Path) -> None:
    """Redis keeps an entry's deadline with it (in its field's value, read by the real
    clock, not one a test moves): the entry is gone once it passed, the other stays; the
    tier in front says the same time."""
    store = FACTORIES[kind](tmp_path)
    soon, later = time.time() + 0.3, time.time() + 60
    try:
        await store.put("h:short.test", b"soon gone", soon)
        await store.put("h:long.test", b"stays", later)
        found = await store.get("h:short.test")
        assert found is not None and abs(found.expires_at - soon) < 0.01
        await eventually(lambda: _gone(store, "h:short.test"), timeout=10)
        assert await value(store, "h:long.test") == b"stays"
    finally:
        await store.delete(["h:short.test", "h:long.test"])
        await store.close()


async def _gone(store: Store, key: str) -> bool:
    return await store.get(key) is None


async def test_keys_are_opaque_strings(store: Store) -> None:
    odd = "h:" + "x" * 240 + ".test"
    await store.put(odd, b"v", time.time() + 60)
    await store.put("d:did:web:localhost%3A8080", b"w", time.time() + 60)
    assert await value(store, odd) == b"v"
    assert await value(store, "d:did:web:localhost%3A8080") == b"w"


# --- the memory tier: a bound in bytes, decoded entries counted -------------------------


async def test_a_walk_sees_every_key_of_its_prefix_a_page_at_a_time(store: Store) -> None:
    """How the re-verification after a stream's gap goes over every held DID (F-CUR-6):
    pages of at most about `limit` keys, only the prefix's, each key at least once, however
    the keys of other kinds lie among them (SQLite in key order, from the last key given;
    memory by place in its arena; Redis by its cursor); a key written during
    the walk does not end it early; a position another store gave starts it again."""
    later = time.time() + 60
    # did:plc keys of both forms SQLite keeps (15 bytes; text, for a name not canonical)
    held = {f"d:did:plc:{i:024d}" for i in range(15)}
    held |= {"d:" + plc_did(bytes([i]) * 15) for i in range(10)}
    for key in sorted(held) + [f"h:{i}.test" for i in range(10)] + ["c:x", "e:y"]:
        await store.put(key, b"v", later)
    seen: list[str] = []
    pages, position = 0, ""
    while True:
        page, position = await store.walk("d:", 10, position)
        pages += 1
        seen += page
        assert all(key.startswith("d:") for key in page)
        if pages == 2:  # written during the walk
            await store.put("d:did:plc:" + "z" * 24, b"v", later)
        if not position:
            break
    written = "d:did:plc:" + "z" * 24
    assert held <= set(seen) <= held | {written} and pages >= 2
    below = store.below if isinstance(store, TieredStore) else store
    redis = isinstance(below, RedisStore)
    if isinstance(below, SqliteStore):
        # in the order of the keys as kept, from the last key given: the packed did:plc keys
        # first, so the one written after two pages is behind the walk and not seen
        assert seen == sorted(held, key=sqlite_key) and pages == 3
    elif not redis:  # memory: by place in its arena, as written, the key written last
        assert seen == [*sorted(held), written] and pages == 3
    foreign = "d:did:plc:x" if redis else "12345"  # another store's kind of position
    first, position = await store.walk("d:", 100, foreign)
    while position:
        page, position = await store.walk("d:", 100, position)
        first += page
    assert held <= set(first)


async def test_memory_store_is_bounded_in_bytes_and_keeps_the_recently_used() -> None:
    # four slots of a 1000-byte value (4,808 B) fit in what the decoded share leaves
    store = MemoryStore(max_bytes=5200, decoded_share=1 / 16)
    for i in range(5):
        await store.put(f"k{i}", b"x" * 1000, time.time() + 60)
    assert await store.count() == 4 and await store.get("k0") is None
    await store.get("k1")  # recently used survives
    await store.put("k5", b"x" * 1000, time.time() + 60)
    assert await store.get("k1") is not None and await store.get("k2") is None
    assert store.used_bytes <= store.max_bytes


async def test_decoded_entries_are_kept_within_their_share_of_the_bound() -> None:
    store = MemoryStore(max_bytes=64_000, decoded_share=1 / 16)  # one of 3,000 B decoded
    calls: list[bytes] = []

    def decode(key: str, raw: bytes) -> tuple[Any, int]:
        calls.append(raw)
        return raw.decode().upper(), 3000

    await store.put("a", b"alpha", time.time() + 60)
    arena = store.used_bytes  # the entries' chunks and their index
    assert await store.decoded("a", decode) == "ALPHA"
    assert await store.decoded("a", decode) == "ALPHA" and calls == [b"alpha"]
    assert store.used_bytes == arena + (200 + 1 + 5 + 3000)  # key, bytes and decoded form
    await store.put("b", b"bravo", time.time() + 60)
    assert await store.decoded("b", decode) == "BRAVO"  # a's decoded form makes room
    assert await store.decoded("a", decode) == "ALPHA" and calls == [b"alpha", b"bravo", b"alpha"]
    assert await store.count() == 2 and store.used_bytes <= store.max_bytes == 64_000
    await store.put("a", b"again", time.time() + 60)  # a new value is decoded anew
    assert await store.decoded("a", decode) == "AGAIN"
    await store.delete(["a"])
    assert await store.decoded("a", decode) is None
    assert await store.decoded("nothing", decode) is None
    assert store.used_bytes == arena  # no decoded form of a deleted entry (b's went for a's)


async def test_expired_entries_are_swept_even_if_never_read_again() -> None:
    now = [1000.0]
    store = MemoryStore(64_000, clock=lambda: now[0])  # chunks of 500 B: 4 entries each
    for i in range(100):
        await store.put(f"old{i}", b"v" * 100, now[0] + 10)
    filled = store.used_bytes
    now[0] += 31  # past their expiry and the sweep interval
    await store.put("new", b"v", now[0] + 10)
    assert await store.count() == 1
    assert filled > 12_000 and store.used_bytes < 3_000  # their chunks given back


# --- SQLite and Redis specifics ---------------------------------------------------------


async def test_sqlite_survives_reopening_and_versions_its_schema(tmp_path: Path) -> None:
    path = tmp_path / "persist.db"
    first = SqliteStore(path)
    await first.put("h:alice.test", b"kept", time.time() + 60)
    await first.close()
    second = SqliteStore(path)
    assert await value(second, "h:alice.test") == b"kept"
    version = second._db.execute("SELECT value FROM meta WHERE name='schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),)
    # A cache written by another schema version is dropped, not misread.
    second._db.execute("UPDATE meta SET value='0' WHERE name='schema_version'")
    await second.close()
    third = SqliteStore(path)
    assert await third.get("h:alice.test") is None
    await third.close()


def _open_when_told(path: Path, start: Any) -> None:
    start.wait()
    SqliteStore(path)


def test_sqlite_opens_in_processes_started_together(tmp_path: Path) -> None:
    """The workers of `serve --workers` open one new file at the same moment: every one
    opens it (switching to WAL answers "locked" at once, without the busy wait; a worker
    that took that for an error died before it listened)."""
    forked = multiprocessing.get_context("fork")
    for attempt in range(40):
        start = forked.Event()
        openers = [
            forked.Process(target=_open_when_told, args=(tmp_path / f"{attempt}.db", start))
            for _ in range(6)
        ]
        for opener in openers:
            opener.start()
        start.set()
        for opener in openers:
            opener.join(60)
        assert [opener.exitcode for opener in openers] == [0] * 6, f"round {attempt}"


async def test_sqlite_keeps_an_identity_in_about_what_it_holds(tmp_path: Path) -> None:
    """Entries of the size a DID document kept whole takes (~1.5 KB) cost little more than
    their bytes on disk (in 16 KiB pages, each row one cell of the key's b-tree, whose inner
    pages copy a few); a cache file of the first schema (WITHOUT ROWID in 4 KiB pages:
    overflow pages, 5.3 KB per identity) is dropped and made anew."""
    path = tmp_path / "layout.db"
    legacy = sqlite3.connect(path)
    legacy.executescript(
        "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '1');"
        "CREATE TABLE entries (key TEXT PRIMARY KEY, value BLOB NOT NULL,"
        " expires_at REAL NOT NULL) WITHOUT ROWID;"
    )
    legacy.close()
    store = SqliteStore(path)
    for i in range(2000):
        await store.put(f"d:did:web:u{i:05d}.bulk.test", os.urandom(1500), time.time() + 60)
    db = store._db
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    used = (
        (db.execute("PRAGMA page_count").fetchone()[0])
        * db.execute("PRAGMA page_size").fetchone()[0]
    )
    assert used / 2000 < 1.35 * 1500, used / 2000
    await store.close()


async def test_a_sqlite_cache_of_schema_2_migrates_in_place(tmp_path: Path) -> None:
    """Issue 69: a file of schema 2 (a rowid table and two indexes) is copied, at start,
    into schema 3's table: every unexpired entry kept as it was (read in its earlier form,
    nothing resolved again), the expired ones left behind, the file then smaller per row."""
    path = tmp_path / "v2.db"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '2');"
        "CREATE TABLE entries (key TEXT PRIMARY KEY, value BLOB NOT NULL,"
        " expires_at REAL NOT NULL);"
        "CREATE INDEX entries_expiry ON entries (expires_at);"
    )
    rows = [(f"h:u{i}.test", b"packed %d" % i, time.time() + 600) for i in range(500)]
    old.executemany("INSERT INTO entries VALUES (?, ?, ?)", rows)
    old.execute("INSERT INTO entries VALUES ('h:gone.test', x'00', 1.0)")
    old.commit()
    old.close()
    store = SqliteStore(path)
    assert await value(store, "h:u7.test") == b"packed 7"
    assert await store.count() == 500 and await store.get("h:gone.test") is None
    schema = store._db.execute("SELECT sql FROM sqlite_master WHERE name='entries'").fetchone()
    assert "WITHOUT ROWID" in schema[0]
    indexes = store._db.execute("SELECT name FROM sqlite_master WHERE type='index'").fetchall()
    assert "entries_expiry" not in [name for (name,) in indexes]
    await store.close()
    again = SqliteStore(path)  # opened again: migrated once, kept
    assert await again.count() == 500
    await again.close()


async def test_a_sqlite_cache_of_schema_3_migrates_in_place(tmp_path: Path) -> None:
    """Issue 69: a file of schema 3 (text keys, `d:\\x01` before a did:plc's name, expiry in
    milliseconds) is copied at start into schema 4's table: every unexpired entry kept under
    its name, a did:plc's key now its 15 bytes, the expiry to the tenth of a second (cut),
    the expired ones left behind."""
    path = tmp_path / "v3.db"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '3');"
        "CREATE TABLE entries (key TEXT PRIMARY KEY, value BLOB NOT NULL,"
        " expires_ms INTEGER NOT NULL) WITHOUT ROWID;"
    )
    did = plc_did(bytes(range(15)))
    expires_ms = int(time.time() * 1000) + 600_055
    rows = [
        ("d:\x01" + did.removeprefix("did:plc:"), b"document", expires_ms),
        ("d:did:web:a.test", b"web", expires_ms),
        ("h:a.test", b"handle", expires_ms),
        ("h:gone.test", b"old", 1000),
    ]
    old.executemany("INSERT INTO entries VALUES (?, ?, ?)", rows)
    old.commit()
    old.close()
    store = SqliteStore(path)
    found = await store.get("d:" + did)
    assert found is not None and found.value == b"document"
    assert expires_ms / 1000 - 0.1 < found.expires_at <= expires_ms / 1000
    assert await value(store, "d:did:web:a.test") == b"web"
    assert await value(store, "h:a.test") == b"handle"
    assert await store.get("h:gone.test") is None and await store.count() == 3
    keys = {bytes(k) for (k,) in store._db.execute("SELECT key FROM entries")}
    assert keys == {b"d\x01" + bytes(range(15)), b"d:did:web:a.test", b"h:a.test"}
    assert sorted((await store.walk("d:", 10))[0]) == sorted(["d:" + did, "d:did:web:a.test"])
    await store.close()


async def test_sqlite_keeps_a_did_plc_key_as_its_15_bytes(tmp_path: Path) -> None:
    """Schema 4: a did:plc's key is `d`, 0x01 and its 15 bytes (17 where its name took 32);
    a name that is not the canonical base32 of 15 bytes is kept as its text, and both are
    found by their names, by a scan and by a walk of `d:` or of `d:did:plc:`."""
    store = SqliteStore(tmp_path / "keys.db")
    packed = "d:" + plc_did(b"\x07" * 15)
    odd = ["d:did:plc:" + "A" * 24, "d:did:plc:short", "d:did:plc:" + "8" * 24]
    for key in [packed, *odd, "h:a.test"]:
        await store.put(key, key.encode(), time.time() + 60)
    lengths = dict(store._db.execute("SELECT value, length(key) FROM entries").fetchall())
    assert lengths[packed.encode()] == 17
    assert all(lengths[key.encode()] == len(key) for key in odd)
    for prefix in ("d:", "d:did:plc:", "d:did:"):
        assert sorted(k for k, _ in await store.scan(prefix, 10)) == sorted([packed, *odd])
        assert sorted((await store.walk(prefix, 10))[0]) == sorted([packed, *odd])
    assert [k for k, _ in await store.scan(packed[:14], 10)] == [packed]
    assert await value(store, packed) == packed.encode()
    await store.close()


async def test_sqlite_tells_other_processes_the_keys_a_write_changed(tmp_path: Path) -> None:
    """From the change log: the keys another connection wrote or deleted, never its own;
    everything (None) once the log was pruned past what the watcher had read."""
    path = tmp_path / "shared.db"
    writer, reader = SqliteStore(path), SqliteStore(path)
    told: list[list[str] | None] = []
    ready = asyncio.Event()

    async def following() -> None:
        ready.set()

    watching = asyncio.create_task(reader.watch(lambda keys: told.append(keys), following))
    await ready.wait()
    await reader.put("h:mine.test", b"x", time.time() + 60)
    await writer.put("h:a.test", b"1", time.time() + 60)
    await writer.delete(["d:did:plc:b"])
    await eventually(lambda: len(told) >= 1)
    await asyncio.sleep(0.2)
    assert told == [["h:a.test", "d:did:plc:b"]]
    await writer.put("h:c.test", b"1", time.time() + 60)
    writer._db.execute("DELETE FROM changes")  # pruned before the reader read h:c.test
    await writer.put("h:d.test", b"1", time.time() + 60)
    await eventually(lambda: len(told) >= 2)
    assert told[1] is None
    watching.cancel()
    await writer.close()
    await reader.close()


async def test_redis_prefixes_keep_instances_apart() -> None:
    one = RedisStore(REDIS_URL, prefix=_prefix())
    two = RedisStore(REDIS_URL, prefix=_prefix())
    try:
        await one.put("h:alice.test", b"mine", time.time() + 60)
        assert await two.get("h:alice.test") is None and await one.count() == 1
    finally:
        await one.delete(["h:alice.test"])
        await one.close()
        await two.close()


async def test_a_burst_of_redis_commands_past_the_pool_waits_its_turn() -> None:
    """More commands at once than the pool has connections (the daemon serves 256 requests
    at once, each asking the store) wait for one, within the command timeout: redis-py's
    default pool failed each past the 100th at once ("Too many connections"). The timeout
    is a loaded machine's (opening 100 connections at once took past the default 0.5 s
    here with the other cores busy); the old pool failed at once, whatever the timeout."""
    store = RedisStore(REDIS_URL, prefix=_prefix(), timeout=5)
    try:
        await store.put("h:alice.test", b"held", time.time() + 60)
        found = await asyncio.gather(*(store.get("h:alice.test") for _ in range(300)))
        assert {f.value if f else None for f in found} == {b"held"}
    finally:
        await store.delete(["h:alice.test"])
        await store.close()


def test_open_store_urls(tmp_path: Path) -> None:
    assert isinstance(open_store("memory:"), MemoryStore)
    tiered = open_store(f"sqlite://{tmp_path}/a.db", memory_bytes=1 << 20)
    assert isinstance(tiered, TieredStore) and isinstance(tiered.below, SqliteStore)
    assert tiered.memory.max_bytes == 1 << 20
    assert isinstance(open_store(str(tmp_path / "b.db")), TieredStore)
    redis = open_store("redis://127.0.0.1:6379/0?prefix=x:")  # always with a memory tier
    assert isinstance(redis, TieredStore) and isinstance(redis.below, RedisStore)
    assert redis.below.prefix == "x:"


# --- the tier follows what other processes change ---------------------------------------

TwoTiers = Callable[[Path], tuple[TieredStore, TieredStore]]


def _two_on_sqlite(tmp: Path) -> tuple[TieredStore, TieredStore]:
    path = tmp / "shared.db"
    return (
        TieredStore(MemoryStore(), SqliteStore(path)),
        TieredStore(MemoryStore(), SqliteStore(path)),
    )


def _two_on_redis(_: Path) -> tuple[TieredStore, TieredStore]:
    prefix = _prefix()
    return (
        TieredStore(MemoryStore(), RedisStore(REDIS_URL, prefix=prefix)),
        TieredStore(MemoryStore(), RedisStore(REDIS_URL, prefix=prefix)),
    )


@pytest.mark.parametrize("make", [_two_on_sqlite, _two_on_redis], ids=["sqlite", "redis"])
async def test_a_change_by_another_process_reaches_the_memory_tier(
    tmp_path: Path, make: TwoTiers
) -> None:
    one, two = make(tmp_path)
    told: list[str] = []
    two.listeners.append(lambda keys: told.append(keys))
    try:
        await one.put("h:alice.test", b"old", time.time() + 60)
        assert await value(two, "h:alice.test") == b"old"  # now in two's memory tier

        async def following() -> bool:
            return not await two.health()

        await eventually(following)
        await one.put("h:alice.test", b"new", time.time() + 60)

        async def sees_new() -> bool:
            return await value(two, "h:alice.test") == b"new"

        await eventually(sees_new)  # how soon is `python -m bench` business
        await one.delete(["h:alice.test"])

        async def sees_purge() -> bool:
            return await two.get("h:alice.test") is None

        await eventually(sees_purge)
        # Told exactly which key changed (once following began, when anything may have):
        # the answers rendered from the old value are dropped, no others.
        assert told[0] is None and told[1:] and all(set(k) == {"h:alice.test"} for k in told[1:])
    finally:
        await one.close()
        await two.close()


# --- the store below fails: the tier answers alone, and catches up ----------------------


class Flaky:
    """A store that fails on command (a fake: this tests the tier's logic alone; the real
    outages are in tests/cache/test_cache_truth.py)."""

    name = "flaky"

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.down = False
        self.deleted: list[str] = []

    async def _check(self) -> None:
        if self.down:
            raise ConnectionError("refused")

    async def get(self, key: str) -> Stored | None:
        await self._check()
        return await self.inner.get(key)

    async def put(self, key: str, value: bytes, expires_at: float) -> None:
        await self._check()
        await self.inner.put(key, value, expires_at)

    async def delete(self, keys: Any) -> None:
        await self._check()
        self.deleted += list(keys)
        await self.inner.delete(keys)

    async def count(self) -> int:
        await self._check()
        return await self.inner.count()

    async def scan(self, prefix: str, limit: int) -> list[tuple[str, bytes]]:
        await self._check()
        return await self.inner.scan(prefix, limit)

    async def close(self) -> None:
        pass


async def test_when_the_store_below_fails_the_tier_answers_and_catches_up() -> None:
    now = [1000.0]
    below = Flaky()
    tier = TieredStore(MemoryStore(clock=lambda: now[0]), below, timer=lambda: now[0])
    await tier.put("h:kept.test", b"kept", now[0] + 600)
    await below.inner.put("h:stale.test", b"old", now[0] + 600)  # written by someone else
    below.down = True
    assert await value(tier, "h:kept.test") == b"kept"  # from memory
    await tier.put("h:new.test", b"new", now[0] + 600)  # memory only, for now
    with pytest.raises(StoreUnavailable):
        await tier.delete(["h:stale.test"])  # a purge the store did not take
    assert await tier.count() == 2  # what memory holds
    assert tier.errors >= 1 and (await tier.health())[0].startswith("cache store flaky failing")
    below.down = False
    now[0] += 2  # past the pause before the store is tried again
    assert await tier.health() == []  # the probe answered: recovered by itself
    assert set(below.deleted) == {"h:stale.test", "h:new.test"}  # what it missed, replayed
    assert await below.inner.get("h:stale.test") is None  # the purged value cannot come back


async def test_a_store_with_its_own_pause_is_tried_again_after_it() -> None:
    """A cluster's store (`retry_after`): what the tier writes in its pause is lost to the
    fleet, so it is tried again after a fifth of a second, not the tier's second."""
    now = [1000.0]
    below = Flaky()
    below.retry_after = 0.2  # type: ignore[attr-defined]
    tier = TieredStore(MemoryStore(clock=lambda: now[0]), below, timer=lambda: now[0])
    later = time.time() + 600  # the store's own clock
    below.down = True
    await tier.put("h:a.test", b"a", later)  # failed: the pause begins
    below.down = False
    now[0] += 0.1
    await tier.put("h:b.test", b"b", later)  # within the pause: not tried
    assert await value(below.inner, "h:b.test") is None
    now[0] += 0.15
    await tier.put("h:c.test", b"c", later)  # past it: written
    assert await value(below.inner, "h:c.test") == b"c"
    assert set(below.deleted) == {"h:a.test", "h:b.test"}  # what it missed, deleted there


async def test_the_tier_spares_only_entries_the_store_below_holds() -> None:
    """`spare` (the daemon's rendered answers hold what a hit needs of their entries):
    memory drops what the store below has, and a read brings it back; it keeps what it
    alone holds: a write still on its way below, everything while the store fails."""
    now = [1000.0]
    below = Flaky()
    below.inner = MemoryStore(clock=lambda: now[0])
    tier = TieredStore(MemoryStore(clock=lambda: now[0]), below, timer=lambda: now[0])
    await tier.put("h:a.test", b"a", now[0] + 600)
    tier.spare(["h:a.test"])
    assert tier.memory.slot("h:a.test") is None
    assert await value(tier, "h:a.test") == b"a"  # read back from below
    assert tier.memory.slot("h:a.test") is not None

    landed, original_put = asyncio.Event(), below.put

    putting = asyncio.Event()

    async def slow_put(key: str, value: bytes, expires_at: float) -> None:
        putting.set()
        await landed.wait()
        await original_put(key, value, expires_at)

    below.put = slow_put  # type: ignore[method-assign]
    writing = asyncio.create_task(tier.put("h:a.test", b"new", now[0] + 600))
    await putting.wait()  # the write is on its way to the store below
    tier.spare(["h:a.test"])  # below still holds the old value
    slot = tier.memory.slot("h:a.test")
    assert slot is not None and slot.value == b"new"
    landed.set()
    await writing
    tier.spare(["h:a.test"])
    assert tier.memory.slot("h:a.test") is None
    assert await value(tier, "h:a.test") == b"new"

    below.down = True
    await tier.put("h:b.test", b"b", now[0] + 600)  # memory only
    tier.spare(["h:a.test", "h:b.test"])
    assert tier.memory.slot("h:a.test") is not None and tier.memory.slot("h:b.test") is not None


async def test_a_real_redis_outage_is_survived(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as server:
        tier = TieredStore(MemoryStore(), RedisStore(server.url, prefix=_prefix()))
        try:
            await tier.put("h:alice.test", b"v", time.time() + 60)
            server.stop()
            started = time.monotonic()
            assert await value(tier, "h:alice.test") == b"v"
            await tier.put("h:bob.test", b"w", time.time() + 60)
            assert await value(tier, "h:bob.test") == b"w"
            # refused fast, then not asked for a second (no connect timeout per operation)
            assert time.monotonic() - started < 5
            assert await tier.health()
            server.start()
            await asyncio.sleep(1.1)

            async def recovered() -> bool:
                return not await tier.health()

            await eventually(recovered)
            assert await value(tier, "h:bob.test") is None  # not written below: re-resolved
        finally:
            await tier.close()


async def test_a_value_read_while_a_change_is_announced_is_not_kept() -> None:
    """A read from below can be overtaken by another process's change: the notice arrives
    while the old value is on its way. That value answers the read, but is not kept as if
    it were current (it would stay wrong until the next change)."""
    below = Flaky()
    arrived = asyncio.Event()
    original_get = below.get

    read = asyncio.Event()

    async def slow_get(key: str) -> Stored | None:
        found = await original_get(key)
        read.set()
        await arrived.wait()
        return found

    below.get = slow_get  # type: ignore[method-assign]
    tier = TieredStore(MemoryStore(), below)
    await below.inner.put("h:alice.test", b"old", time.time() + 60)
    reading = asyncio.create_task(tier.get("h:alice.test"))
    await read.wait()  # the old value was read below, and is on its way
    await below.inner.put("h:alice.test", b"new", time.time() + 60)  # another process
    tier._changed(["h:alice.test"])  # its notice, while the old value is on its way
    arrived.set()
    found = await reading
    assert found is not None and found.value == b"old"
    assert await tier.memory.get("h:alice.test") is None  # not kept
    arrived.clear()
    arrived.set()
    assert await value(tier, "h:alice.test") == b"new"


class Followed(Flaky):
    """A fake store whose changes are followed until `lose()` (then followed again), with
    the failovers it says it had (a cluster's: writes may be lost)."""

    def __init__(self) -> None:
        super().__init__()
        self.failovers = 0
        self.lost = asyncio.Event()

    async def watch(self, on_change: Any, ready: Any) -> None:
        self.lost.clear()
        await ready()
        await self.lost.wait()
        raise ConnectionError("the subscription is gone")


async def test_after_a_gap_memory_is_read_again_and_answers_while_the_store_fails() -> None:
    """Changes missed while not following: what memory holds is read again from below once
    following again (not served as it was), yet kept: with the store failing then, memory
    answers (never absent). A failover the store counts is told to `gaps`, once."""
    below = Followed()
    elapsed = [0.0]
    tier = TieredStore(MemoryStore(), below, timer=lambda: elapsed[0])
    gaps: list[None] = []
    tier.gaps.append(lambda: gaps.append(None))
    try:
        await tier.put("h:a.test", b"one", time.time() + 60)
        await eventually(lambda: _follows(tier))
        await below.inner.put("h:a.test", b"two", time.time() + 60)  # unheard by the tier
        assert await value(tier, "h:a.test") == b"one"  # followed: memory answers

        async def again(failovers: int) -> None:
            before = tier._changes
            elapsed[0] += 1  # past the half second a value read from below is trusted alone
            below.failovers = failovers
            below.lost.set()
            await eventually(lambda: tier.following and tier._changes > before)

        await again(0)
        assert await value(tier, "h:a.test") == b"two" and gaps == []  # read again
        await again(1)
        await below.inner.put("h:a.test", b"three", time.time() + 60)
        below.down = True
        assert await value(tier, "h:a.test") == b"two"  # memory answers while it fails
        assert gaps == [None]
    finally:
        await tier.close()


async def _follows(tier: TieredStore) -> bool:
    await tier.get("h:probe.test")  # a read starts following
    return tier.following


async def test_sqlite_sweeps_expired_rows_by_walking_its_keys(tmp_path: Path) -> None:
    """Schema 3 has no index of expiry times: the sweeps walk the keys a window at a time
    (more rows than were written since the last), so every expired row goes in the end,
    while the table grows, and none that is still live."""
    clock = Clock()
    store = SqliteStore(tmp_path / "sweep.db", clock=clock)
    for i in range(3000):
        await store.put(f"h:old{i:05d}.test", b"x", clock.now + 10)
    clock.now += 20
    for i in range(12_000):
        await store.put(f"h:new{i:05d}.test", b"y", clock.now + 3600)
    assert await store.count() == 12_000
    await store.close()
