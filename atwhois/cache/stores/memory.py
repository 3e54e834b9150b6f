"""In-process store: entries packed in an arena, within a bound in bytes (issue 69).

An entry as Python objects (a dict's node, its key's str, a slot object, two floats, the
value's bytes) cost ~550 B beyond its ~58 B of data; 2 M entries (1 M identities) took
750 MB. Here an entry is one record in an arena, and the process holds about what its
bytes are: `arena.py` says how (its chunks, its index, eviction, compaction, expiry). An
expired entry is absent, and a sweep every 30 s drops them. `Slot` objects are made only
for the callers that ask (`slot`, `keep`): a copy of the record, whose times a tier
changes with `refresh`.

The decoded forms of the entries read last (what the cache makes of the bytes) are kept
too, within a share of the bound, so that a hit decodes nothing and the bound is on what the
process really holds. The share is the owner's choice: a decoded entry takes about five
times its bytes, and the daemon, which answers most hits from its rendered answers, keeps
few of them (issue 18: 7 KB of memory per identity when every entry kept its own). A
decoded form is dropped with its record (replaced, deleted, evicted, expired): the one kept
for a key is always of the key's current value.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from atwhois.cache.compact import plc_bytes, plc_did
from atwhois.foundation.lru import Lru

from .arena import HEAD, Arena
from .base import OnChange, Stored
from .nonces import MemoryNonces

_SWEEP_SECONDS = 30.0  # how often expired entries are looked for
_READ_PER_KEY = 4  # records a page of a walk reads, at most, per key it may give
_DECODED_OVERHEAD = 200  # what a decoded form costs beyond its key, bytes and size (objects)


# What a decoder makes of stored bytes, and how many bytes that takes in memory.
Decoder = Callable[[str, bytes], tuple[Any, int]]  # (the key, its value)


@dataclass(slots=True)
class Slot:
    """A copy of an entry: changing it changes nothing held (`MemoryStore.refresh` does)."""

    value: bytes
    expires_at: float
    loaded_at: float = 0.0  # when a tier last saw this value in the store below (its timer)


@dataclass(slots=True)
class _Decoded:
    raw: bytes  # what it was decoded from
    decoder: Decoder
    value: Any
    size: int


_PLC_KEY = "d:did:plc:"
_PACKED = 0xFF  # a key's first byte no UTF-8 text has: a did:plc key, its DID in 15 bytes


def _key_bytes(key: str) -> bytes:
    """A key as the arena holds it: a did:plc's as its 15 bytes (the compact entries'
    form), any other as its UTF-8 (a lone surrogate kept, as a URL may carry one)."""
    packed = plc_bytes(key[2:]) if key.startswith(_PLC_KEY) else None
    return key.encode("utf-8", "surrogatepass") if packed is None else b"\xff" + packed


def _key_text(raw: bytes | bytearray) -> str:
    if raw and raw[0] == _PACKED:
        return "d:" + plc_did(bytes(raw[1:]))
    return raw.decode("utf-8", "surrogatepass")


def _starts_with(chunk: bytearray, start: int, size: int, prefix: str, wanted: bytes) -> bool:
    """Whether the key at `start` (`size` bytes) starts with `prefix` (`wanted` its UTF-8)."""
    if size and chunk[start] == _PACKED:  # a did:plc key: its text is needed
        return _PLC_KEY.startswith(prefix) or _key_text(chunk[start : start + size]).startswith(
            prefix
        )
    return chunk.startswith(wanted, start, start + size)


class MemoryStore:
    """The cache's entries in this process's memory, within a byte budget (entries packed
    in an arena, the least recently read evicted first, a share of them decoded): what a
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
            lambda key, decoded: _DECODED_OVERHEAD + len(key) + len(decoded.raw) + decoded.size,
        )
        # the rest of the bound, for the arena and its index
        self._arena = Arena(max_bytes - self._decoded.max_bytes, clock, self._dropped)
        self._swept_at = clock()
        self._nonces = MemoryNonces()
        self._walker = secrets.token_hex(4)  # a walk's position names its store

    def _dropped(self, key: bytes) -> None:
        """A record the arena dropped of itself (expired, evicted): its decoded form too."""
        self._decoded.pop(_key_text(key))

    # --- the bound ------------------------------------------------------------------

    @property
    def used_bytes(self) -> int:
        return self._arena.used_bytes + self._decoded.bytes

    @property
    def max_bytes(self) -> int:
        return self._arena.max_bytes + self._decoded.max_bytes

    # --- reads ----------------------------------------------------------------------

    def slot(self, key: str) -> Slot | None:
        """A copy of the live entry of `key` (an expired one is dropped)."""
        found = self._arena.find(_key_bytes(key))
        if found is None:
            return None
        chunk, start, size, expires_at, loaded_at = found
        return Slot(bytes(chunk[start : start + size]), expires_at, loaded_at)

    async def get(self, key: str) -> Stored | None:
        found = self._arena.find(_key_bytes(key))
        if found is None:
            return None
        chunk, start, size, expires_at, _ = found
        return Stored(bytes(chunk[start : start + size]), expires_at)

    async def decoded(self, key: str, decode: Decoder) -> Any:
        """What `decode` makes of the value of `key` (decoded once, then kept), or None."""
        found = self._arena.find(_key_bytes(key))
        if found is None:
            return None
        kept = self._decoded.get(key)
        if kept is not None and kept.decoder is decode:  # of the current value: see above
            return kept.value
        chunk, start, size, _, _ = found
        raw = bytes(chunk[start : start + size])
        value, cost = decode(key, raw)
        self._decoded.put(key, _Decoded(raw, decode, value, cost))
        return value

    def decode(self, key: str, slot: Slot, decode: Decoder) -> Any:
        """What `decode` makes of `slot`, kept a while when it is the value held for `key`
        (a slot a tier read from below and did not keep is decoded, not kept)."""
        kept = self._decoded.get(key)
        if kept is not None and kept.decoder is decode and kept.raw == slot.value:
            return kept.value
        value, size = decode(key, slot.value)
        if self._arena.holds(_key_bytes(key), slot.value):
            self._decoded.put(key, _Decoded(slot.value, decode, value, size))
        return value

    # --- writes ---------------------------------------------------------------------

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

    def keep(self, key: str, value: bytes, expires_at: float, loaded_at: float = 0.0) -> Slot:
        """Hold `value` for `key` (`loaded_at`: when a tier saw it below, by its timer); a
        copy of what is held. A record larger than the whole bound is not kept (the key's
        earlier value is dropped all the same)."""
        now = self.clock()
        if now - self._swept_at > _SWEEP_SECONDS:
            self._swept_at = now
            self._arena.sweep(now)
        self._arena.keep(_key_bytes(key), value, expires_at, loaded_at)
        self._decoded.pop(key)
        return Slot(value, expires_at, loaded_at)

    def refresh(self, key: str, loaded_at: float, expires_at: float) -> None:
        """Say when a tier last saw the value of `key` below, and its expiry there."""
        self._arena.refresh(_key_bytes(key), loaded_at, expires_at)

    async def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        for key in keys:
            self.forget(key)
        self.announce(keys)

    def forget(self, key: str) -> None:
        self._arena.forget(_key_bytes(key))
        self._decoded.pop(key)

    def clear(self) -> None:
        self._arena.clear()
        self._decoded.clear()

    # --- the rest -------------------------------------------------------------------

    def nonces(self) -> MemoryNonces:
        """This process's own: none in the entries' arena, where they would be evicted."""
        return self._nonces

    def spare(self, keys: Iterable[str]) -> None:
        """Nothing to spare: this store is the only copy of its entries (`TieredStore.spare`)."""

    async def health(self) -> list[str]:
        return []

    async def count(self) -> int:
        return len(self._arena)

    async def scan(self, prefix: str, limit: int) -> list[tuple[str, bytes]]:
        now, wanted = self.clock(), prefix.encode("utf-8", "surrogatepass")
        found: list[tuple[str, bytes]] = []
        for _, offset, chunk, key_size in self._arena.records():
            start = offset + HEAD.size
            if len(found) == limit:
                return found
            if not _starts_with(chunk, start, key_size, prefix, wanted):
                continue
            expires_at, _, size, _, _ = HEAD.unpack_from(chunk, offset)
            if expires_at > now:
                key = _key_text(chunk[start : start + key_size])
                value = bytes(chunk[start + key_size : start + key_size + size])
                found.append((key, value))
        return found

    async def walk(self, prefix: str, limit: int, position: str = "") -> tuple[list[str], str]:
        # By place in the arena, oldest chunk first: a record moved (read and spared by the
        # eviction, or compacted) goes to the newest chunk, after any place a walk can be
        # at, so a key held throughout is seen (twice, maybe). A position is the store's
        # name, a chunk's number in the order chunks were made in, and an offset in it: a
        # chunk freed meanwhile leaves the walk at the next one.
        walker, _, rest = position.partition("@")
        made, _, offset_text = rest.partition(".")
        if walker != self._walker or not made.isdigit() or not offset_text.isdigit():
            made, offset_text = "0", "0"
        wanted = prefix.encode("utf-8", "surrogatepass")
        page: list[str] = []
        budget = _READ_PER_KEY * limit
        for seq, at, chunk, key_size in self._arena.records(int(made), int(offset_text)):
            if len(page) == limit or not budget:
                return page, f"{self._walker}@{seq}.{at}"
            budget -= 1
            start = at + HEAD.size
            if _starts_with(chunk, start, key_size, prefix, wanted):
                page.append(_key_text(chunk[start : start + key_size]))
        return page, ""

    async def close(self) -> None:
        self.clear()
