"""Resolutions done in worker processes (issue 69): the re-verifications that event
streams and the pass after a gap cause, and the background refreshes behind stale answers,
resolve every part afresh (nothing reused); done on the loop that answers,
their DNS, TLS, JSON and documents took the turns of the requests waiting to be answered.
`Elsewhere` sends each such resolution to one of its workers (children of `foundation.pool`:
spawned, each with its own resolver on its own loop, many resolutions at once) and gets
back what was found (`run.Found`). Nothing else moves: the claims, the judging of each part
against the entry held, and the writes stay with the process that answers
(`Elsewhere.query`), so that what it serves is what it decided.

The workers' requests take their turns from the daemon's pace, not one of their own: the
pace's buckets are in memory every process of the daemon shares (`foundation.pace.
SharedBuckets`), handed to each worker as it starts. A worker that dies is started again
at the next resolution; the resolutions it had are done in the answering process instead
(`WorkerLost`). A daemon that resolves did:plc through the PLC mirror in its own process
keeps its resolutions there (`atwhois serve` starts no workers then)."""

from __future__ import annotations

import asyncio
import itertools
import threading
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from atwhois.foundation.pace import COUNTS, SharedBuckets, charged_to, share_buckets, work
from atwhois.foundation.pool import SPAWN, child_process, in_background
from atwhois.resolver import Config
from atwhois.resolver.errors import AtwhoisError
from atwhois.resolver.report import DocumentResolution, HandleResolution
from atwhois.resolver.syntax import Query

from .run import Found, Run

AT_ONCE = 32  # resolutions a worker runs at once (each mostly waits on its upstreams)
# to a worker: (number, identifier, recheck, handle, kind of work); back: (number, Found
# or None: it failed there, what its pace counted since its last answer)
Job = tuple[int, str, bool, bool, str]
Counts = dict[str, dict[str, int]]  # a pace's counts by kind of host (`HostPace.counts`)


class WorkerLost(AtwhoisError):
    """The worker doing a resolution died before it answered."""


class _Worker:
    """One worker process and the resolutions it was sent and has not answered."""

    def __init__(self, config: Config, buckets: SharedBuckets | None) -> None:
        from atwhois.resolver.fetch import shared_pace

        self.pace = shared_pace(config)  # where what the worker's requests did is counted
        self.waiting: dict[int, asyncio.Future[Found]] = {}
        self.sending, theirs = SPAWN.Pipe(duplex=True)
        self.process: BaseProcess = child_process(_work, theirs, config, buckets)
        self.process.start()
        theirs.close()  # the child's end: EOF here once the child is gone
        self.loop = asyncio.get_running_loop()
        threading.Thread(target=self._receive, daemon=True).start()

    def _receive(self) -> None:
        try:
            while True:
                number, found, counted = self.sending.recv()
                self.loop.call_soon_threadsafe(self._answered, number, found, counted)
        except (EOFError, OSError):  # the worker is gone (or was stopped)
            pass
        finally:
            if not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self._lost)

    def _answered(self, number: int, found: Found | None, counted: Counts) -> None:
        for kind, counts in counted.items():  # the daemon's /metrics count them as its own
            held = self.pace.counts.setdefault(kind, dict.fromkeys(COUNTS, 0))
            for name, n in counts.items():
                held[name] = held.get(name, 0) + n
        future = self.waiting.pop(number, None)
        if future is not None and not future.done():
            if found is None:  # it failed there: done here after all
                future.set_exception(WorkerLost())
            else:
                future.set_result(found)

    def _lost(self) -> None:
        waiting, self.waiting = self.waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(WorkerLost())

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def stop(self) -> None:
        self.sending.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)


