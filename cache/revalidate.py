"""`Revalidator`: re-verifies, in the background, identities the cache holds when a source
says they changed: an `#identity` event of an event stream, an operation the PLC mirror in
the process just applied. The next reader then finds a fresh verified answer (or a fresh
refusal) instead of an hour-old one, and never a miss made on purpose.

A change is a reason to look, not an answer: the DID is resolved afresh from the sources,
then every handle it was or is bound to (the one the cached answer declared, the one it
declares now, a hint from the event), and the parts are replaced by the policy's table (a
transient failure keeps what was there). Only DIDs the cache holds (as an answer or as an
absence): the network's other identities are nobody's question here, and resolving each on
every change would flood the upstreams. Changes of one DID are coalesced: one during its
refresh runs one more afterwards, not one per change. Watchers (the audits) hear of what
was re-verified."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

from .resolver import CachedResolver

log = logging.getLogger("atwhois.revalidate")
Watcher = Callable[[set[str]], Awaitable[None]]  # told the DID and handles that changed


class Revalidator:
    def __init__(
        self,
        cached: CachedResolver,
        *,
        concurrency: int = 8,
        watchers: list[Watcher] | None = None,
    ) -> None:
        self.cached = cached
        self.watchers = watchers or []
        self.revalidations = 0
        self.failures = 0
        self._gate = asyncio.Semaphore(concurrency)
        self._running: dict[str, bool] = {}  # DID -> another change came during its refresh
        self._tasks: set[asyncio.Task[None]] = set()

    def changed(self, did: str, hinted: str | None = None) -> None:
        """`did` changed (`hinted`: the handle the source says it has now)."""
        if did in self._running:
            self._running[did] = True  # once more when the one under way ends
            return
        self._running[did] = False
        self.spawn(self._revalidate(did, hinted))

    def changed_many(self, dids: Iterable[str]) -> None:
        for did in dids:
            self.changed(did)

    def tell(self, changed: set[str]) -> None:
        """The watchers hear that these identifiers changed."""
        for watcher in self.watchers:
            self.spawn(watcher(changed))

    def spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _revalidate(self, did: str, hinted: str | None) -> None:
        try:
            again = True
            while again:
                async with self._gate:
                    await self._refresh(did, hinted)
                again = self._running[did]
                self._running[did] = False
        finally:
            del self._running[did]

    async def _refresh(self, did: str, hinted: str | None) -> None:
        held, declared = await self.cached.held(did)
        if not held:
            return
        self.revalidations += 1
        try:
            after = await self.cached.refresh(did)
            handles = {declared, after.declared_handle, hinted} - {None}
            for handle in sorted(h for h in handles if h is not None):
                await self.cached.refresh(handle)
            self.tell({did, *(h for h in handles if h is not None)})
        except Exception as err:  # one bad identity never stops the others
            self.failures += 1
            log.warning(
                json.dumps({"event": "revalidation_failed", "did": did, "error": repr(err)})
            )

    def metrics(self) -> Iterator[Metric]:
        revalidations = CounterMetricFamily(
            "atwhois_stream_revalidations",
            "Identities re-verified because a source said they changed (an #identity event, "
            "an operation the PLC mirror applied), and those that failed.",
            labels=["result"],
        )
        revalidations.add_metric(["done"], self.revalidations - self.failures)
        revalidations.add_metric(["failed"], self.failures)
        yield revalidations
