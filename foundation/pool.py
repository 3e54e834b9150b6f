"""Work routed by key to worker processes: `plc verify-export --workers` and the mirror's
replica send each DID's lines to one worker, in order, so that each replay sees what a
single process would. One process per worker (spawned: no state inherited by a fork), each
with its own queue of calls, started by `initializer(*initargs)`."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def default_workers() -> int:
    """One worker per core when there are several (the main process reads and writes), and
    none (this process does the work) on one core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores if cores and cores > 1 else 0


class RoutedPool:
    def __init__(
        self, workers: int, initializer: Callable[..., None], initargs: tuple[Any, ...]
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._workers = [
            ProcessPoolExecutor(1, mp_context=context, initializer=initializer, initargs=initargs)
            for _ in range(workers)
        ]

    def __len__(self) -> int:
        return len(self._workers)

    def worker_for(self, key: int) -> int:
        """The worker every item of `key` goes to."""
        return key % len(self._workers)

    def submit(self, worker: int, call: Callable[..., T], *args: Any) -> Future[T]:
        """`call(*args)` in `worker`, after what was sent to it before."""
        return self._workers[worker].submit(call, *args)

    def shutdown(self) -> None:
        """Stop every worker; what they were still to do is dropped."""
        for worker in self._workers:
            worker.shutdown(cancel_futures=True)
