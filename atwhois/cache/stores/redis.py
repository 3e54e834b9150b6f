"""Redis, for several daemons sharing one cache. Keys carry a prefix, so instances (and test
runs) can share a server without colliding.

The entries are fields of small hashes, not keys of their own (issue 69): a key costs the
server ~130 B (its dict entry, key and value objects, its expiry's entry) before its value,
a field of a hash kept as a listpack a few. An entry's bucket is `PREFIX#N`, N a stable hash
of its key modulo the buckets (`redis_buckets`, fixed for a cache when it is first made: the
server keeps it under `PREFIX{layout}`, and every daemon takes it from there); the field is
the entry's key, its value the entry's expiry (6 bytes, milliseconds) then its bytes. A read
of a field past its expiry finds nothing; a bucket expires with its latest field (`PEXPIREAT
… GT`), so a bucket whose fields all expired goes, and a paced sweep deletes the expired
fields of live buckets (a bucket every `_SWEEP_EVERY` writes, by a script: a field written
meanwhile is not deleted). A bucket stays compact while it holds at most the server's
`hash-max-listpack-entries` fields of at most `hash-max-listpack-value` bytes: a document's
entry is ~90 B (a document kept whole, a few hundred), past Redis's default 64, so the server
must allow more, 1024 (atwhois warns when it does not, where CONFIG GET answers); a bucket
past either works the same, only larger.

A cache written by the previous version (a key per entry) is read as it is, while the
fleet's first daemon moves its entries into buckets in the background, at a pace (one
daemon at a time: a claim with a lease; `redis_buckets`); while `PREFIX{moving}` says the
move is not done, a read that finds no field reads the old key, a delete deletes both, the
walk goes over both.

Every write also publishes its keys on `<prefix>changes`, so each daemon's memory tier drops
what another daemon changed as soon as it is told (`watch`). Commands fail fast (a short
timeout, no retries): the memory tier in front answers while Redis is away.

The nonces seen (`nonces`, SA-JTI-2) are apart from the entries (`redis_nonces`).

A Redis Cluster is the same store over redis-py's cluster client (`redis_cluster`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from atwhois.foundation.defaults import REDIS_BUCKETS
from atwhois.resolver.errors import AtwhoisError

from .base import OnChange, Stored
from .redis_buckets import Move, bucket_expiry_set, packed, unpacked
from .redis_nonces import RedisNonces

log = logging.getLogger("atwhois.cache")

_CONNECTIONS = 100  # to the server at once, from one process
_SILENCE = 1.0  # seconds without a message before the subscription is pinged
_DEAD = 3.0  # seconds without any message (not even a pong) before it is given up

# hash-max-listpack-value the deployments set: a compact document's entry (~90 B) fits, and
# most documents kept whole (a did:web's of another form, ~270 B and more) with it
_LISTPACK_VALUE = 1024
_SWEEP_EVERY = 32  # writes of a daemon per bucket it sweeps of expired fields
_CHUNK = 4096  # buckets read in one round trip (count, scan)
_WALK_CHUNK = 256  # buckets a walk's page reads in one round trip
_WALK_ROUNDS = 4  # round trips a walk's page makes at most

# KEYS[1]: a bucket; ARGV[1]: now (ms). Deletes the fields past their expiry (the first 6
# bytes of a value: an entry of `RedisStore.put`); a field written meanwhile is not one.
_SWEEP = """
local now = tonumber(ARGV[1])
local all = redis.call('HGETALL', KEYS[1])
local gone = 0
for i = 1, #all, 2 do
  local v = all[i + 1]
  if #v >= 6 then
    local ms = 0
    for b = 1, 6 do ms = ms * 256 + string.byte(v, b) end
    if ms <= now then
      redis.call('HDEL', KEYS[1], all[i])
      gone = gone + 1
    end
  end
