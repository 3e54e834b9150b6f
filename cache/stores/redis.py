"""Redis, for several daemons sharing one cache. Keys carry a prefix, so instances (and test
runs) can share a server without colliding; Redis expires entries itself."""

from __future__ import annotations

from collections.abc import Iterable

import redis.asyncio as aioredis


class RedisStore:
    name = "redis"

    def __init__(self, url: str, *, prefix: str = "atwhois:") -> None:
        self.prefix = prefix
        self._redis = aioredis.Redis.from_url(url)

    async def get(self, key: str) -> bytes | None:
        value = await self._redis.get(self.prefix + key)
        return value if isinstance(value, bytes) else None

    async def put(self, key: str, value: bytes, expires_at: float) -> None:
        await self._redis.set(self.prefix + key, value, pxat=int(expires_at * 1000))

    async def delete(self, keys: Iterable[str]) -> None:
        names = [self.prefix + k for k in keys]
        if names:
            await self._redis.delete(*names)

    async def count(self) -> int:
        return sum([1 async for _ in self._redis.scan_iter(match=self.prefix + "*", count=1000)])

    async def close(self) -> None:
        await self._redis.aclose()
