"""Where a stream's cursor lives between connections and restarts: in memory, or in the
cache store (a restart resumes; with Redis, the daemons following one source share it).
A cursor is kept under its source's URL, so a seq is never sent to another source."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from atwhois.cache.stores.base import Store
from atwhois.resolver.untrusted import BadNumber, parse_count


class Cursor(Protocol):
    """Where the cursor lives between connections and restarts."""

    async def load(self) -> int | None: ...

    async def save(self, seq: int | None) -> None: ...


@dataclass
class MemoryCursor:
    seq: int | None = None

    async def load(self) -> int | None:
        return self.seq

    async def save(self, seq: int | None) -> None:
        self.seq = seq


class StoreCursor:
    """The cursor as an entry of the cache store: it survives a restart, and with Redis the
    daemons that follow one relay share it."""

    KEEP = 30 * 24 * 3600.0  # a month: older than any relay's backfill window

    def __init__(self, store: Store, url: str) -> None:
        self.store, self.key = store, f"stream-cursor:{url.rstrip('/')}"

    async def load(self) -> int | None:
        stored = await self.store.get(self.key)
        text = stored.value.decode("ascii", "replace") if stored else ""
        try:  # a cursor as this process wrote it: ASCII digits within 64 bits
            return parse_count(text, name="cursor")
        except BadNumber:
            return None

    async def save(self, seq: int | None) -> None:
        if seq is None:
            await self.store.delete([self.key])
        else:
            await self.store.put(self.key, str(seq).encode(), time.time() + self.KEEP)
