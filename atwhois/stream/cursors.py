"""A stream's cursor, and where it lives between connections and restarts: in memory, or in
the cache store (a restart resumes; with Redis, the daemons following one source share it).
A cursor is kept under its source's URL, so a seq is never sent to another source.

A cursor is one of two kinds (F-CUR-4), known from what gave it and kept as such: a `Seq`,
the source's own number (a relay's, a PDS's, a Jetstream v2 instance's), or a `Time`, a
Jetstream v1 message's `time_us`. In the store it is plain digits, as earlier versions
wrote it and as the reference Jetstream reads a cursor on both its endpoints: below 10^15 a
seq, from 10^15 on a time in microseconds (`jetstream_cursor`). The digits say which
without a guess because F-CUR-1 keeps each kind on its side: a Jetstream seq of 10^15 or
more and a time before 2001-09-09 (10^15 µs) are refused, never stored. A relay's or a
PDS's stored cursor is a seq whatever its size (`Seq`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from atwhois.cache.stores.base import Store
from atwhois.resolver.untrusted import BadNumber, parse_count

TIME_FROM = 10**15  # the reference Jetstream's line between the two kinds (its cursor.go)


@dataclass(frozen=True, slots=True)
class Seq:
    """A source's own sequence number."""

    value: int


@dataclass(frozen=True, slots=True)
class Time:
    """A Jetstream v1 message's `time_us`: microseconds since the epoch."""

    value: int


Position = Seq | Time


def jetstream_cursor(value: int) -> Position:
    """Digits read as the reference Jetstream reads a cursor."""
    return Seq(value) if value < TIME_FROM else Time(value)


class Cursor(Protocol):
    """Where the cursor lives between connections and restarts."""

    async def load(self) -> Position | None: ...

    async def save(self, position: Position | None) -> None: ...


@dataclass
class MemoryCursor:
    position: Position | None = None

    async def load(self) -> Position | None:
        return self.position

    async def save(self, position: Position | None) -> None:
        self.position = position


class StoreCursor:
    """The cursor as an entry of the cache store: it survives a restart, and with Redis the
    daemons that follow one relay share it. `read`: what the stored digits are for this
    source (`Seq`, or `jetstream_cursor`)."""

    KEEP = 30 * 24 * 3600.0  # a month: older than any relay's backfill window

    def __init__(self, store: Store, url: str, read: Callable[[int], Position]) -> None:
        self.store, self.key, self.read = store, f"stream-cursor:{url.rstrip('/')}", read

    async def load(self) -> Position | None:
        stored = await self.store.get(self.key)
        text = stored.value.decode("ascii", "replace") if stored else ""
        try:  # a cursor as this process wrote it: ASCII digits within 64 bits
            return self.read(parse_count(text, name="cursor"))
        except BadNumber:
            return None

    async def save(self, position: Position | None) -> None:
        if position is None:
            await self.store.delete([self.key])
        else:
            digits = str(position.value).encode()
            await self.store.put(self.key, digits, time.time() + self.KEEP)
