"""The arena's index (issue 69): where each key's record is, by its hash.

Open addressing with linear probing in segments (`array('Q')`) found through a directory,
by extendible hashing: the directory's entry for the hash's first `depth` bits names the
segment. A slot holds a record's place (chunk and offset, given by the arena) and 28 bits
of its key's hash: a probe compares the key in the arena only when those bits match.
A segment past a load of 0.7 doubles, its slots placed anew from those bits without
reading the arena; one of 16,384 slots splits in two by the next bit of the hash instead
(the directory doubling, as a list of numbers, when the segment used all its bits). So
no growth rebuilds more than one segment: the process is held up for a few milliseconds
whatever the index's size, where doubling one index of 8M slots whole took 1.1 s here.
Deletions shift the probe sequence back (no tombstones). A slot's address is its
segment's number << 32 | where in it.
"""

from __future__ import annotations

from array import array

HASH_BITS = 28
HASH_MASK = (1 << HASH_BITS) - 1
PLACE_BITS = 36  # a slot: the hash's bits, then the record's place in PLACE_BITS
PLACE_MASK = (1 << PLACE_BITS) - 1
OFFSET_BITS = 18  # a place: the chunk's number, then the offset / ALIGN in OFFSET_BITS
OFFSET_MASK = (1 << OFFSET_BITS) - 1
ALIGN = 4  # records start on multiples of 4 bytes: an offset takes 18 bits, not 20
MAX_LOAD = 0.7
MAX_SEGMENT_BITS = 14
_MAX_SEGMENT = 1 << MAX_SEGMENT_BITS
_MAX_DEPTH = HASH_BITS - MAX_SEGMENT_BITS  # a segment's depth and slots share the hash bits
_SLOT_BITS = 32
_SLOT_MASK = (1 << _SLOT_BITS) - 1


class Index:
    """Slots by key hash; `key_at` is where a record's length-prefixed key starts."""

    def __init__(self, key_at: int) -> None:
        self._key_at = key_at
        self._directory = [0]  # by the hash's first `_depth` bits: a segment's number
        self._depth = 0
        self._segments = [array("Q")]  # grown at a first write
        self._depths = [0]  # the hash's first bits that a segment's keys share
        self._shifts = [0]  # a hash >> this, within the segment's size: its home slot
        self.held_in = [0]  # entries in each segment
        self.count = 0
        self.slots = 0

    def find(self, needle: bytes, hashed: int, chunks: list[bytearray | None]) -> int:
        """The slot holding the key `needle` (length-prefixed), or ~ the empty slot where it
        would go."""
        segment = self._directory[hashed >> (HASH_BITS - self._depth)]
        index = self._segments[segment]
        base = segment << _SLOT_BITS
        if not index:
            return ~base  # nothing written to it yet (`make_room` grows it first)
        mask = len(index) - 1
        start = self._key_at
        end = start + len(needle)
        at = (hashed >> self._shifts[segment]) & mask
        while True:
            held = index[at]
            if not held:
                return ~(base | at)
            if held >> PLACE_BITS == hashed:
                chunk = chunks[(held & PLACE_MASK) >> OFFSET_BITS]
                offset = (held & OFFSET_MASK) * ALIGN
                if chunk is not None and chunk[offset + start : offset + end] == needle:
                    return base | at
            at = (at + 1) & mask

    def __getitem__(self, at: int) -> int:
        return self._segments[at >> _SLOT_BITS][at & _SLOT_MASK]

    def __setitem__(self, at: int, held: int) -> None:
        self._segments[at >> _SLOT_BITS][at & _SLOT_MASK] = held

    def add(self, at: int, held: int) -> None:
        """Fill the empty slot `at` (found by `find`, after `make_room`)."""
        self[at] = held
        self.count += 1
        self.held_in[at >> _SLOT_BITS] += 1

    def remove(self, at: int) -> None:
        """Empty slot `at`, shifting back the slots after it that probed past it."""
        segment, at = at >> _SLOT_BITS, at & _SLOT_MASK
        index, shift = self._segments[segment], self._shifts[segment] + PLACE_BITS
        mask = len(index) - 1
        following = at
        while True:
            following = (following + 1) & mask
            held = index[following]
            if not held:
                break
            home = (held >> shift) & mask
            if (at <= following and (home <= at or home > following)) or (
                at > following and following < home <= at
            ):
                index[at] = held
                at = following
        index[at] = 0
        self.count -= 1
        self.held_in[segment] -= 1

    def slot_of(self, place: int, hashed: int) -> int:
        """The slot pointing at record `place`, whose key's hash is `hashed`."""
        segment = self._directory[hashed >> (HASH_BITS - self._depth)]
        index = self._segments[segment]
        mask = len(index) - 1
        at = (hashed >> self._shifts[segment]) & mask
        while index[at] & PLACE_MASK != place:
            at = (at + 1) & mask
        return segment << _SLOT_BITS | at

    def make_room(self, hashed: int) -> None:
        """Room for one more key of hash `hashed`: its segment doubled (to 8 slots at
        first) or, at its largest, split, when past the load."""
        segment = self._directory[hashed >> (HASH_BITS - self._depth)]
        size = len(self._segments[segment])
        if self.held_in[segment] + 1 <= size * MAX_LOAD:
            return
        if size < _MAX_SEGMENT:
            self._rebuild(segment, [segment], max(8, 2 * size))
        elif self._depths[segment] < _MAX_DEPTH:
            self._split(segment)

    def overfull(self, hashed: int) -> bool:
        """Whether the segment of `hashed`, grown and split all it can, is past the load."""
        segment = self._directory[hashed >> (HASH_BITS - self._depth)]
        return self.held_in[segment] > _MAX_SEGMENT * MAX_LOAD

    def _split(self, segment: int) -> None:
        """The segment's keys in two, by the next bit of their hash (1: a new segment)."""
        depth = self._depths[segment] + 1
        if depth > self._depth:  # each entry of the directory twice: one more bit read
            self._directory = [named for named in self._directory for _ in (0, 1)]
            self._depth += 1
        other = len(self._segments)
        self._segments.append(array("Q"))
        self._depths.append(depth)
        self._shifts.append(0)
        self.held_in.append(0)
        self._depths[segment] = depth
        below = self._depth - depth  # the directory's bits past the segments' own
        for number, named in enumerate(self._directory):
            if named == segment and (number >> below) & 1:
                self._directory[number] = other
        self._rebuild(segment, [segment, other], len(self._segments[segment]))

    def _rebuild(self, segment: int, into: list[int], size: int) -> None:
        """Place the slots of `segment` anew in the segments `into` (one, or two chosen by
        the hash bit after the ones they share), each of `size` slots."""
        old = self._segments[segment]
        depth = self._depths[segment]
        shift = HASH_BITS - depth - (size.bit_length() - 1)
        for number in into:
            self.slots += size - len(self._segments[number])
            self._segments[number] = array("Q", bytes(8 * size))
            self._shifts[number] = shift
        targets = [self._segments[number] for number in into]
        home, side_of, mask = PLACE_BITS + shift, PLACE_BITS + HASH_BITS - depth, size - 1
        counts = [0, 0]
        for held in old:
            if held:
                side = (held >> side_of) & 1 if len(into) > 1 else 0
                index = targets[side]
                at = (held >> home) & mask
                while index[at]:
                    at = (at + 1) & mask
                index[at] = held
                counts[side] += 1
        for number, count in zip(into, counts, strict=False):
            self.held_in[number] = count