end
return gone
"""


class RedisStore:
    """The cache's entries on a Redis server, shared by the daemons that name it (the
    `redis` extra): each change is heard by the others; a command that waits past its
    short timeout fails at once, and the memory tier in front answers meanwhile."""

    name = "redis"
    failovers = 0  # one server: its writes are not lost to a failover

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "atwhois:",
        timeout: float = 0.5,
        buckets: int = REDIS_BUCKETS,
    ) -> None:
        self.prefix = prefix
        self.channel = prefix + "changes"
        self._origin = os.urandom(8).hex().encode()  # our own notices are not news to us
        # a server's client or a cluster's: the commands used are the same
        self._redis: Any = self._client(url, timeout)
        self.buckets = buckets  # the cache's own once started (`_start`)
        self._layout = prefix + "{layout}"  # braced: no entry, nor an old key to move
        self._started = False
        self._starting: asyncio.Lock | None = None
        self.moving = False  # old keys (a key per entry) may remain: they are read too
        self._mover: asyncio.Task[None] | None = None
        self._writes = 0
        self._sweep_at = random.randrange(buckets)  # the fleet's daemons sweep apart
        self._sweep = self._redis.register_script(_SWEEP)
        self._move = Move(self._redis, prefix, self._origin, self._walk_old, self._bucket)

    @property
    def moved(self) -> int:
        """Old keys (a key per entry) this daemon moved into buckets."""
        return self._move.moved

    async def _moved(self) -> None:
        await self._move.run()
        self.moving = False

    @staticmethod
    def _client(url: str, timeout: float) -> Any:
        # A burst of commands (the daemon serves 256 requests at once) waits its turn for one
        # of the pool's connections, within the command timeout: redis-py's default pool
        # fails a command at once past 100 in use ("Too many connections").
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=_CONNECTIONS,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
        return aioredis.Redis.from_pool(pool)

    # --- the cache's layout, read once -------------------------------------------------

    async def _ready(self) -> None:
        if self._started:
            return
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if not self._started:
                await self._start()
                self._started = True

    async def _start(self) -> None:
        redis = self._redis
        layout = await redis.get(self._layout)
        if layout is None:
            # A cache without a layout may hold a previous version's keys: the move is
            # marked before the layout, so a daemon that sees the layout sees the move.
            await redis.set(self._move.marker, b"1", nx=True)
            await redis.set(self._layout, str(self.buckets), nx=True)
            layout = await redis.get(self._layout)
        buckets = int(layout)
        if buckets != self.buckets:
            log.warning(
                "cache %s keeps its %d buckets (redis_buckets: a new cache's)", self.prefix, buckets
            )
            self.buckets, self._sweep_at = buckets, self._sweep_at % buckets
        self.moving = bool(await redis.exists(self._move.marker))
        if self.moving:
            self._mover = asyncio.get_running_loop().create_task(self._moved())
        await self._warn_if_uncompact()

    async def _warn_if_uncompact(self) -> None:
        """Say when the server keeps buckets as hash tables (each field ~5 times the bytes):
        a managed Redis may refuse CONFIG GET, and then nothing is said."""
        try:
            config = await self._redis.config_get("hash-max-listpack-*")
            value = int(config["hash-max-listpack-value"])
        except (RedisError, OSError, KeyError, ValueError, TypeError):
            return
        if value < _LISTPACK_VALUE:
            log.warning(
                "Redis keeps hashes of values past %d B as hash tables: set "
                "hash-max-listpack-value %d on the server, or the cache's buckets take "
                "several times the memory (docs/guides/cache.md)",
                value,
                _LISTPACK_VALUE,
            )

    def _bucket(self, key: str) -> str:
        return self._bucket_named(zlib.crc32(key.encode()) % self.buckets)

    def _bucket_named(self, index: int) -> str:
        return f"{self.prefix}#{index}"

    # --- entries -----------------------------------------------------------------------

    async def get(self, key: str) -> Stored | None:
        await self._ready()
        if not self.moving:
            return unpacked(await self._redis.hget(self._bucket(key), key), time.time())
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hget(self._bucket(key), key)
            pipe.get(self.prefix + key)  # not moved yet: as the previous version wrote it
            pipe.pexpiretime(self.prefix + key)
            raw, value, expires_ms = await pipe.execute()
        if raw is None and isinstance(value, bytes) and expires_ms >= 0:
            return Stored(value, expires_ms / 1000)
        return unpacked(raw, time.time())

    async def put(self, key: str, value: bytes, expires_at: float) -> None:
        await self._ready()
        bucket, now = self._bucket(key), time.time()

        def write(pipe: Any) -> None:
            pipe.hset(bucket, key, packed(value, expires_at))
            bucket_expiry_set(pipe, bucket, int(expires_at * 1000), now)

        await self._written(write, [key])
        self._writes += 1
        if self._writes % _SWEEP_EVERY == 0:
            await self._sweep_next()

    async def _sweep_next(self) -> None:
        """The expired fields of the next bucket deleted (a write's share of the sweep: a
        failure is the next one's to retry, not the write's)."""
        bucket, self._sweep_at = self._sweep_at, (self._sweep_at + 1) % self.buckets
        with contextlib.suppress(RedisError, OSError):
            await self._sweep(keys=[self._bucket_named(bucket)], args=[int(time.time() * 1000)])

    async def _written(self, write: Callable[[Any], None], keys: list[str]) -> None:
        """`write`'s commands and, after them, the notice of `keys`: one round trip."""
        async with self._redis.pipeline(transaction=False) as pipe:
            write(pipe)
            pipe.publish(self.channel, self._notice(keys))
            await pipe.execute()

    def nonces(self) -> RedisNonces:
        """The nonces seen, under this prefix: every daemon on the server sees them."""
        return RedisNonces(self._redis, self.prefix)

    async def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        await self._ready()
        moving = self.moving

        def write(pipe: Any) -> None:
            for key in keys:  # one key a command: a cluster holds them on several nodes
                pipe.hdel(self._bucket(key), key)
                if moving:
                    pipe.delete(self.prefix + key)

        if keys:
            await self._written(write, keys)

    def _notice(self, keys: list[str]) -> bytes:
        return b"\n".join([self._origin, *(k.encode() for k in keys)])

    async def count(self) -> int:
        await self._ready()
        total = 0
        for start in range(0, self.buckets, _CHUNK):
            async with self._redis.pipeline(transaction=False) as pipe:
                for index in range(start, min(start + _CHUNK, self.buckets)):
                    pipe.hlen(self._bucket_named(index))
                total += sum(await pipe.execute())
        if self.moving:
            total += len([key async for key in self._old_keys("")])
        return total

    async def _old_keys(self, prefix: str) -> Any:
        """The previous version's keys of entries starting with `prefix` (strings; braced
        ones are the nonces', marks, the layout: no entries)."""
        braced = (self.prefix + "{").encode()
        pattern = glob_escaped(self.prefix + prefix) + "*"
        async for key in self._redis.scan_iter(match=pattern, count=1000, _type="string"):
            if not key.startswith(braced):
                yield key

    async def _fields(self, indexes: range, match: str) -> list[list[tuple[bytes, bytes]]]:
        """The fields matching `match` (a glob) of the buckets `indexes`, in one round trip
        (more for a bucket grown past a listpack, which HSCAN gives a part at a time)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for index in indexes:
                pipe.hscan(self._bucket_named(index), 0, match=match, count=1000)
            answers = await pipe.execute()
        found: list[list[tuple[bytes, bytes]]] = []
        for index, (cursor, fields) in zip(indexes, answers, strict=True):
            held = list(fields.items())
            while int(cursor):
                cursor, more = await self._redis.hscan(
                    self._bucket_named(index), cursor, match=match, count=1000
                )
                held += more.items()
            found.append(held)
        return found

    async def scan(self, prefix: str, limit: int) -> list[tuple[str, bytes]]:
        await self._ready()
        match, now = glob_escaped(prefix) + "*", time.time()
        found: dict[str, bytes] = {}
        for start in range(0, self.buckets, _CHUNK):
            indexes = range(start, min(start + _CHUNK, self.buckets))
            for fields in await self._fields(indexes, match):
                for field, raw in fields:
                    entry = unpacked(raw, now)
                    if entry is not None:
                        found[field.decode()] = entry.value
            if len(found) >= limit:
                return list(found.items())[:limit]
        if self.moving:
            await self._scan_old(prefix, limit, found)
        return list(found.items())[:limit]

    async def _scan_old(self, prefix: str, limit: int, found: dict[str, bytes]) -> None:
        """Adds to `found` the entries of old keys not moved yet (a bucket's field wins)."""
        keys: list[bytes] = []
        async for key in self._old_keys(prefix):
            if key.decode()[len(self.prefix) :] not in found:
                keys.append(key)
            if len(found) + len(keys) >= limit:
                break
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            async with self._redis.pipeline(transaction=False) as pipe:
                for key in chunk:  # a GET each (not MGET): a cluster holds them on several nodes
                    pipe.get(key)
                values = await pipe.execute()
            for key, value in zip(chunk, values, strict=True):
                if isinstance(value, bytes):  # expired between the scan and the read
                    found[key.decode()[len(self.prefix) :]] = value

    async def walk(self, prefix: str, limit: int, position: str = "") -> tuple[list[str], str]:
        # While old keys remain, their walk first ("o" and Redis's own position of it), then
        # the buckets' in their order ("b" and the next bucket's number): a key moved into a
        # bucket meanwhile is in one the walk has not read yet, or was seen as an old key.
        await self._ready()
        kind, at = position[:1], position[1:]
        if kind == "o" and self.moving:
            page, following = await self._walk_old(prefix, limit, at)
            return page, "o" + following if following else "b0"
        if kind != "b" or not at.isdigit() or int(at) >= self.buckets:  # a new walk, or
            if self.moving:  # a position another store gave
                return await self.walk(prefix, limit, "o")
            at = "0"
        match, page = glob_escaped(prefix) + "*", []
        start = int(at)
        for _ in range(_WALK_ROUNDS):
            indexes = range(start, min(start + _WALK_CHUNK, self.buckets))
            for index, fields in zip(indexes, await self._fields(indexes, match), strict=True):
                page += [field.decode() for field, _ in fields]
                if len(page) >= limit:
                    after = index + 1
                    return page, f"b{after}" if after < self.buckets else ""
            start = indexes.stop
            if start >= self.buckets:
                return page, ""
        return page, f"b{start}"

    async def _walk_old(self, prefix: str, limit: int, position: str) -> tuple[list[str], str]:
        """A page of the old keys of entries starting with `prefix`: Redis's own walk
        (SCAN), its cursor the position, `limit` the count it is given (a hint: a page may
        hold a few more, or none while the walk goes on)."""
        pattern = glob_escaped(self.prefix + prefix) + "*"
        start = int(position) if position.isdigit() else 0
        cursor, keys = await self._redis.scan(start, match=pattern, count=limit, _type="string")
        return self._entry_keys(keys), "" if int(cursor) == 0 else str(cursor)

    def _entry_keys(self, keys: Iterable[bytes | str]) -> list[str]:
        names = (key.decode() if isinstance(key, bytes) else key for key in keys)
        braced = self.prefix + "{"
        return [name[len(self.prefix) :] for name in names if not name.startswith(braced)]

    # --- changes ------------------------------------------------------------------------

    async def watch(self, on_change: OnChange, ready: Callable[[], Awaitable[None]]) -> None:
        pubsub = await self._subscription()
        try:
            await pubsub.subscribe(self.channel)
            await self._masters_changed()  # a change while nobody followed: counted
            await ready()
            loop = asyncio.get_running_loop()
            heard = looked = loop.time()
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
                now = loop.time()
                if now - looked > _SILENCE:
                    looked = now
                    if await self._masters_changed():
                        raise FailedOver(f"the masters changed under {self.channel}")
                if message is not None:
                    heard = now
                    if message["type"] == "message":
                        origin, *keys = bytes(message["data"]).split(b"\n")
                        if origin != self._origin:
                            on_change([k.decode() for k in keys])
                elif now - heard > _DEAD:
                    raise TimeoutError(f"no word from Redis on {self.channel} for {_DEAD:.0f}s")
                elif now - heard > _SILENCE:
                    await pubsub.ping()
        finally:
            # The connection may be gone already, or held by the read a cancellation just
            # interrupted: redis-py's close then waits on it for good, and so would a
            # daemon's shutdown (a tier closed while another process's change was arriving).
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pubsub.aclose(), _CLOSE_WITHIN)

    async def _subscription(self) -> Any:
        return self._redis.pubsub()

    async def _masters_changed(self) -> bool:
        """Whether the masters changed since last looked (one server: never)."""
        return False

    async def close(self) -> None:
        if self._mover is not None:
            self._mover.cancel()
            await asyncio.wait({self._mover}, timeout=_CLOSE_WITHIN)
        await self._redis.aclose()


_CLOSE_WITHIN = 2.0  # seconds a subscription's close may take


def glob_escaped(text: str) -> str:
    """`text` matched literally by a Redis glob pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class FailedOver(AtwhoisError):
    """A cluster's masters changed while its notices were followed: some may be lost."""
