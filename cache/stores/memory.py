"""In-process store: least recently used entries go first, within a bound in bytes.

An entry may also keep its decoded form (what the cache makes of the bytes), counted in
the bound too, so a hit decodes nothing and the bound is on what the process really holds.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .base import OnChange, Stored

V = TypeVar("V")
_OVERHEAD = 200  # bytes a slot costs beyond its key and value (objects, dict entries)
_SWEEP_SECONDS = 30.0  # how often expired entries are looked for


class Lru(Generic[V]):
    """Values under string keys within `max_bytes`, each as large as its `put` says;
    `evicted` is told of each value the bound pushed out."""

    def __init__(self, max_bytes: int, evicted: Callable[[str, V], None] | None = None) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[str, tuple[V, int]] = OrderedDict()
        self._evicted = evicted

    def get(self, key: str) -> V | None:
        found = self._items.get(key)
        if found is None:
            return None
        self._items.move_to_end(key)
        return found[0]

    def peek(self, key: str) -> V | None:
        found = self._items.get(key)
        return found[0] if found is not None else None

    def put(self, key: str, value: V, size: int) -> None:
        self.pop(key)
        self._items[key] = (value, size)
        self.bytes += size
        while self.bytes > self.max_bytes and self._items:
            oldest, (evicted, evicted_size) = self._items.popitem(last=False)
            self.bytes -= evicted_size
            if self._evicted is not None:
                self._evicted(oldest, evicted)

    def pop(self, key: str) -> V | None:
        found = self._items.pop(key, None)
        if found is None:
            return None
        self.bytes -= found[1]
        return found[0]

    def items(self) -> Iterator[tuple[str, V]]:
        return ((key, value) for key, (value, _) in list(self._items.items()))

    def clear(self) -> None:
        self._items.clear()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)


# What a decoder makes of stored bytes, and how many bytes that takes in memory.
Decoder = Callable[[bytes], tuple[Any, int]]


@dataclass(slots=True)
class Slot:
    value: bytes
    expires_at: float
    loaded_at: float = 0.0  # when a tier last saw this value in the store below (its timer)
    decoder: Decoder | None = None
    decoded: Any = None
    decoded_size: int = 0

    @property
    def size(self) -> int:
        return _OVERHEAD + len(self.value) + self.decoded_size


class MemoryStore:
    name = "memory"

    def __init__(
        self, max_bytes: int = 64 * 1024 * 1024, clock: Callable[[], float] = time.time
    ) -> None:
        self.clock = clock
        self.listeners: list[OnChange] = []  # told of the keys each put or delete changed
        self._slots: Lru[Slot] = Lru(max_bytes)
        self._swept_at = clock()

    @property
    def used_bytes(self) -> int:
        return self._slots.bytes

    @property
    def max_bytes(self) -> int:
        return self._slots.max_bytes

    def slot(self, key: str) -> Slot | None:
        """The live slot of `key` (an expired one is dropped)."""
        slot = self._slots.get(key)
        if slot is not None and slot.expires_at <= self.clock():
            self._slots.pop(key)
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
        self._slots.put(key, slot, len(key) + slot.size)
        return slot

    async def decoded(self, key: str, decode: Decoder) -> Any:
        """What `decode` makes of the value of `key` (decoded once, then kept), or None."""
        slot = self.slot(key)
        return self.decode(key, slot, decode) if slot is not None else None

    def decode(self, key: str, slot: Slot, decode: Decoder) -> Any:
        """What `decode` makes of `slot`, kept with it when it is the slot held for `key`."""
        if slot.decoder is decode:
            return slot.decoded
        decoded, size = decode(slot.value)
        if self._slots.peek(key) is slot:
            slot.decoded, slot.decoded_size, slot.decoder = decoded, size, decode
            self._slots.put(key, slot, len(key) + slot.size)  # its size changed
        return decoded

    async def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        for key in keys:
            self.forget(key)
        self.announce(keys)

    def forget(self, key: str) -> None:
        self._slots.pop(key)

    def clear(self) -> None:
        self._slots.clear()

    async def health(self) -> list[str]:
        return []

    async def count(self) -> int:
        return len(self._slots)

    async def close(self) -> None:
        self._slots.clear()

    def _sweep(self, now: float) -> None:
        self._swept_at = now
        for key, slot in self._slots.items():
            if slot.expires_at <= now:
                self._slots.pop(key)
