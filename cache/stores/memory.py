"""In-process store: an LRU bounded by entries and by bytes."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable


class MemoryStore:
    name = "memory"

    def __init__(
        self,
        max_entries: int = 100_000,
        max_bytes: int = 64 * 1024 * 1024,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.clock = clock
        self._entries: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self.bytes = 0

    async def get(self, key: str) -> bytes | None:
        found = self._entries.get(key)
        if found is None:
            return None
        value, expires_at = found
        if expires_at <= self.clock():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return value

    async def put(self, key: str, value: bytes, expires_at: float) -> None:
        if key in self._entries:
            self._drop(key)
        self._entries[key] = (value, expires_at)
        self.bytes += len(key) + len(value)
        while self._entries and (
            len(self._entries) > self.max_entries or self.bytes > self.max_bytes
        ):
            self._drop(next(iter(self._entries)))

    async def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            if key in self._entries:
                self._drop(key)

    async def count(self) -> int:
        return len(self._entries)

    async def close(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def _drop(self, key: str) -> None:
        value, _ = self._entries.pop(key)
        self.bytes -= len(key) + len(value)
