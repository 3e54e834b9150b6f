"""A body read from a stranger (or a server of one's own) chunk by chunk, within a size cap
and, where the client has no overall deadline of its own, within one: every outbound
client (the fetcher, DoH, the daemon's client, the mirror's upstream) reads through this,
so that a body past its cap, or one that trickles past its deadline, is refused the same
way, the moment it happens, with what each client's callers understand."""

from __future__ import annotations

import time
from collections.abc import Callable


class BoundedBody:
    """`add` each chunk as it comes; `too_large(size)` is raised once more than `max_bytes`
    came, `too_slow(size)` once `time.monotonic()` passed `deadline` (None: no deadline
    here). `value()` is the body."""

    __slots__ = ("_chunks", "deadline", "max_bytes", "size", "too_large", "too_slow")

    def __init__(
        self,
        max_bytes: int,
        too_large: Callable[[int], Exception],
        *,
        deadline: float | None = None,
        too_slow: Callable[[int], Exception] | None = None,
    ) -> None:
        self.max_bytes, self.too_large = max_bytes, too_large
        self.deadline, self.too_slow = deadline, too_slow
        self.size = 0
        self._chunks: list[bytes] = []

    def announced(self, length: int | None) -> None:
        """A length the answer announced (Content-Length): past the cap, refused unread."""
        if length is not None and length > self.max_bytes:
            raise self.too_large(length)

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise self.too_large(self.size)
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise (self.too_slow or self.too_large)(self.size)
        self._chunks.append(chunk)

    def value(self) -> bytes:
        return b"".join(self._chunks)
