"""Re-verifications resolved in worker processes (`cache.workers`, issue 69): what a worker
found is judged and stored by the process that answers, as its own resolution would be
(the claims it holds, the entries it holds), and a worker lost costs no re-verification."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator

import pytest

from atwhois.cache import CachedResolver
from atwhois.cache.stores import MemoryStore
from atwhois.cache.workers import Elsewhere
from atwhois.foundation.pace import shared_buckets, use_buckets
from atwhois.resolver import Config, Resolver, Status
from atwhois.resolver.fetch import host_of, shared_pace
from devnet.network import DevnetState
from tests.support.waiting import eventually


@pytest.fixture
async def cached(devnet_config: Config) -> AsyncIterator[CachedResolver]:
    before = shared_buckets()
    async with CachedResolver(Resolver(devnet_config), MemoryStore()) as cached:
        cached.elsewhere = Elsewhere(devnet_config, 1)  # this process's buckets shared
        await cached.elsewhere.start()
        try:
            yield cached
        finally:
            await cached.elsewhere.stop()
            use_buckets(before)  # the paces the other tests make: their own again


async def test_a_refresh_is_resolved_in_a_worker_and_stored_here(
    cached: CachedResolver, devnet: DevnetState
) -> None:
    assert cached.elsewhere is not None
    first = await cached.lookup("alice.test")  # a miss: resolved here (it reuses parts)
    assert first.status is Status.VERIFIED and cached.elsewhere.resolved == 0
    directory = host_of(devnet.plc_url)
    sent = shared_pace(cached.config).counts[directory]["requests"]
    again = await cached.refresh("alice.test")
    assert cached.elsewhere.resolved == 1  # the refresh: in the worker
    # its request to the directory counted in this process's pace (its /metrics)
    assert shared_pace(cached.config).counts[directory]["requests"] == sent + 1
    assert again.status is Status.VERIFIED and again.did == devnet.did("alice")
    assert again.handle == first.handle and again.pds == first.pds
    held = await cached.lookup("alice.test")
    assert held.cache.cached and held.cache.state == "fresh"  # what the worker found, stored
    assert cached.counts()["upstream_documents"] == 2  # the worker's requests counted here


async def test_a_claim_held_here_marks_what_a_worker_found(
    cached: CachedResolver, devnet: DevnetState
) -> None:
    did = devnet.did("alice")
    await cached.lookup(did)
    assert await cached.claim(did, "#identity seq 7", 30.0)
    await cached.refresh(did)  # the document has not changed: the claim stays open
    assert cached.claim_open(did)
    held = await cached.lookup(did)
    assert held.cache.state != "fresh"  # stored stale from the start, as the claim says


async def test_a_worker_lost_is_replaced(cached: CachedResolver) -> None:
    elsewhere = cached.elsewhere
    assert elsewhere is not None
    await cached.lookup("alice.test")
    (pid,) = elsewhere.pids()
    os.kill(pid, signal.SIGKILL)
    await eventually(lambda: elsewhere.health()["alive"] == 0)
    answer = await cached.refresh("alice.test")  # by the worker started in its place
    assert answer.status is Status.VERIFIED and elsewhere.resolved == 1
    assert elsewhere.restarts == 1 and elsewhere.pids() != [pid]


async def test_a_worker_runs_behind_the_process_that_answers(cached: CachedResolver) -> None:
    """Where cores are few, an answer goes first: a worker's CPU priority is below the
    daemon's (`BACKGROUND_NICENESS`), as the stream's reading process's is."""
    from atwhois.foundation.pool import BACKGROUND_NICENESS

    assert cached.elsewhere is not None
    (worker,) = cached.elsewhere._workers
    pid = worker.process.pid
    assert pid is not None
    own = os.getpriority(os.PRIO_PROCESS, 0)
    await eventually(lambda: os.getpriority(os.PRIO_PROCESS, pid) == own + BACKGROUND_NICENESS)
