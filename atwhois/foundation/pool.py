"""atwhois's child processes, one way: spawned (no state inherited by a fork) and watching
their parent. A child outlives a parent that was killed (SIGKILL, the OOM killer): the pipe
of its queue is open in the child itself, so it never reads an end. Each child watches its
parent and exits once it is gone, rather than hold its memory until the machine restarts.
`child_process` makes one (the audit's workers, the stream's reader); `RoutedPool` is a pool
of them.

Work routed by key: `plc verify-export --workers` and the mirror's replica send each DID's
lines to one worker, in order, so that each replay sees what a single process would. One
process per worker, each with its own queue of calls, started by `initializer(*initargs)`.

A worker's memory is a cache (the mirror's replays: a million objects and more), and an
interpreter's exit tears its heap down object by object: 5 to 6 s a worker after a 300k-op
backfill, one worker after the other, most of the time `plc mirror --once` took after its
last page. Workers are told to stop together, and exit without the teardown."""

from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

T = TypeVar("T")
ORPHAN_CHECK = 1.0  # seconds between a child's looks at whether its parent is alive
SPAWN = multiprocessing.get_context("spawn")


# The CPU priority of a daemon's background processes (re-verifying workers, the event
# stream's reader) below the process that answers: a tenth of its weight. Where cores are
# few, an answer goes first and following lags a little in a burst (issue 69).
BACKGROUND_NICENESS = 10


def in_background() -> None:
    """This process's work waits for the one that answers (`BACKGROUND_NICENESS`)."""
    os.nice(BACKGROUND_NICENESS)


def child_process(target: Callable[..., None], *args: Any) -> BaseProcess:
    """A child (not started) that runs `target(*args)` once it watches this process: it
    dies with it (a daemon process) and exits when it was killed."""
    return SPAWN.Process(target=_watching, args=(os.getpid(), target, *args), daemon=True)


def _watching(parent: int, target: Callable[..., None], *args: Any) -> None:
    """A child's start: its watch on `parent`, then its work."""
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()
    target(*args)


def default_workers() -> int:
    """One worker per core when there are several (the main process reads and writes), and
    none (this process does the work) on one core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores if cores and cores > 1 else 0


class RoutedPool:
    def __init__(
        self, workers: int, initializer: Callable[..., None], initargs: tuple[Any, ...]
    ) -> None:
        self._workers = [
            ProcessPoolExecutor(
                1,
                mp_context=SPAWN,
                initializer=_started,
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
        """Stop every worker; what they were still to do is dropped. They are stopped side
        by side, not one after the other."""
        with ThreadPoolExecutor(len(self._workers) or 1) as stopping:
            stopped = [stopping.submit(w.shutdown, cancel_futures=True) for w in self._workers]
        for each in stopped:
            each.result()


def _started(parent: int, initializer: Callable[..., None], *initargs: Any) -> None:
    """A pool worker's start: its exit without teardown, then what every child does, with
    its own initializer (whose exit handlers run first: they are registered after)."""
    # Its queues hold nothing once it is told to stop, and nothing it holds needs closing
    # (the mirror's workers read the store in WAL mode, which a reader may leave anywhere).
    atexit.register(os._exit, 0)
    _watching(parent, initializer, *initargs)


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(ORPHAN_CHECK)
    os._exit(0)  # nothing to finish: the parent that wanted the answers is gone
