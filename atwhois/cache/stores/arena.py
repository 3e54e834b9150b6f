"""The memory store's arena (issue 69): its entries as records in chunks of bytes, under an
index of their places, within a bound in bytes on what the chunks and the index take.

- The arena: chunks (bytearrays of a fixed size, at most 1 MiB, so that growth never moves
  one huge buffer), filled one after the other with records [expires_at | loaded_at |
  value length | flags | key length | key | value], each aligned on 4 bytes (a key as the
  store gives it: a did:plc's in 16 bytes, not 32). A record is written once; a new value
  is a new record (the old one is marked dead). A record larger than a chunk is kept in a
  chunk of its own (a stranger's DID document may be large); one larger than the whole
  bound is not kept, nor a key of more than 64 KiB.
- The index (`arena_index`): each record's place (chunk and offset) by its key's hash, in
  segments that grow one at a time.
- Eviction, within the bound: CLOCK (second chance) over the oldest chunk. A record read
  since it was written (its reference bit) is moved to the newest chunk, the others are
  dropped, and the chunk is freed. Dead space (replaced, deleted, expired records) is
  compacted: a chunk without a live record is freed at once, and when half the arena is
  dead the emptiest chunks' live records are moved to the newest, so that churn among a
  few keys pushes no others out. `used_bytes` is what the chunks and the index take.
- Expiry: an expired entry is absent, and a sweep drops them (only from the chunks whose
  soonest expiry is past).
"""

from __future__ import annotations

import bisect
import itertools
import struct
from collections.abc import Callable, Iterator

from .arena_index import (
    ALIGN,
    HASH_MASK,
    OFFSET_BITS,
    OFFSET_MASK,
    PLACE_BITS,
    PLACE_MASK,
    Index,
)

# A record: expires_at, loaded_at, value length, flags, key length; then key and value.
HEAD = struct.Struct("<ddIBH")
_FLAGS = 20  # offset of the flags
_KEY_LENGTH = 21  # offset of the key length (the key follows it)
_TIMES = struct.Struct("<dd")
_KEY_SIZE = struct.Struct("<H")
_MAX_KEY_BYTES = 0xFFFF  # a longer key is not kept (no identifier is as long: a DID's 2 KB)
_LIVE = 1
_REFERENCED = 2  # read since written (or moved): spared once by the eviction

# A record's place in an index slot: its chunk's number in 18 bits (numbers are reused, so
# this bounds the chunks held at once), then its offset / ALIGN; chunk 0 is none.
_MAX_CHUNKS = 1 << 18
_MAX_CHUNK_BYTES = 1 << 20  # within an offset's 18 bits, times 4
_MIN_CHUNK_BYTES = 256
_CHUNKS_IN_BOUND = 32  # a chunk is at most this fraction of the bound: eviction's step
_CHUNK_OVERHEAD = 64  # the bytearray object and its place in the lists
_COMPACT_AT = 0.5  # of the arena dead: the emptiest chunks are compacted
_COMPACT_TO = 0.25

# Where a live value is: its chunk, where it starts and its size; its expiry and load times.
Place = tuple[bytearray, int, int, float, float]


def _hash(key: bytes) -> int:
    return hash(key) & HASH_MASK


