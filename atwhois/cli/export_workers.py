"""`plc verify-export --workers N`: the export's lines routed by DID to N worker processes,
each replaying its share of the DIDs in export order (`ExportCheck`), their summaries merged.
A DID's lines all reach one worker, in order, so each replay sees what a single process
would; what differs is only which of the findings become the (at most 20) examples."""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future

from atwhois.foundation.pool import RoutedPool
from atwhois.resolver.plc.export import ExportCheck, ExportSummary, merge, route

_BATCH = 4096  # lines sent to a worker at once
_IN_FLIGHT = 4  # batches a worker may have waiting: the reader never runs far ahead

_FREEZE_EVERY = 1000  # lines between two moves of the replays' objects out of the collector's way

_check: ExportCheck | None = None


def freezing(lines: Iterable[str | bytes]) -> Iterator[str | bytes]:
    """The lines, and every so often `gc.freeze()`: the replays of an export keep hundreds of
    thousands of objects alive, and each full collection walked them all again (20-25 us an
    op on 50,000 ops; none with the collector off). Frozen objects are still freed when
    nothing refers to them; only a reference cycle among them would be kept."""
    for count, line in enumerate(lines, 1):
        yield line
        if count % _FREEZE_EVERY == 0:
            gc.freeze()


def _start(known_bad: frozenset[str]) -> None:
    global _check
    _check = ExportCheck(known_bad)


def _feed(lines: list[str | bytes]) -> tuple[int, int, int]:
    """The lines into this worker's check; its counts so far (ops, DIDs, invalid ops)."""
    assert _check is not None
    for line in freezing(lines):
        _check.feed(line)
    return _check.summary.ops, _check.summary.dids, _check.summary.invalid_ops


def _finish() -> ExportSummary:
    assert _check is not None
    return _check.finish()


def verify_export_in_workers(
    lines: Iterable[str | bytes],
    workers: int,
    *,
    known_bad: frozenset[str] = frozenset(),
    progress: Callable[[ExportSummary], None] | None = None,
    progress_every: int = 50_000,
) -> ExportSummary:
    pool = RoutedPool(workers, _start, (known_bad,))
    batches: list[list[str | bytes]] = [[] for _ in range(workers)]
    waiting: list[deque[Future[tuple[int, int, int]]]] = [deque() for _ in range(workers)]
    counts = [(0, 0, 0)] * workers

    def send(worker: int) -> None:
        if len(waiting[worker]) >= _IN_FLIGHT:
            counts[worker] = waiting[worker].popleft().result()
        waiting[worker].append(pool.submit(worker, _feed, batches[worker]))
        batches[worker] = []

    try:
        for read, line in enumerate(lines, 1):
            worker = pool.worker_for(route(line))
            batches[worker].append(line)
            if len(batches[worker]) >= _BATCH:
                send(worker)
            if progress and read % progress_every == 0:
                ops, dids, invalid = (sum(column) for column in zip(*counts, strict=True))
                progress(ExportSummary(dids=dids, ops=ops, invalid_ops=invalid))
        for worker in range(workers):
            send(worker)
        for worker_waiting in waiting:
            for batch in worker_waiting:
                batch.result()  # a batch that failed fails the whole check
        return merge([pool.submit(worker, _finish).result() for worker in range(workers)])
    finally:
        pool.shutdown()
