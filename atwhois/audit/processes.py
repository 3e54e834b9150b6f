"""`atwhois audit --workers N`: the lookups of a run in N processes, each with its own event
loop and resolver, sharing the cache's store. The lookups are what costs (DNS, TLS and HTTP
take nearly all of an audit's CPU, issue 18); judging the checks and writing them stays in
the one process that owns the audit store, as without workers.

The run's concurrency and its politeness limit per upstream host are split between the
workers, so that together they ask no more at once than one process would. The workers are
atwhois's child processes (`foundation.pool.child_process`): a killed run leaves none of
them behind, blocked on a queue whose pipe it holds open itself.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from multiprocessing.queues import Queue
from typing import NamedTuple

import uvloop

from atwhois.cache import CachedResolver
from atwhois.cache.stores import Tier, open_store
from atwhois.foundation.pool import SPAWN, child_process
from atwhois.resolver import Config, Resolver
from atwhois.resolver.errors import AtwhoisError
from atwhois.resolver.identity import failed_inside, now_iso

from .checks import Check
from .store import Watched

# What goes back to the parent: (request number, the check), or (None, why a worker failed).
_Result = tuple[int | None, Check | str]
_Request = tuple[int, str] | None  # None: no more work
_MEMORY_TIER_BYTES = 4 * 1024 * 1024
_WATCH_SECONDS = 0.5  # how often the parent looks for a dead worker while results are quiet
log = logging.getLogger("atwhois.audit")


def open_cache(url: str | None) -> Tier:
    """The cache store as an audit run uses it: each identity is looked up once, so its
    entries need not stay in memory, nor decoded; the store below keeps them."""
    return open_store(url, memory_bytes=_MEMORY_TIER_BYTES, decoded_share=1 / 16)


async def check_one(cached: CachedResolver, identifier: str) -> Check:
    """One identity re-verified, never from a stale cache entry. A lookup that fails inside
    atwhois is that identity's transient failure, logged: the run goes on."""
    started = time.perf_counter()
    try:
        identity = await cached.refresh(identifier)
        if cached.config.check_pds:
            identity = await cached.check_pds(identity)
    except Exception as err:
        log.exception("audit_check_failed %s", identifier)
        identity = failed_inside(identifier, err, now_iso())
    took = (time.perf_counter() - started) * 1000
    return Check.of(identifier, identity, time.time(), took)


def split(total: int, workers: int) -> int:
    """Each worker's share of a limit (at least 1)."""
    return max(1, total // workers)


class AuditWorkerFailed(AtwhoisError):
    """A worker process of the run died or failed: its lookups would never be answered."""


class CheckerPool:
    """`check` runs in one of the worker processes; start with `async with`."""

    def __init__(self, workers: int, config: Config, cache: str | None, concurrency: int) -> None:
        self._requests: Queue[_Request] = SPAWN.Queue()
        self._results: Queue[_Result] = SPAWN.Queue()
        job = _Job(config, cache, split(concurrency, workers), self._requests, self._results)
        self._processes = [child_process(_work, job) for _ in range(workers)]
        self._numbers = itertools.count()
        self._waiting: dict[int, asyncio.Future[Check]] = {}
        self._reader: threading.Thread | None = None
        self._failure: str | None = None

    async def __aenter__(self) -> CheckerPool:
        loop = asyncio.get_running_loop()
        for process in self._processes:
            process.start()
        self._reader = threading.Thread(target=self._read, args=(loop,), daemon=True)
        self._reader.start()
        return self

    async def __aexit__(self, failed: type[BaseException] | None, *_: object) -> None:
        """Workers finish what they were asked and stop; when the run failed, at once."""
        for process in self._processes:
            if failed is not None or self._failure is not None:
                process.terminate()
            else:
                self._requests.put(None)
        loop = asyncio.get_running_loop()
        for process in self._processes:
            await loop.run_in_executor(None, process.join, 30)
            if process.is_alive():
                process.kill()
        if self._reader is not None:  # it ends with the workers (`_read`)
            await loop.run_in_executor(None, self._reader.join, 5)

    async def check(self, target: Watched) -> Check:
        if self._failure is not None:
            raise AuditWorkerFailed(f"an audit worker failed: {self._failure}")
        number = next(self._numbers)
        future: asyncio.Future[Check] = asyncio.get_running_loop().create_future()
        self._waiting[number] = future
        self._requests.put((number, target.identifier))
        return await future

    def _read(self, loop: asyncio.AbstractEventLoop) -> None:
        """In a thread: hand each result to the lookup waiting for it; fail them all when a
        worker dies (its lookups would never be answered)."""
        ended = 0
        while ended < len(self._processes):
            try:
                number, outcome = self._results.get(timeout=_WATCH_SECONDS)
            except queue.Empty:
                dead = [p for p in self._processes if p.exitcode not in (None, 0)]
                if dead:
                    why = f"worker {dead[0].pid} died (exit code {dead[0].exitcode})"
                    loop.call_soon_threadsafe(self._fail, why)
                    return
                continue
            if number is None:
                ended += 1
                if outcome:  # a worker failed: so do the lookups waiting and any later one
                    loop.call_soon_threadsafe(self._fail, str(outcome))
                continue
            loop.call_soon_threadsafe(self._deliver, number, outcome)

    def _deliver(self, number: int, check: Check | str) -> None:
        future = self._waiting.pop(number, None)
        if future is not None and not future.done() and isinstance(check, Check):
            future.set_result(check)

    def _fail(self, why: str) -> None:
        self._failure = why
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(AuditWorkerFailed(f"an audit worker failed: {why}"))
        self._waiting.clear()


class _Job(NamedTuple):
    config: Config
    cache: str | None
    concurrency: int
    requests: Queue[_Request]
    results: Queue[_Result]


def _work(job: _Job) -> None:
    """A worker process: `concurrency` lookups at once, until the parent says no more (or
    is gone)."""
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(_lookups(job))
    except BaseException as err:  # told to the parent, which fails the run
        job.results.put((None, f"{type(err).__name__}: {err}"))
        raise
    job.results.put((None, ""))


async def _lookups(job: _Job) -> None:
    loop = asyncio.get_running_loop()
    handed: asyncio.Queue[_Request] = asyncio.Queue(maxsize=1)

    def take() -> None:
        """In a thread: one request at a time, when a lane is free to take it (so that an
        idle worker gets the next one, not a busy one)."""
        while True:
            request = job.requests.get()
            asyncio.run_coroutine_threadsafe(handed.put(request), loop).result()
            if request is None:
                return

    async def lane(cached: CachedResolver) -> None:
        while (request := await handed.get()) is not None:
            number, identifier = request
            job.results.put((number, await check_one(cached, identifier)))
        await handed.put(None)  # the end, for the next lane

    threading.Thread(target=take, daemon=True).start()
    async with CachedResolver(Resolver(job.config), open_cache(job.cache)) as cached:
        await asyncio.gather(*(lane(cached) for _ in range(job.concurrency)))
