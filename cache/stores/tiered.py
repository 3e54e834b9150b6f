"""A memory tier in front of a slower store: reads fill it, writes and deletes go to both."""

from __future__ import annotations

from collections.abc import Iterable

from .base import Store
from .memory import MemoryStore

_L1_SECONDS = 60.0  # how long the memory tier trusts a value read from below


class TieredStore:
    def __init__(self, memory: MemoryStore, below: Store) -> None:
        self.memory = memory
        self.below = below
        self.name = f"memory+{below.name}"

    async def get(self, key: str) -> bytes | None:
        value = await self.memory.get(key)
        if value is not None:
            return value
        value = await self.below.get(key)
        if value is not None:
            # The real expiry is inside the entry; the tier only bounds how stale it may be
            # relative to the store below (another process may have purged it there).
            await self.memory.put(key, value, self.memory.clock() + _L1_SECONDS)
        return value

    async def put(self, key: str, value: bytes, expires_at: float) -> None:
        await self.below.put(key, value, expires_at)
        await self.memory.put(key, value, min(expires_at, self.memory.clock() + _L1_SECONDS))

    async def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        await self.memory.delete(keys)
        await self.below.delete(keys)

    async def count(self) -> int:
        return await self.below.count()

    async def close(self) -> None:
        await self.memory.close()
        await self.below.close()
