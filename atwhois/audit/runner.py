"""An audit run: every target re-verified (never from a stale cache entry), with bounded
concurrency; one check stored per target and the findings against its previous check; at
the end, outages grouped by upstream, and one webhook delivery for the run.

The run's identities are claimed from the store a batch at a time (`runs.SharedRuns`), so
that processes on several hosts sharing one store share one watch-list run: each identity
is checked once, whoever checks it, and one of them finishes the run."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable

from atwhois.cache import CachedResolver
from atwhois.foundation import defaults

from .checks import Check
from .findings import Finding, compare
from .processes import check_one
from .report import RunReport
from .runs import WATCH_LIST, OpenRun
from .store import AuditStore, Judged, Watched
from .webhook import Webhook

# This many identities failing on one upstream in one run are that upstream's outage.
OUTAGE_MIN = 3
POLL_SECONDS = 0.2  # how often a process with nothing to claim looks again
FLUSH_SECONDS = 0.1  # the longest a check waits to be written


class Auditor:
    def __init__(
        self,
        cached: CachedResolver,
        store: AuditStore,
        *,
        concurrency: int = 32,
        unreachable_after: int = defaults.UNREACHABLE_AFTER,
        webhook: Webhook | None = None,
        check: Callable[[Watched], Awaitable[Check]] | None = None,
        keep_days: float = defaults.AUDIT_KEEP_DAYS,
        lease: float = defaults.AUDIT_LEASE,
    ) -> None:
        """`check` looks an identity up (by default with `cached`, here; `processes`
        does it in other processes)."""
        self.cached = cached
        self._check = check or self._check_here
        self.store = store
        self.concurrency = max(1, concurrency)
        self.unreachable_after = unreachable_after
        self.webhook = webhook
        self.keep_days = keep_days
        self.lease = lease
        self.running = False

    async def aclose(self) -> None:
        """The auditor's network clients and its webhook (its cache's store is shared with
        the daemon's, which closes it; the audit store is closed by its opener)."""
        await self.cached.resolver.aclose()
        if self.webhook is not None:
            await self.webhook.aclose()

    async def run(
        self,
        targets: Iterable[Watched] | None = None,
        *,
        source: str = WATCH_LIST,
        progress: Callable[[int, int], None] | None = None,
    ) -> RunReport:
        """Audit `targets` (the watch-list when None, with the processes already auditing
        it). Memory stays bounded by the concurrency, not by the number of targets. A run
        that raises, in its only process, is stored as `failed`; one whose processes all
        die is closed as `interrupted` when the store is next opened."""
        names = None if targets is None else [t.identifier for t in targets]
        run = self.store.runs_shared.open(source, names, self.lease)
        self.running = True
        renewing = asyncio.create_task(self._renew(run))
        finished = False
        try:
            await self._check_all(run, progress)
            finished = await self._finish(run)
        except BaseException:
            if self.store.runs_shared.leave(run.id):
                self._close(run, "failed")
            raise
        finally:
            self.running = False
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
        report = self._report(run)
        if finished:
            self.store.prune(self.keep_days)
            if self.webhook is not None:
                report.delivered = await self.webhook.deliver(self.store)
        return report

    async def _check_all(self, run: OpenRun, progress: Callable[[int, int], None] | None) -> None:
        """Lanes check what this process claimed, until nothing of the run is left
        unchecked: claimed here, by another process, or by one whose lease ran out. What
        they find is written a batch at a time, one transaction each (a commit per check
        made PostgreSQL wait on its log for each)."""
        lanes = min(self.concurrency, max(run.total, 1))
        claimed: asyncio.Queue[str | None] = asyncio.Queue(maxsize=lanes)
        checked: list[Check] = []
        flushing = asyncio.Event()
        done = 0

        async def lane() -> None:
            while (identifier := await claimed.get()) is not None:
                checked.append(await self._check(Watched(identifier)))
                if len(checked) >= lanes:
                    flushing.set()

        async def feed() -> None:
            after = ""  # where the last batch ended; from the start again once at the end
            while True:
                batch = self.store.runs_shared.claim(run, lanes, after)
                for identifier in batch:
                    await claimed.put(identifier)
                if batch or after:
                    after = batch[-1] if batch else ""
                    continue
                if not self.store.runs_shared.left(run.id):
                    break
                flushing.set()  # what is checked here counts as left until written
                await asyncio.sleep(POLL_SECONDS)  # others' claims: checked, or run out
            for _ in range(lanes):
                await claimed.put(None)

        def write() -> None:
            nonlocal done
            batch = checked[:]
            checked.clear()
            with self.store.db.transaction():
                # a transient failure is judged at the end, with the run's other failures
                self.store.runs_shared.hold(run.id, [c for c in batch if c.transient])
                self._judge(run.id, [c for c in batch if not c.transient], claimed=True)
            done += len(batch)
            if progress is not None and batch:
                progress(done, run.total)

        async def writer() -> None:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(flushing.wait(), FLUSH_SECONDS)
                flushing.clear()
                write()

        tasks = [asyncio.create_task(work) for work in (feed(), *(lane() for _ in range(lanes)))]
        writing = asyncio.create_task(writer())
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in (*tasks, writing):
                task.cancel()
            await asyncio.gather(*tasks, writing, return_exceptions=True)
        write()

    async def _finish(self, run: OpenRun) -> bool:
        """True when this process finished the run; else it waits for the one that does."""
        shared = self.store.runs_shared
        while shared.status(run.id) == "running":
            with shared.finishing(run.id) as held:
                if held is not None:
                    grouped: defaultdict[str, list[Check]] = defaultdict(list)
                    for check in held:
                        grouped[check.upstream or "?"].append(check)
                    self._judge_failures(run.id, grouped)
                    report = self._close(run, "finished")
                    findings = self.store.run_findings(run.id)
                    if self.webhook is not None:
                        self.webhook.queue(self.store, report, findings)
                    return True
            await asyncio.sleep(POLL_SECONDS)
        return False

    async def _renew(self, run: OpenRun) -> None:
        while True:
            await asyncio.sleep(run.lease / 3)
            await asyncio.to_thread(self.store.runs_shared.renew, run)

    def _close(self, run: OpenRun, status: str) -> RunReport:
        """The run ended now (`finished`, `failed`): its summary stored."""
        finished_at = time.time()
        report = self._report(run, (status, finished_at))
        self.store.finish_run(run.id, report.to_json(), status, finished_at)
        return report

    def _report(self, run: OpenRun, ended: tuple[str, float] | None = None) -> RunReport:
        """The run's report from the store: what every process taking part checked;
        `ended`: its status and end, as this process is closing it."""
        source, status, finished_at = self.store.run_state(run.id)
        if ended is not None:
            status, finished_at = ended
        by_status, by_kind, by_severity = self.store.run_counts(run.id)
        return RunReport(
            run.id,
            source,
            run.started_at,
            finished_at,
            status,
            run.total,
            by_status,
            by_kind,
            by_severity,
            (finished_at or time.time()) - run.started_at,
        )

    async def _check_here(self, target: Watched) -> Check:
        return await check_one(self.cached, target.identifier)

    def _judge(self, run_id: int, checks: list[Check], *, claimed: bool = False) -> None:
        """Each check against the identity's previous one, recorded with its findings."""
        previous = self.store.previous(check.identifier for check in checks)
        judged: list[Judged] = []
        for check in checks:
            before, failures = previous.get(check.identifier, (None, 0))
            judged.append((check, *compare(before, check, failures, self.unreachable_after)))
        self.store.record(run_id, judged, claimed=claimed)

    def _judge_failures(self, run_id: int, failed: dict[str, list[Check]]) -> None:
        """An upstream that failed for many identities is one finding, and those identities
        are not a step closer to `unreachable`: it was not them. Fewer failures on one
        upstream count for each identity as usual."""
        for upstream, checks in sorted(failed.items()):
            if len(checks) < OUTAGE_MIN:
                self._judge(run_id, checks)
                continue
            self.store.record(run_id, [(check, [], None) for check in checks])
            outage = Finding(
                upstream,
                "upstream_unavailable",
                f"{len(checks)} identities could not be checked: {checks[0].error}",
                max(c.checked_at for c in checks),
                None,
                str(len(checks)),
            )
            self.store.record_findings(run_id, [outage])
