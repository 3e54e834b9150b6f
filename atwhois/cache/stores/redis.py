"""Redis, for several daemons sharing one cache. Keys carry a prefix, so instances (and test
runs) can share a server without colliding; Redis expires entries itself.

Every write also publishes its keys on `<prefix>changes`, so each daemon's memory tier drops
what another daemon changed as soon as it is told (`watch`). Commands fail fast (a short
timeout, no retries): the memory tier in front answers while Redis is away.

The nonces seen (`nonces`, SA-JTI-2) are apart from the entries: a sorted set per share,
changed by one script, published to no one (no memory tier keeps them).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterable

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from .base import OnChange, Stored
from .nonces import Claim, NoncesUnavailable

_CONNECTIONS = 100  # to the server at once, from one process
_SILENCE = 1.0  # seconds without a message before the subscription is pinged
_DEAD = 3.0  # seconds without any message (not even a pong) before it is given up


class RedisStore:
    """The cache's entries on a Redis server, shared by the daemons that name it (the
    `redis` extra): each change is heard by the others; a command that waits past its
    short timeout fails at once, and the memory tier in front answers meanwhile."""

    name = "redis"

    def __init__(self, url: str, *, prefix: str = "atwhois:", timeout: float = 0.5) -> None:
        self.prefix = prefix
        self.channel = prefix + "changes"
        self._origin = os.urandom(8).hex().encode()  # our own notices are not news to us
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
        self._redis = aioredis.Redis.from_pool(pool)

    async def get(self, key: str) -> Stored | None:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(self.prefix + key)
            pipe.pexpiretime(self.prefix + key)
            value, expires_ms = await pipe.execute()
        if not isinstance(value, bytes) or expires_ms < 0:
            return None
        return Stored(value, expires_ms / 1000)

    async def put(self, key: str, value: bytes, expires_at: float) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.set(self.prefix + key, value, pxat=int(expires_at * 1000))
            pipe.publish(self.channel, self._notice([key]))
            await pipe.execute()

    def nonces(self) -> RedisNonces:
        """The nonces seen, under this prefix: every daemon on the server sees them."""
        return RedisNonces(self._redis, self.prefix)

    async def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if keys:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.delete(*(self.prefix + k for k in keys))
                pipe.publish(self.channel, self._notice(keys))
                await pipe.execute()

    def _notice(self, keys: list[str]) -> bytes:
        return b"\n".join([self._origin, *(k.encode() for k in keys)])

    async def count(self) -> int:
        nonces = (self.prefix + "{").encode()  # the nonces' keys (`nonces`) are no entries
        keys = self._redis.scan_iter(match=self.prefix + "*", count=1000)
        return sum([1 async for key in keys if not key.startswith(nonces)])

    async def scan(self, prefix: str, limit: int) -> list[tuple[str, bytes]]:
        pattern = _glob_escaped(self.prefix + prefix) + "*"
        keys: list[bytes] = []
        async for key in self._redis.scan_iter(match=pattern, count=1000):
            keys.append(key)
            if len(keys) >= limit:
                break
        found: list[tuple[str, bytes]] = []
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            values = await self._redis.mget(chunk)
            found += [
                (key.decode()[len(self.prefix) :], value)
                for key, value in zip(chunk, values, strict=True)
                if isinstance(value, bytes)  # expired between the scan and the read
            ]
        return found

    async def walk(self, prefix: str, limit: int, position: str = "") -> tuple[list[str], str]:
        # Redis's own walk (SCAN): its cursor is the position, `limit` the count it is given
        # (a hint: a page may hold a few more, or none while the walk goes on)
        pattern = _glob_escaped(self.prefix + prefix) + "*"
        start = int(position) if position.isdigit() else 0
        cursor, keys = await self._redis.scan(start, match=pattern, count=limit)
        names = [key.decode() if isinstance(key, bytes) else key for key in keys]
        page = [name[len(self.prefix) :] for name in names]
        return page, "" if int(cursor) == 0 else str(cursor)

    async def watch(self, on_change: OnChange, ready: Callable[[], Awaitable[None]]) -> None:
        pubsub = self._redis.pubsub()
        try:
            await pubsub.subscribe(self.channel)
            await ready()
            loop = asyncio.get_running_loop()
            heard = loop.time()
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
                now = loop.time()
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

    async def close(self) -> None:
        await self._redis.aclose()


_CLOSE_WITHIN = 2.0  # seconds a subscription's close may take


def _glob_escaped(text: str) -> str:
    """`text` matched literally by a Redis glob pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


# KEYS[1]: the share's sorted set (member: a nonce; score: when it expires, in ms).
# ARGV: the nonce, its expiry (ms), now (ms), the share's limit.
_CLAIM = """
local share = KEYS[1]
redis.call('ZREMRANGEBYSCORE', share, '-inf', ARGV[3])
if redis.call('ZSCORE', share, ARGV[1]) then return 'seen' end
if redis.call('ZCARD', share) >= tonumber(ARGV[4]) then return 'share' end
redis.call('ZADD', share, ARGV[2], ARGV[1])
local last = redis.call('ZRANGE', share, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', share, last[2])
return 'first'
"""
_CLAIMS: dict[object, Claim] = {b"first": "first", b"seen": "seen", b"share": "share"}


class RedisNonces:
    """In Redis (`RedisStore.nonces`), which every daemon on it shares: one sorted set per
    share, changed by one script (atomic); the set expires with its last nonce."""

    name = "redis"
    shared = True

    def __init__(self, client: aioredis.Redis, prefix: str) -> None:
        self._prefix = prefix
        self._claim = client.register_script(_CLAIM)

    def key(self, share: str) -> str:
        return f"{self._prefix}{{nonce:{share}}}"

    async def claim(
        self, share: str, nonce: str, expires_at: float, limit: int, now: float
    ) -> Claim:
        args: list[str | int] = [nonce, int(expires_at * 1000), int(now * 1000), limit]
        try:
            answer = await self._claim(keys=[self.key(share)], args=args)
        except (RedisError, OSError) as err:  # unreachable, too slow, the script refused
            raise NoncesUnavailable(f"Redis: {err}") from err
        claim = _CLAIMS.get(answer)
        if claim is None:
            raise NoncesUnavailable(f"Redis: the nonce script answered {str(answer)[:40]}")
        return claim
