"""An audit run: every target re-verified (never from a stale cache entry), with bounded
concurrency; one check stored per target and the findings against its previous check; at
the end, outages grouped by upstream, and one webhook delivery for the run."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable

from cache import CachedResolver
from foundation import defaults

from .checks import Check
from .findings import Finding, compare
from .processes import check_one
from .report import RunReport
from .store import AuditStore, Watched
from .webhook import Webhook

# This many identities failing on one upstream in one run are that upstream's outage.
OUTAGE_MIN = 3


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
    ) -> None:
        """`check` looks an identity up (by default with `cached`, here; `processes`
        does it in other processes)."""
        self.cached = cached
        self._check = check or self._check_here
        self.store = store
        self.concurrency = max(1, concurrency)
        self.unreachable_after = unreachable_after
        self.webhook = webhook
        self.running = False

    async def run(
        self,
        targets: Iterable[Watched] | None = None,
        *,
        source: str = "watch-list",
        progress: Callable[[int, int], None] | None = None,
    ) -> RunReport:
        """Audit `targets` (the watch-list when None). Workers pull from one iterator, so
        memory stays bounded by the concurrency, not by the number of targets. A run that
        raises is stored as `failed`; one whose process dies is closed as `interrupted`
        when the store is next opened."""
        listed = list(targets) if targets is not None else self.store.watch_list()
        run_id, started_at = self.store.start_run(source)
        report = RunReport(run_id, source, started_at)
        started = time.perf_counter()
        work = iter(listed)
        failed: defaultdict[str, list[Check]] = defaultdict(list)  # upstream -> checks
        found: list[Finding] = []
        self.running = True

        async def worker() -> None:
            for target in work:
                check = await self._check(target)
                report.total += 1
                report.by_status[check.status] += 1
                if check.transient:  # judged at the end, with the run's other failures
                    failed[check.upstream or "?"].append(check)
                else:
                    found.extend(self._judge(run_id, check))
                if progress is not None:
                    progress(report.total, len(listed))

        try:
            await asyncio.gather(*(worker() for _ in range(min(self.concurrency, len(listed)))))
            found.extend(self._judge_failures(run_id, failed))
            report.status = "finished"
        finally:
            self.running = False
            report.findings.update(f.kind for f in found)
            report.by_severity.update(str(f.severity) for f in found)
            report.seconds = time.perf_counter() - started
            if report.status != "finished":
                report.status = "failed"
            report.finished_at = time.time()
            self.store.finish_run(run_id, report.to_json(), report.status, report.finished_at)
        if self.webhook is not None:
            report.delivered = await self.webhook.deliver(self.store, report, found)
        return report

    async def _check_here(self, target: Watched) -> Check:
        return await check_one(self.cached, target.identifier)

    def _judge(self, run_id: int, check: Check) -> list[Finding]:
        previous, failures = self.store.previous(check.identifier)
        findings, failures = compare(previous, check, failures, self.unreachable_after)
        self.store.record(run_id, check, findings, failures)
        return findings

    def _judge_failures(self, run_id: int, failed: dict[str, list[Check]]) -> list[Finding]:
        """An upstream that failed for many identities is one finding, and those identities
        are not a step closer to `unreachable`: it was not them. Fewer failures on one
        upstream count for each identity as usual."""
        found: list[Finding] = []
        for upstream, checks in sorted(failed.items()):
            if len(checks) < OUTAGE_MIN:
                for check in checks:
                    found.extend(self._judge(run_id, check))
                continue
            for check in checks:
                self.store.record(run_id, check, [], None)
            outage = Finding(
                upstream,
                "upstream_unavailable",
                f"{len(checks)} identities could not be checked: {checks[0].error}",
                max(c.checked_at for c in checks),
                None,
                str(len(checks)),
            )
            self.store.record_findings(run_id, [outage])
            found.append(outage)
        return found
