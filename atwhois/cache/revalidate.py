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
was re-verified.

An event names a change the document's source may not serve yet (a replica behind, a mirror
between two polls): it is a claim (`cache.claims`), opened as the event is heard, against
the document held then. The answer held is served as revalidating from then on, and the DID
is re-checked with back-off (0.5 s, doubling, up to 8 s) until a resolution shows the change
or the claim's window (30 s) ends; what the source says then is taken as it is. A PLC
mirror's changes are no claim: its document is the one the operation it just applied
makes.

A claim is compared with the document held when its event was heard, not when its refresh
starts: an event heard during another refresh of the DID waits for that one, which may
have stored the very change it names; compared with that document, it would wait out its
whole window for a change that had shown already. Two changes of one DID closer together
than the source's lag are not told apart: the first document that differs settles both.

At most `max_pending` DIDs are being re-verified (and so have a claim open) at once: past
that, a change is counted (`overflow`) and not followed: the answer held ages by the policy
as it would without the event. A flood of events costs memory and upstream requests up to
that bound, not up to the event rate. A gap in an event stream is no such flood: every held
identity is re-verified by one pass over them (`sweep`), a few at a time (`recheck`).

A fleet of daemons on one shared store hears each event once per daemon: the first to
claim it in the shared store (`Store.nonces`, for the claim's window) re-verifies the DID
and writes what it finds where the others read it; the others leave it (`fleet`).
(F-CUR-7)"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from atwhois.foundation import defaults
from atwhois.resolver import Identity

from .resolver import CachedResolver
from .stores.nonces import NoncesUnavailable

if TYPE_CHECKING:
    from prometheus_client.core import Metric

log = logging.getLogger("atwhois.revalidate")
CLAIM_WINDOW = 30.0  # seconds a claim waits for its change to show
FIRST_RECHECK, LAST_RECHECK = 0.5, 8.0  # the back-off between re-checks
Watcher = Callable[[set[str]], Awaitable[None]]  # told the DID and handles that changed


class Change(NamedTuple):
    hinted: str | None  # the handle the source says the DID has now


class Revalidator:
    def __init__(
        self,
        cached: CachedResolver,
        *,
        concurrency: int = 8,
        watchers: list[Watcher] | None = None,
        max_pending: int = defaults.MAX_CLAIMS,
    ) -> None:
        self.cached = cached
        self.max_pending = max_pending
        self.watchers = watchers or []
        self.revalidations = 0
        self.failures = 0
        self.claims: Counter[str] = Counter()  # how the claims re-checked here ended
        self._gate = asyncio.Semaphore(concurrency)
        self._taken = cached.store.nonces()  # the events the fleet's daemons took up
        # DID -> the change that came during its refresh (None: none): once more, after
        self._running: dict[str, Change | None] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def claimed(self, did: str, hinted: str | None, claim: str) -> None:
        """A source that may be ahead of the document's source (`claim`: what it said)
        says `did` changed: the claim is opened now, against the document held now, and
        the DID re-checked until the change shows (nothing, for a DID not held)."""
        if self._full(did):
            return
        if not await self.cached.claim(did, claim, CLAIM_WINDOW):
            return  # not held: nothing to take up (nor to ask the fleet about)
        if not await self._first(claim):
            self.claims["fleet"] += 1  # its answer is marked here too, re-verified there
            return
        self.changed(did, hinted)

    async def _first(self, claim: str) -> bool:
        """Whether this daemon is the first of the fleet to take up `claim` (an event names
        its source and seq: the same in every daemon that follows the source). A store
        that cannot be asked leaves it to this one: a duplicate, never a change missed."""
        now = time.time()
        try:
            taken = await self._taken.claim(f"event {claim}", "", now + CLAIM_WINDOW, 1, now)
        except NoncesUnavailable:
            return True
        return taken == "first"

    def changed(self, did: str, hinted: str | None = None) -> None:
        """`did` changed (`hinted`: the handle the source says it has now)."""
        if self._full(did):
            return
        change = Change(hinted)
        if did in self._running:
            self._running[did] = change  # once more when the one under way ends
            return
        self._running[did] = None
        self._spawn(self._revalidate(did, change))

    def _full(self, did: str) -> bool:
        """Whether `did` would be one re-verification past the bound (counted)."""
        if did in self._running or len(self._running) < self.max_pending:
            return False
        self.claims["overflow"] += 1
        return True

    async def recheck(self, did: str) -> None:
        """Re-verifies `did` now, and returns once it is done: a pass over every identity
        held (`sweep`) goes at the pace of its own awaits, a few at a time, so it is outside
        the bound on changes (`max_pending`). One under way is asked for once more instead,
        as a change would ask (keeping the handle a change hinted)."""
        if did in self._running:
            self._running[did] = self._running[did] or Change(None)
            return
        self._running[did] = None
        await self._revalidate(did, Change(None))

    def changed_many(self, dids: Iterable[str]) -> None:
        for did in dids:
            self.changed(did)

    def tell(self, changed: set[str]) -> None:
        """The watchers hear that these identifiers changed."""
        for watcher in self.watchers:
            self._spawn(watcher(changed))

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _revalidate(self, did: str, change: Change | None) -> None:
        try:
            while change is not None:
                async with self._gate:
                    await self._refresh(did, change.hinted)
                change, self._running[did] = self._running[did], None
        finally:
            del self._running[did]

    async def _refresh(self, did: str, hinted: str | None) -> None:
        held, declared = await self.cached.held(did)
        if not held:
            return
        self.revalidations += 1
        try:
            after = await self._until_settled(did)
            handles = {declared, after.declared_handle, hinted} - {None}
            # The handle the document declares now was resolved afresh with it (both ways):
            # the others are resolved again, each with the document it names.
            for handle in sorted(h for h in handles - {after.declared_handle} if h is not None):
                await self.cached.refresh(handle)
            self.tell({did, *(h for h in handles if h is not None)})
        except Exception as err:  # one bad identity never stops the others
            self.failures += 1
            log.warning(
                json.dumps({"event": "revalidation_failed", "did": did, "error": repr(err)})
            )

    async def _until_settled(self, did: str) -> Identity:
        """Refreshes `did` until no claim about it is open: the change showed, or the
        window ended (then once more, taken as it is)."""
        claimed = self.cached.claim_open(did)
        after = await self.cached.refresh(did)
        delay, started = FIRST_RECHECK, time.monotonic()
        while self.cached.claim_open(did):
            if time.monotonic() - started + delay >= CLAIM_WINDOW:
                self.cached.drop_claim(did)
                self.claims["window_ended"] += 1
                return await self.cached.refresh(did)
            await asyncio.sleep(delay)
            delay = min(2 * delay, LAST_RECHECK)
            after = await self.cached.refresh(did)
        if claimed:
            self.claims["settled"] += 1
        return after

    def metrics(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily

        revalidations = CounterMetricFamily(
            "atwhois_stream_revalidations",
            "Identities re-verified because a source said they changed (an #identity event, "
            "an operation the PLC mirror applied), and those that failed.",
            labels=["result"],
        )
        revalidations.add_metric(["done"], self.revalidations - self.failures)
        revalidations.add_metric(["failed"], self.failures)
        yield revalidations
        claims = CounterMetricFamily(
            "atwhois_stream_claims",
            "Changes an event said before the document's source showed them (claims), by "
            "how their re-checks ended: the change showed (settled), or the window ended "
            "first and the source's answer was taken as it was (window_ended); and changes "
            "not followed, as many re-verifications as the bound allows were under way "
            "(overflow), or taken up by another daemon of the fleet (fleet).",
            labels=["result"],
        )
        for result in ("settled", "window_ended", "overflow", "fleet"):
            claims.add_metric([result], self.claims[result])
        yield claims
