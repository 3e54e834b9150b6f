"""An audit run: every target re-verified (never from a stale cache entry), with bounded
concurrency; one check stored per target and the findings against its previous check."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from cache import CachedResolver

from .checks import Check, Finding, compare
from .store import AuditStore, Watched
from .webhook import Webhook


@dataclass
class RunReport:
    run_id: int
    total: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    findings: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "total": self.total,
            "by_status": dict(self.by_status),
            "findings": dict(self.findings),
            "seconds": round(self.seconds, 3),
        }


class Auditor:
    def __init__(
        self,
        cached: CachedResolver,
        store: AuditStore,
        *,
        concurrency: int = 32,
        unreachable_after: int = 3,
        webhook: Webhook | None = None,
    ) -> None:
        self.cached = cached
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
        memory stays bounded by the concurrency, not by the number of targets."""
        listed = list(targets) if targets is not None else self.store.watch_list()
        run_id = self.store.start_run(source)
        report = RunReport(run_id)
        started = time.perf_counter()
        work = iter(listed)
        self.running = True

        async def worker() -> None:
            for target in work:
                check, findings = await self._check(run_id, target)
                report.total += 1
                report.by_status[check.status] += 1
                report.findings.update(f.kind for f in findings)
                if progress is not None:
                    progress(report.total, len(listed))

        try:
            await asyncio.gather(*(worker() for _ in range(min(self.concurrency, len(listed)))))
        finally:
            self.running = False
            report.seconds = time.perf_counter() - started
            self.store.finish_run(run_id, report.to_json())
        if self.webhook is not None:
            await self.webhook.drain()
        return report

    async def _check(self, run_id: int, target: Watched) -> tuple[Check, list[Finding]]:
        started = time.perf_counter()
        identity = await self.cached.refresh(target.identifier)
        check = Check.of(
            target.identifier, identity, time.time(), (time.perf_counter() - started) * 1000
        )
        previous, failures = self.store.previous(target.identifier)
        findings, failures = compare(previous, check, failures, self.unreachable_after)
        self.store.record(run_id, check, findings, failures)
        if self.webhook is not None:
            for finding in findings:
                self.webhook.send(finding)
        return check, findings
