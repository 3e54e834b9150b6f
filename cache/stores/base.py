"""The store interface: bytes under string keys, each with a hard expiry time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class Store(Protocol):
    name: str

    async def get(self, key: str) -> bytes | None:
        """The value, or None if absent or past its expiry."""

    async def put(self, key: str, value: bytes, expires_at: float) -> None:
        """Store `value` until `expires_at` (seconds since the epoch)."""

    async def delete(self, keys: Iterable[str]) -> None: ...

    async def count(self) -> int:
        """How many entries are held (expired ones may still be counted)."""

    async def close(self) -> None: ...
