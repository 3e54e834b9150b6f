"""Work routed by key to worker processes: `plc verify-export --workers` and the mirror's
replica send each DID's lines to one worker, in order, so that each replay sees what a
single process would. One process per worker (spawned: no state inherited by a fork), each
with its own queue of calls, started by `initializer(*initargs)`.

A worker outlives a parent that was killed (SIGKILL, the OOM killer): its queue's pipe is
open in the worker itself, so it never reads an end. Each worker watches its parent and
exits once it is gone, rather than hold its memory until the machine restarts."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
ORPHAN_CHECK = 1.0  # seconds between a worker's looks at whether its parent is alive


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
            ProcessPoolExecutor(
                1,
                mp_context=context,
                initializer=_watched,
                initargs=(os.getpid(), initializer, *initargs),
            )
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


def _watched(parent: int, initializer: Callable[..., None], *initargs: Any) -> None:
    """A worker's start: its watch on `parent`, then its own initializer."""
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()
    initializer(*initargs)


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(ORPHAN_CHECK)
    os._exit(0)  # nothing to finish: the parent that wanted the answers is gone
