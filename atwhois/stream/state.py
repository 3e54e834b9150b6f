"""What `/_health` and `/metrics` say about one event stream (`StreamState`), kept by its
`Subscriber` (and sent up by a child process that runs one), and its gaps of late
(`RecentGaps`, kept by the daemon: a child's state starts again with the child)."""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .cursors import Position, Time

GAP_WINDOW = 600.0  # seconds over which a stream's gaps are counted (F-CUR-6)
GAP_FAULT = 3  # more gaps than this in the window: the stream is a fault in /_health


@dataclass
class StreamState:
    """What `/_health` and `/metrics` say about the stream."""

    url: str
    connected: bool = False
    cursor: Position | None = None
    reconnects: int = 0
    events: Counter[str] = field(default_factory=Counter)  # by type, skipped ones included
    malformed: int = 0
    outdated_cursor: int = 0
    backwards: int = 0  # frames whose seq was not after the cursor
    implausible: int = 0  # frames whose seq no source can have sent (not applied)
    gaps: int = 0  # events may have been missed: followed from the present (F-CUR-1..4)
    lag_s: float | None = None  # now minus the last event's own time
    last_error: str | None = None
    role: str | None = None  # "relay" or "pds", once the host said which
    pds_host: str | None = None  # a PDS's own host name (of its did:web)
    progress_at: float = field(default_factory=time.monotonic)  # a complete message
    stall_after: float = 90.0

    def problem(self, now: float | None = None) -> str | None:
        """Why this stream is not followed (None: it is): no complete message for longer
        than `stall_after` seconds, connected or not."""
        idle = (now or time.monotonic()) - self.progress_at
        if idle <= self.stall_after:
            return None
        why = f": {self.last_error}" if self.last_error else ""
        return f"no progress from the event stream {self.url} for {idle:.0f} s{why}"

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "connected": self.connected,
            "cursor": None if self.cursor is None else self.cursor.value,
            "cursor_kind": kind_of(self.cursor),
            "reconnects": self.reconnects,
            "events": dict(self.events),
            "malformed": self.malformed,
            "outdated_cursor": self.outdated_cursor,
            "backwards": self.backwards,
            "implausible": self.implausible,
            "gaps": self.gaps,
            "lag_s": None if self.lag_s is None else round(self.lag_s, 3),
            "last_error": self.last_error,
            "role": self.role,
            "pds_host": self.pds_host,
            "problem": self.problem(),
        }


def kind_of(position: Position | None) -> str | None:
    """What a cursor is, in words: "seq", "time" (None: no cursor)."""
    if position is None:
        return None
    return "time" if isinstance(position, Time) else "seq"


class RecentGaps:
    """A stream's gaps in the last `GAP_WINDOW` seconds, counted by the second they came in:
    what it holds is the window's seconds at most, however many gaps a stream makes."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._seconds: deque[list[int]] = deque()  # [second, gaps in it], oldest first

    def add(self) -> None:
        second = int(self.clock())
        if self._seconds and self._seconds[-1][0] == second:
            self._seconds[-1][1] += 1
        else:
            self._seconds.append([second, 1])
        self._forget(second)

    def count(self) -> int:
        self._forget(int(self.clock()))
        return sum(gaps for _, gaps in self._seconds)

    def fault(self, url: str) -> str | None:
        """Why the stream is a fault (F-CUR-6): more than `GAP_FAULT` gaps in the window."""
        gaps = self.count()
        if gaps <= GAP_FAULT:
            return None
        return (
            f"{gaps} gaps in the last {GAP_WINDOW / 60:g} minutes on the event stream {url} "
            f"(more than {GAP_FAULT}): it keeps losing events, and each owes a pass "
            "re-verifying every identity held"
        )

    def _forget(self, second: int) -> None:
        while self._seconds and self._seconds[0][0] <= second - GAP_WINDOW:
            self._seconds.popleft()