class Elsewhere:
    """`workers` processes resolving with `config`; each resolution goes to the one with
    the fewest waiting."""

    def __init__(self, config: Config, workers: int) -> None:
        self.config = config
        self.size = workers
        self.buckets = share_buckets()  # made before any worker, which shares them
        self._workers: list[_Worker] = []
        self._numbers = itertools.count()
        self.restarts = 0  # workers started again in place of one that died
        self.resolved = 0  # resolutions the workers answered
        self.lost = 0  # resolutions done in this process, their worker lost

    async def query(
        self, run: Run, query: Query, *, handle: bool = True
    ) -> tuple[HandleResolution, DocumentResolution]:
        """`run.query` (a run that reuses nothing) done in a worker and taken into `run`
        as if done here (`Run.adopt`: each part judged against the entry held here). A
        worker lost: done here after all."""
        try:
            found = await self.resolve(query.text, run.recheck, handle)
        except WorkerLost:
            self.lost += 1
            return await run.query(query, handle=handle)
        return await run.adopt(found)

    async def resolve(self, identifier: str, recheck: bool, handle: bool) -> Found:
        """What a run that reuses nothing finds for `identifier`, charged to the kind of
        work this is (`foundation.pace.work`). Raises `WorkerLost`."""
        worker = self._worker()
        number = next(self._numbers)
        future: asyncio.Future[Found] = worker.loop.create_future()
        worker.waiting[number] = future
        job: Job = (number, identifier, recheck, handle, work())
        try:
            worker.sending.send(job)
        except (OSError, ValueError) as err:
            worker.waiting.pop(number, None)
            raise WorkerLost() from err
        try:
            found = await asyncio.shield(future)
        finally:
            worker.waiting.pop(number, None)
        self.resolved += 1
        return found

    async def start(self) -> None:
        """Starts the workers now (else at the first resolution)."""
        self._worker()

    def health(self) -> dict[str, Any]:
        return {
            "workers": len(self._workers),
            "alive": sum(w.alive for w in self._workers),
            "resolved": self.resolved,
            "resolving": sum(len(w.waiting) for w in self._workers),
            "restarts": self.restarts,
            "lost": self.lost,
        }

    def _worker(self) -> _Worker:
        """The least busy worker, one started (again) in place of any that died."""
        for index, worker in enumerate(self._workers):
            if not worker.alive:
                worker.stop()
                self._workers[index] = _Worker(self.config, self.buckets)
                self.restarts += 1
        while len(self._workers) < self.size:
            self._workers.append(_Worker(self.config, self.buckets))
        return min(self._workers, key=lambda w: len(w.waiting))

    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers if w.process.pid is not None]

    async def stop(self) -> None:
        workers, self._workers = self._workers, []
        await asyncio.gather(*(asyncio.to_thread(w.stop) for w in workers))


def _work(connection: Connection, config: Config, buckets: SharedBuckets | None) -> None:
    import uvloop

    from atwhois.foundation.pace import use_buckets

    use_buckets(buckets)  # before any pace is made: the daemon's turns, not a pace of its own
    in_background()  # a re-verification waits a little longer than an answer
    uvloop.run(_serve(connection, config))


async def _serve(connection: Connection, config: Config) -> None:
    from collections import Counter

    from atwhois.resolver import Resolver
    from atwhois.resolver.fetch import shared_pace

    resolver = Resolver(config)
    pace = shared_pace(config)
    told: Counts = {}  # what its counts were at the last answer
    loop = asyncio.get_running_loop()
    jobs: asyncio.Queue[Job | None] = asyncio.Queue()
    gate = asyncio.Semaphore(AT_ONCE)
    tasks: set[asyncio.Task[None]] = set()

    def receive() -> None:
        try:
            while True:
                job = connection.recv()
                loop.call_soon_threadsafe(jobs.put_nowait, job)
        except (EOFError, OSError):  # the daemon is gone, or stopped this worker
            loop.call_soon_threadsafe(jobs.put_nowait, None)

    async def nothing_held(_: str) -> Any:
        return None

    async def resolve(number: int, identifier: str, recheck: bool, handle: bool) -> None:
        async with gate:
            found: Found | None = None
            try:
                query: Query = resolver.parse(identifier)
                run = Run(resolver, nothing_held, Counter(), loop.time, False, recheck)
                found = run.found(*await run.query(query, handle=handle))
            finally:  # None: it failed here (the daemon does it itself)
                connection.send((number, found, counted()))

    def counted() -> Counts:
        """What the pace counted here since the last answer."""
        since = {}
        for kind, counts in pace.counts.items():
            before = told.setdefault(kind, dict.fromkeys(counts, 0))
            since[kind] = {name: n - before.get(name, 0) for name, n in counts.items()}
            before.update(counts)
        return since

    threading.Thread(target=receive, daemon=True).start()
    while (job := await jobs.get()) is not None:
        number, identifier, recheck, handle, kind = job
        with charged_to(kind):  # the task started here is that kind's work at the pace
            task = asyncio.create_task(resolve(number, identifier, recheck, handle))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await resolver.aclose()
