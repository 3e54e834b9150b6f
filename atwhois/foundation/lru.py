"""The one bounded map of the house: least recently used values go first, within a bound in
bytes (the cache's memory tier and its rendered answers, the DNSSEC walk's proofs)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Lru(Generic[K, V]):
    """Values under their keys within `max_bytes`, each as large as `size_of` says (which
    must say the same of a value as long as it is held: sizes are not stored, as a tuple
    and an int per item were most of a small item's cost); `evicted` is told of each value
    the bound pushed out."""

    def __init__(
        self,
        max_bytes: int,
        size_of: Callable[[K, V], int],
        evicted: Callable[[K, V], None] | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[K, V] = OrderedDict()
        self._size_of = size_of
        self._evicted = evicted

    def get(self, key: K) -> V | None:
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
        return found

    def peek(self, key: K) -> V | None:
        return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        self.pop(key)
        self._items[key] = value
        self.bytes += self._size_of(key, value)
        while self.bytes > self.max_bytes and self._items:
            oldest, evicted = self._items.popitem(last=False)
            self.bytes -= self._size_of(oldest, evicted)
            if self._evicted is not None:
                self._evicted(oldest, evicted)

    def pop(self, key: K) -> V | None:
        found = self._items.pop(key, None)
        if found is not None:
            self.bytes -= self._size_of(key, found)
        return found

    def keys(self) -> Iterator[K]:
        """The keys, least recently used first, as they are: read them before the map
        changes (no copy is made)."""
        return iter(self._items)

    def items(self) -> Iterator[tuple[K, V]]:
        return iter(list(self._items.items()))

    def clear(self) -> None:
        self._items.clear()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)
