"""A did:plc's history (its `/log/audit`, replayed: P-AUDIT-1) for the faces that show it,
kept a while, fetched once for every caller asking at the same time, within a byte bound.
A page view is not a fetch: the log may be 4 MiB, and a page anyone can load must not
become an amplifier against the directory. A failure to fetch it is not kept (the next
view tries again); a log that breaks rules is kept as what it is (an `Audit` with
findings)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

from atwhois.foundation.lru import Lru

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from atwhois.resolver.plc import Audit

KEPT_FOR = 300.0  # seconds a history is shown as fetched (a page says when it was read)
MAX_BYTES = 16 * 1024 * 1024  # the histories kept, at most (by their operations' count)
BYTES_PER_OP = 1024  # a replayed operation held, about


class Kept(NamedTuple):
    audit: Audit
    fetched_at: float


class Histories:
    def __init__(
        self,
        fetch: Callable[[str], Awaitable[Audit]],
        *,
        clock: Callable[[], float] = time.time,
        kept_for: float = KEPT_FOR,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.fetch, self.clock, self.kept_for = fetch, clock, kept_for
        self._kept: Lru[str, Kept] = Lru(max_bytes, _size)
        self._fetching: dict[str, asyncio.Task[Audit]] = {}
        self.counts = {"fetched": 0, "kept": 0, "joined": 0}

    async def get(self, did: str) -> Kept:
        """The DID's history and when it was fetched; raises what the fetch raised (a
        `ResolutionError`: absent, or the directory failed)."""
        held = self._kept.get(did)
        if held is not None and self.clock() - held.fetched_at < self.kept_for:
            self.counts["kept"] += 1
            return held
        task = self._fetching.get(did)
        if task is None:
            self.counts["fetched"] += 1
            task = self._fetching[did] = asyncio.ensure_future(self._fetched(did))
            task.add_done_callback(lambda _: self._fetching.pop(did, None))
        else:
            self.counts["joined"] += 1
        # one caller giving up does not cancel the fetch the others wait for
        audit = await asyncio.shield(task)
        return self._kept.peek(did) or Kept(audit, self.clock())

    async def _fetched(self, did: str) -> Audit:
        started = self.clock()
        audit = await self.fetch(did)
        self._kept.put(did, Kept(audit, started))
        return audit

    def metrics(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily

        shown = CounterMetricFamily(
            "atwhois_plc_histories",
            "did:plc histories shown, by how: fetched from the directory, kept from an "
            "earlier fetch, or joined to a fetch under way.",
            labels=["how"],
        )
        for how, count in self.counts.items():
            shown.add_metric([how], count)
        yield shown


def _size(did: str, kept: Kept) -> int:
    return len(did) + BYTES_PER_OP * (1 + len(kept.audit.ops))