class Arena:
    """Values under their keys (both bytes), packed in chunks within `max_bytes` (the
    chunks and their index); `dropped` is told of each key whose record the arena drops of
    itself (expired, evicted): what was made of its value goes too."""

    def __init__(
        self, max_bytes: int, clock: Callable[[], float], dropped: Callable[[bytes], object]
    ) -> None:
        self.max_bytes = max_bytes
        self._clock = clock
        self._dropped = dropped
        chunk = min(_MAX_CHUNK_BYTES, max(_MIN_CHUNK_BYTES, max_bytes // _CHUNKS_IN_BOUND))
        self._chunk_bytes = chunk - chunk % ALIGN
        self._made = itertools.count(1)  # not reset by `clear`: a position stays unique
        self.clear()

    def clear(self) -> None:
        # by chunk number (0 unused: an index slot of 0 is empty)
        self._chunks: list[bytearray | None] = [None]
        self._ends: list[int] = [0]  # where its records end (the open chunk: where to write)
        self._live: list[int] = [0]  # bytes of its live records
        self._soonest: list[float] = [0.0]  # no live record in it expires before this
        self._seqs: list[int] = [0]  # its place in the order chunks were made in
        self._free: list[int] = []  # chunk numbers to reuse
        self._order: list[int] = []  # the chunks held, oldest first
        self._open = 0  # the chunk written to (0: none yet)
        self._arena_bytes = 0  # the chunks' memory
        self._live_bytes = 0
        self._index = Index(_KEY_LENGTH)
        self._moving = False  # an eviction or compaction under way: no other starts

    @property
    def used_bytes(self) -> int:
        return self._arena_bytes + self._index.slots * 8

    def __len__(self) -> int:
        return self._index.count

    # --- reads ----------------------------------------------------------------------

    def _find(self, key: bytes, hashed: int) -> int:
        """The index slot holding `key`, or ~ the empty slot where it would go (-1 for a
        key too long to be held)."""
        if len(key) > _MAX_KEY_BYTES:
            return -1
        return self._index.find(_KEY_SIZE.pack(len(key)) + key, hashed, self._chunks)

    def _located(self, held: int) -> tuple[int, bytearray, int]:
        """The chunk's number, the chunk and the offset of the record an index slot holds."""
        number = (held & PLACE_MASK) >> OFFSET_BITS
        chunk = self._chunks[number]
        assert chunk is not None  # an index slot names only a chunk that is held
        return number, chunk, (held & OFFSET_MASK) * ALIGN

    def find(self, key: bytes) -> Place | None:
        """Where the live value of `key` is (an expired one is dropped); the record is
        marked as read."""
        at = self._find(key, _hash(key))
        if at < 0:
            return None
        _, chunk, offset = self._located(self._index[at])
        expires_at, loaded_at, size, flags, key_size = HEAD.unpack_from(chunk, offset)
        if expires_at <= self._clock():
            self._drop(at)
            self._dropped(key)
            return None
        if not flags & _REFERENCED:
            chunk[offset + _FLAGS] = flags | _REFERENCED
        return chunk, offset + HEAD.size + key_size, size, expires_at, loaded_at

    def holds(self, key: bytes, value: bytes) -> bool:
        """Whether `value` is what is held for `key` (expired or not; not marked as read)."""
        at = self._find(key, _hash(key))
        if at < 0:
            return False
        _, chunk, offset = self._located(self._index[at])
        _, _, size, _, key_size = HEAD.unpack_from(chunk, offset)
        start = offset + HEAD.size + key_size
        return bytes(chunk[start : start + size]) == value

    def records(self, seq: int = 0, offset: int = 0) -> Iterator[tuple[int, int, bytearray, int]]:
        """The live records, oldest chunk first, from `offset` in the chunk made `seq`-th
        (from the start of the next one made, when that chunk is gone): the chunk's `seq`,
        the record's offset, its chunk and its key's length (the key follows the `HEAD`)."""
        order = self._order
        which = bisect.bisect_left(order, seq, key=self._seqs.__getitem__)
        if which < len(order) and self._seqs[order[which]] != seq:
            offset = 0
        for number in order[which:]:
            chunk = self._chunks[number]
            assert chunk is not None
            for at, _, flags, key_size in self._chunk_records(number, offset):
                if flags & _LIVE:
                    yield self._seqs[number], at, chunk, key_size
            offset = 0

    # --- writes ---------------------------------------------------------------------

    def keep(self, key: bytes, value: bytes, expires_at: float, loaded_at: float) -> None:
        """Hold `value` for `key`. A record larger than the whole bound is not kept (the
        key's earlier value is dropped all the same)."""
        size = HEAD.size + len(key) + len(value)
        if (
            size + _CHUNK_OVERHEAD + self._index.slots * 8 > self.max_bytes
            or len(key) > _MAX_KEY_BYTES
        ):
            self.forget(key)
            return
        record = HEAD.pack(expires_at, loaded_at, len(value), _LIVE, len(key))
        # Written before the index is looked at: a compaction the write starts moves
        # records, and finds each by its place in the index.
        place = self._append(record + key + value, expires_at)
        hashed = _hash(key)
        self._index.make_room(hashed)
        at = self._find(key, hashed)
        if at >= 0:
            self._kill(self._index[at])
            self._index[at] = hashed << PLACE_BITS | place
        else:
            self._index.add(~at, hashed << PLACE_BITS | place)
        self._within_bound(hashed)

    def refresh(self, key: bytes, loaded_at: float, expires_at: float) -> None:
        """Set the times of the record of `key`, if one is held."""
        at = self._find(key, _hash(key))
        if at < 0:
            return
        number, chunk, offset = self._located(self._index[at])
        _TIMES.pack_into(chunk, offset, expires_at, loaded_at)
        self._soonest[number] = min(self._soonest[number], expires_at)

    def _append(self, record: bytes, expires_at: float) -> int:
        """Write `record` in the open chunk (in one of its own when larger than a chunk):
        its place."""
        size = -(-len(record) // ALIGN) * ALIGN
        if size > self._chunk_bytes:
            while self._open:  # closed: what is written later stays after this chunk (walks)
                self._close_open()  # (a compaction it starts writes to a chunk it opens)
            number = self._new_chunk(size)
        else:
            while not self._open or self._ends[self._open] + size > self._chunk_bytes:
                if self._open:
                    self._close_open()
                else:
                    self._open = self._new_chunk(self._chunk_bytes)
            number = self._open
        chunk = self._chunks[number]
        assert chunk is not None
        offset = self._ends[number]
        chunk[offset : offset + len(record)] = record
        self._ends[number] = offset + size
        self._live[number] += size
        self._live_bytes += size
        if expires_at < self._soonest[number]:
            self._soonest[number] = expires_at
        return number << OFFSET_BITS | offset // ALIGN

    def _new_chunk(self, size: int) -> int:
        if self._free:
            number = self._free.pop()
        else:
            number = len(self._chunks)
            assert number < _MAX_CHUNKS  # kept below by `_within_bound`
            for column in (self._ends, self._live, self._seqs):
                column.append(0)
            self._soonest.append(0.0)
            self._chunks.append(None)
        self._chunks[number] = bytearray(size)
        self._ends[number] = self._live[number] = 0
        self._soonest[number] = float("inf")
        self._seqs[number] = next(self._made)
        self._order.append(number)
        self._arena_bytes += size + _CHUNK_OVERHEAD
        return number

    def _close_open(self) -> None:
        number, self._open = self._open, 0
        chunk = self._chunks[number]
        assert chunk is not None
        if not self._live[number]:
            self._free_chunk(number)
            return
        unused = len(chunk) - self._ends[number]
        if unused > len(chunk) // 8:  # given back (a chunk closed early for a large record)
            self._chunks[number] = chunk[: self._ends[number]]  # a copy: `del` keeps the memory
            self._arena_bytes -= unused
        if not self._moving and self._arena_bytes - self._live_bytes > self._arena_bytes * (
            _COMPACT_AT
        ):
            self._compact()

    def _free_chunk(self, number: int) -> None:
        chunk = self._chunks[number]
        assert chunk is not None and not self._live[number]
        self._arena_bytes -= len(chunk) + _CHUNK_OVERHEAD
        self._chunks[number] = None
        self._order.remove(number)
        self._free.append(number)
        if number == self._open:
            self._open = 0

    # --- records dropped ------------------------------------------------------------

    def _kill(self, held: int) -> None:
        """Mark the record at index slot value `held` dead (its index slot is the caller's)."""
        number, chunk, offset = self._located(held)
        _, _, size, _, key_size = HEAD.unpack_from(chunk, offset)
        chunk[offset + _FLAGS] = 0
        length = -(-(HEAD.size + key_size + size) // ALIGN) * ALIGN
        self._live[number] -= length
        self._live_bytes -= length
        if not self._live[number] and number != self._open and not self._moving:
            self._free_chunk(number)

    def _drop(self, at: int) -> None:
        """Drop the entry at index slot `at` (`dropped` is the caller's to tell)."""
        self._kill(self._index[at])
        self._index.remove(at)

    def forget(self, key: bytes) -> None:
        at = self._find(key, _hash(key))
        if at >= 0:
            self._drop(at)

    # --- eviction and compaction ----------------------------------------------------

    def _chunk_records(self, number: int, start: int = 0) -> Iterator[tuple[int, int, int, int]]:
        """The records of a chunk from offset `start`: offset, length, flags, key length."""
        chunk = self._chunks[number]
        assert chunk is not None
        offset, end = start, self._ends[number]
        while offset < end:
            _, _, size, flags, key_size = HEAD.unpack_from(chunk, offset)
            length = -(-(HEAD.size + key_size + size) // ALIGN) * ALIGN
            yield offset, length, flags, key_size
            offset += length

    def _within_bound(self, hashed: int) -> None:
        while (
            self.used_bytes > self.max_bytes
            or self._index.overfull(hashed)  # the segment just written to, grown all it can
            or len(self._order) > _MAX_CHUNKS - 64  # each chunk named by 18 bits
        ) and self._order:
            self._evict(self._order[0])

    def _evict(self, number: int) -> None:
        """CLOCK over the oldest chunk: what was read since it was written (and is still
        live) moves to the newest, the rest goes; then the chunk."""
        self._empty(number, spare=number != self._open, now=self._clock())

    def _compact(self) -> None:
        """Move the live records of the emptiest closed chunks to the newest, until a
        quarter of the arena at most is dead."""
        while self._arena_bytes - self._live_bytes > self._arena_bytes * _COMPACT_TO:
            closed = [n for n in self._order if n != self._open]
            if not closed:
                return
            emptiest = min(closed, key=lambda n: self._live[n] / self._ends[n])
            if self._live[emptiest] / self._ends[emptiest] > 1 - _COMPACT_AT:
                return  # the dead space is spread thin: not worth a move
            self._empty(emptiest, spare=True, now=None)

    def _empty(self, number: int, *, spare: bool, now: float | None) -> None:
        """Move chunk `number`'s live records to the newest and free it: all of them
        (`now` None: compaction), or those read since written and unexpired at `now`
        (eviction), the others dropped; `spare` False: none moved."""
        chunk = self._chunks[number]
        assert chunk is not None
        self._moving = True
        if number == self._open:
            self._open = 0
        try:
            for offset, length, flags, key_size in list(self._chunk_records(number)):
                if not flags & _LIVE:
                    continue
                start = offset + HEAD.size
                key = bytes(chunk[start : start + key_size])
                at = self._index.slot_of(number << OFFSET_BITS | offset // ALIGN, _hash(key))
                expires_at = HEAD.unpack_from(chunk, offset)[0]
                keeps = now is None or (flags & _REFERENCED and expires_at > now)
                self._live[number] -= length
                self._live_bytes -= length
                if spare and keeps:
                    record = bytearray(chunk[offset : offset + length])
                    record[_FLAGS] = _LIVE if now is not None else flags
                    place = self._append(bytes(record), expires_at)
                    self._index[at] = self._index[at] & ~PLACE_MASK | place
                else:
                    self._index.remove(at)
                    self._dropped(key)
        finally:
            self._moving = False
        self._free_chunk(number)

    # --- expiry -----------------------------------------------------------------------

    def sweep(self, now: float) -> None:
        """Drop the records expired at `now` (from the chunks whose soonest expiry is past)."""
        for number in list(self._order):
            if self._soonest[number] > now:
                continue
            chunk = self._chunks[number]
            assert chunk is not None
            soonest = float("inf")
            for offset, _, flags, key_size in list(self._chunk_records(number)):
                if not flags & _LIVE:
                    continue
                expires_at = HEAD.unpack_from(chunk, offset)[0]
                if expires_at > now:
                    soonest = min(soonest, expires_at)
                    continue
                start = offset + HEAD.size
                key = bytes(chunk[start : start + key_size])
                self._drop(self._index.slot_of(number << OFFSET_BITS | offset // ALIGN, _hash(key)))
                self._dropped(key)
            if self._chunks[number] is not None:
                self._soonest[number] = soonest
