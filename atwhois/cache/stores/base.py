"""The store interface: bytes under string keys, each with a hard expiry time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import NamedTuple, Protocol

from atwhois.resolver.errors import AtwhoisError

from .nonces import NonceStore

# Told of changes: the keys, or None when anything may have changed.
OnChange = Callable[[Sequence[str] | None], None]


class UnusableStore(AtwhoisError, OSError):
    """A store that cannot be opened as configured (a file that is not a database, a folder
    that cannot be written): a configuration to fix, not an outage to wait out."""


class Stored(NamedTuple):
    value: bytes
    expires_at: float  # seconds since the epoch


class Store(Protocol):
    name: str

    async def get(self, key: str) -> Stored | None:
        """The value and its expiry, or None if absent or past its expiry."""

    async def put(self, key: str, value: bytes, expires_at: float) -> None:
        """Store `value` until `expires_at` (seconds since the epoch)."""

    async def delete(self, keys: Iterable[str]) -> None: ...

    async def count(self) -> int:
        """How many entries are held (expired ones may still be counted)."""

    async def scan(self, prefix: str, limit: int) -> list[tuple[str, bytes]]:
        """At most `limit` unexpired entries whose key starts with `prefix` (in no promised
        order): how a part that keeps a row per item finds its rows after a restart."""

    def nonces(self) -> NonceStore:
        """Where this store keeps the nonces seen (SA-JTI-2), apart from its entries: in
        the file or server other processes share, or (memory) in this process."""
        ...

    async def walk(self, prefix: str, limit: int, position: str = "") -> tuple[list[str], str]:
        """A page of the keys that start with `prefix`: at most about `limit`, from where
        `position` left the walk ("": a new walk), and the position of the next page (""
        once the walk is over). However many keys there are, a page holds only its own: how
        a part goes over every entry of a kind without holding them all. A walk sees every
        key held from its first page to its last at least once (a key added or dropped
        meanwhile, maybe; one past its expiry may be among them). A position is the store's
        own: one another store gave starts the walk again."""

    async def close(self) -> None: ...


class SharedStore(Store, Protocol):
    """A store other processes write too (a SQLite file, a Redis server)."""

    async def watch(self, on_change: OnChange, ready: Callable[[], Awaitable[None]]) -> None:
        """Follow the changes other processes make: await `ready()` once following, then
        call `on_change` for each change. Runs until cancelled; raises when it loses track
        (the caller starts it again, and must assume it missed changes meanwhile)."""
