"""`Sweep`: after an event stream's gap (events may have been missed: F-CUR-2, F-CUR-3) every
identity the cache holds is re-verified, in one pass (F-CUR-6). The pass walks the store a
page of DIDs at a time (what it holds is a page, however many identities are held), has a
few re-verified at once by the `Revalidator` (coalesced with the changes events name), and
runs as background work: its requests take turns from `reverify_share` of each upstream
host's rate (`foundation.pace`), so lookups keep the rest, and the pass takes as long as that
share says instead of the whole pace.

A fleet of daemons on one shared store (issue 69) re-verifies each identity once per pass,
not once per daemon: each of them hears of the gap (or restarts on it), and each walks the
same keys. An identity is left to another daemon when the entry held was checked since
this pass began (another re-verified it meanwhile), or when another daemon claimed it in
the store shared by the fleet (`Store.nonces`: one claim per DID, taken in one step, for
`CLAIM_LEASE` seconds): whichever comes first does it, the others go on to the next.

A gap during a pass owes one more pass, run after it: an identity re-verified before the gap
may have changed in it. However many gaps come during a pass, one is owed, and no second
pass runs at once. (Starting the walk again at each gap would do the first pages over and
over and never reach the last ones under a stream that gaps every few seconds; an owed pass
reaches every identity.) So what gaps cost is bounded by the passes run times the identities
held, taken at the share of the rate: not by the gaps."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from atwhois.foundation.pace import REVERIFY, charged_to

from .keys import did_key, identifier_of
from .revalidate import Revalidator
from .stores.nonces import NoncesUnavailable

if TYPE_CHECKING:
    from prometheus_client.core import Metric

log = logging.getLogger("atwhois.revalidate")
PAGE = 1000  # DIDs read from the store at once
AT_ONCE = 4  # identities a pass re-verifies at once (the revalidator runs 8: events keep 4)
HELD = did_key("")  # the keys of the DIDs the cache holds start so
# How long a daemon's claim to re-verify a DID keeps the fleet's others from it: longer than
# one re-verification takes (a claim's window and its re-checks), far shorter than a pass.
CLAIM_LEASE = 120.0


class Sweep:
    def __init__(self, revalidator: Revalidator, *, page: int = PAGE) -> None:
        self.revalidator = revalidator
        self.store = revalidator.cached.store
        self.page = page
        self.passes = 0  # passes run to their end
        self.owed = 0  # passes owed after the one under way (a gap came during it): 0 or 1
        self.done = 0  # identities re-verified by the pass under way (or the last one)
        self.to_do: int | None = None  # the DIDs held when it began (None: being counted)
        self.failed = 0  # passes a failure of the store ended
        self.left = 0  # identities of the pass left to another daemon of the fleet
        self._began = 0.0  # when the pass under way began, on the cache's clock
        self._me = uuid.uuid4().hex  # whose claims are this daemon's, in the shared store
        self._claims = self.store.nonces()  # where they are taken (the fleet's shared store)
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def gap(self) -> None:
        """Events may have been missed: a pass, or one more after the pass under way."""
        if self.running:
            self.owed = 1
            return
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            self.owed = 0
            try:
                # every request of the pass (and of the tasks it starts) is the pass's work:
                # it waits for its share of each host's rate, lookups keep the rest
                with charged_to(REVERIFY):
                    await self._pass()
            except Exception as err:  # the store failing: said; the next gap starts a pass
                self.failed, self.owed = self.failed + 1, 0
                log.warning(json.dumps({"event": "gap_pass_failed", "error": repr(err)}))
                return
            self.passes += 1
            if not self.owed:
                return

    async def _pass(self) -> None:
        self.done, self.left, self.to_do = 0, 0, None
        self._began = self.revalidator.cached.clock()
        self.to_do = await self._count()
        position = ""
        while True:
            keys, position = await self.store.walk(HELD, self.page, position)
            dids = iter([identifier_of(key) for key in keys])
            await asyncio.gather(*(self._recheck(dids) for _ in range(AT_ONCE)))
            if not position:
                return

    async def _recheck(self, dids: Iterator[str]) -> None:
        for did in dids:  # the page's, shared: each of the AT_ONCE takes the next one
            if await self._others(did):
                self.left += 1
                continue
            await self.revalidator.recheck(did)
            self.done += 1

    async def _others(self, did: str) -> bool:
        """Whether another daemon of the fleet re-verifies `did` in this pass: the entry
        held was checked since the pass began, or another's claim on it is live. A claim
        that cannot be asked (the shared store down) leaves it to this one."""
        cached = self.revalidator.cached
        held = await cached.checked_at(did)
        if held is not None and held >= self._began:
            return True
        now = cached.clock()
        try:
            claim = await self._claims.claim(f"reverify {did}", self._me, now + CLAIM_LEASE, 1, now)
        except NoncesUnavailable:
            return False
        return claim == "share"  # held by another ("seen": this daemon's own, earlier)

    async def _count(self) -> int:
        """The DIDs held now: a walk of the store's keys (nothing resolved), page by page."""
        counted, position = 0, ""
        while True:
            keys, position = await self.store.walk(HELD, self.page, position)
            counted += len(keys)
            if not position:
                return counted

    def health(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "done": self.done,
            "to_do": self.to_do,
            "passes": self.passes,
            "owed": self.owed,
            "failed": self.failed,
            "left_to_others": self.left,
        }

    def metrics(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        identities = GaugeMetricFamily(
            "atwhois_gap_pass_identities",
            "The pass re-verifying every identity held after an event stream's gap: those it "
            "re-verified (done), of those held when it began (to_do), and those left to "
            "another daemon of the fleet (left_to_others); the pass under way, or the last one.",
            labels=["state"],
        )
        identities.add_metric(["done"], self.done)
        identities.add_metric(["left_to_others"], self.left)
        identities.add_metric(["to_do"], self.to_do or 0)
        passes = CounterMetricFamily(
            "atwhois_gap_passes",
            "Passes re-verifying every identity held after a gap, by how they ended: run to "
            "their end (done), or ended by a failure of the store (failed).",
            labels=["result"],
        )
        passes.add_metric(["done"], self.passes)
        passes.add_metric(["failed"], self.failed)
        yield identities
        yield passes
        yield GaugeMetricFamily(
            "atwhois_gap_pass_running", "1 while a pass runs.", value=int(self.running)
        )
        yield GaugeMetricFamily(
            "atwhois_gap_pass_owed",
            "Passes owed after the one under way (a gap came during it): 0 or 1.",
            value=self.owed,
        )
