"""In-process store: least recently used entries go first, within a bound in bytes.

The decoded forms of the entries read last (what the cache makes of the bytes) are kept
too, within a share of the bound, so that a hit decodes nothing and the bound is on what the
process really holds. The share is the owner's choice: a decoded entry takes about five
times its bytes, and the daemon, which answers most hits from its rendered answers, keeps
few of them (issue 18: 7 KB of memory per identity when every entry kept its own).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from atwhois.foundation.lru import Lru

from .base import OnChange, Stored
from .nonces import MemoryNonces

_OVERHEAD = 200  # bytes a slot costs beyond its key and value (objects, dict entries)
_SWEEP_SECONDS = 30.0  # how often expired entries are looked for
_WALKS = 4  # walks whose keys are held at once (`walk`)
_READ_PER_KEY = 4  # keys a page of a walk reads, at most, per key it may give


# What a decoder makes of stored bytes, and how many bytes that takes in memory.
Decoder = Callable[[str, bytes], tuple[Any, int]]  # (the key, its value)


@dataclass(slots=True)
class Slot:
    value: bytes  # never replaced: a new value is a new slot (its size must not change)
    expires_at: float
    loaded_at: float = 0.0  # when a tier last saw this value in the store below (its timer)

    @property
    def size(self) -> int:
        return _OVERHEAD + len(self.value)


@dataclass(slots=True)
class _Decoded:
    slot: Slot  # what it was decoded from: kept only while that slot is the key's
    decoder: Decoder
    value: Any
    size: int


class MemoryStore:
    """The cache's entries in this process's memory, within a byte budget (the least
    recently used go first; entries are kept packed, a share of them decoded): what a
    library uses alone, and the first tier in front of SQLite or Redis."""

    name = "memory"

    def __init__(
        self,
        max_bytes: int = 64 * 1024 * 1024,
        clock: Callable[[], float] = time.time,
        *,
        decoded_share: float = 0.75,  # of max_bytes, at most, for decoded entries
    ) -> None:
        self.clock = clock
        self.listeners: list[OnChange] = []  # told of the keys each put or delete changed
        self._decoded: Lru[str, _Decoded] = Lru(
            int(max_bytes * decoded_share),
            lambda key, decoded: _OVERHEAD + len(key) + decoded.size,
        )
        self._slots: Lru[str, Slot] = Lru(
            max_bytes - self._decoded.max_bytes,
            lambda key, slot: len(key) + slot.size,
            evicted=self._evicted,
        )
        self._swept_at = clock()
        self._nonces = MemoryNonces()
        self._walks: dict[str, list[str]] = {}  # a walk's name -> the keys it goes over
        self._walk_names = itertools.count(1)

    def _evicted(self, key: str, _: Slot) -> None:
        self._decoded.pop(key)

    @property
    def used_bytes(self) -> int:
        return self._slots.bytes + self._decoded.bytes

    @property
    def max_bytes(self) -> int:
        return self._slots.max_bytes + self._decoded.max_bytes

    def slot(self, key: str) -> Slot | None:
        """The live slot of `key` (an expired one is dropped)."""
        slot = self._slots.get(key)
        if slot is not None and slot.expires_at <= self.clock():
            self.forget(key)
            return None
        return slot

    async def get(self, key: str) -> Stored | None:
        slot = self.slot(key)
        return Stored(slot.value, slot.expires_at) if slot else None

    @property
    def following(self) -> bool:
        """Whether every change reaches `listeners` (nothing else writes here: always)."""
        return True

    async def put(self, key: str, value: bytes, expires_at: float) -> None:
        self.keep(key, value, expires_at)
        self.announce([key])

    def announce(self, keys: Sequence[str] | None) -> None:
        """Tell the listeners these keys changed (None: anything may have), also when what
        a key means changed rather than its bytes (an account's status)."""
        for listener in self.listeners:
            listener(keys)

    def keep(self, key: str, value: bytes, expires_at: float) -> Slot:
        now = self.clock()
        if now - self._swept_at > _SWEEP_SECONDS:
            self._sweep(now)
        slot = Slot(value, expires_at)
        self._decoded.pop(key)
        self._slots.put(key, slot)
        return slot

    async def decoded(self, key: str, decode: Decoder) -> Any:
        """What `decode` makes of the value of `key` (decoded once, then kept), or None."""
        slot = self.slot(key)
        return self.decode(key, slot, decode) if slot is not None else None

    def decode(self, key: str, slot: Slot, decode: Decoder) -> Any:
        """What `decode` makes of `slot`, kept a while when it is the slot held for `key`."""
        kept = self._decoded.get(key)
        if kept is not None and kept.slot is slot and kept.decoder is decode:
            return kept.value
        value, size = decode(key, slot.value)
        if self._slots.peek(key) is slot:
            self._decoded.put(key, _Decoded(slot, decode, value, size))
        return value

    async def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        for key in keys:
            self.forget(key)
        self.announce(keys)

    def forget(self, key: str) -> None:
        self._slots.pop(key)
        self._decoded.pop(key)

    def nonces(self) -> MemoryNonces:
        """This process's own: none in the entries' LRU, where they would be evicted."""
        return self._nonces

    def spare(self, keys: Iterable[str]) -> None:
        """Nothing to spare: this store is the only copy of its entries (`TieredStore.spare`)."""

    def clear(self) -> None:
        self._slots.clear()
        self._decoded.clear()

    async def health(self) -> list[str]:
        return []

    async def count(self) -> int:
        return len(self._slots)

    async def scan(self, prefix: str, limit: int) -> list[tuple[str, bytes]]:
        now = self.clock()
        found = ((k, s) for k, s in self._slots.items() if k.startswith(prefix))
        return list(itertools.islice(((k, s.value) for k, s in found if s.expires_at > now), limit))

    async def walk(self, prefix: str, limit: int, position: str = "") -> tuple[list[str], str]:
        # The keys have no order a position could resume in (the least recently used order
        # moves with every read), and finding the keys after a given one took a pass over
        # them all for each page (0.1 s a page at 300,000 keys, the loop blocked). So a walk
        # goes over its keys as they were when it began: one copy of their list (references
        # to the store's own keys, 8 bytes each; made once a walk, as the sweep of expired
        # entries makes one every 30 s), a page at a time, each page reading at most a few
        # times `limit` of them.
        name, _, offset = position.rpartition("@")
        keys = self._walks.get(name)
        if keys is None or not offset.isdigit():
            name, keys, offset = f"walk{next(self._walk_names)}", list(self._slots.keys()), "0"
            self._walks[name] = keys
            while len(self._walks) > _WALKS:  # the oldest walk's position starts it again
                del self._walks[next(iter(self._walks))]
        start = int(offset)
        end = min(len(keys), start + _READ_PER_KEY * limit)
        page: list[str] = []
        for index in range(start, end):
            if keys[index].startswith(prefix):
                page.append(keys[index])
                if len(page) == limit:
                    end = index + 1
                    break
        if end == len(keys):
            del self._walks[name]
            return page, ""
        return page, f"{name}@{end}"

    async def close(self) -> None:
        self.clear()
        self._walks.clear()

    def _sweep(self, now: float) -> None:
        self._swept_at = now
        for key, slot in self._slots.items():
            if slot.expires_at <= now:
                self.forget(key)
