"""The subscriber against a relay stand-in on loopback (a real websocket server sending
real DAG-CBOR frames): events in order and once, the cursor across drops and restarts (kept
in a real SQLite store), FutureCursor and OutdatedCursor, malformed frames, back-off."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from atwhois.cache.stores.sqlite import SqliteStore
from atwhois.foundation import Backoff
from atwhois.stream import AccountEvent, IdentityEvent
from atwhois.stream.cursors import MemoryCursor, Seq, StoreCursor
from atwhois.stream.subscriber import Subscriber
from atwhois.stream.wires import PATH
from devnet import relay_frames as f
from tests.support.waiting import eventually


class Relay:
    """Serves `frames` (the i-th has seq i+1) from after the cursor a client gives; frames
    before `oldest` are gone; `drop_after` closes each connection after that many frames."""

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = frames
        self.oldest = 1
        self.drop_after: int | None = None
        self.cursors: list[int | None] = []  # what each connection asked for
        self.url = ""

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        given = request.query.get("cursor")
        cursor = int(given) if given is not None else None
        self.cursors.append(cursor)
        if cursor is not None and cursor > len(self.frames):
            await ws.send_bytes(f.error("FutureCursor"))
            await ws.close()
            return ws
        start = 0  # no cursor: from the oldest kept (a real relay would start live)
        if cursor is not None:
            start = cursor
            if cursor < self.oldest - 1:
                await ws.send_bytes(f.info("OutdatedCursor"))
                start = self.oldest - 1
        for sent, frame in enumerate(self.frames[start:]):
            if self.drop_after is not None and sent == self.drop_after:
                break
            await ws.send_bytes(frame)
        await ws.close()
        return ws


@pytest.fixture
async def relay() -> AsyncIterator[Relay]:
    stand_in = Relay(f.stream(200, seed=3))
    app = web.Application()
    app.router.add_get(PATH, stand_in.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    stand_in.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield stand_in
    await runner.cleanup()


def quick() -> Backoff:
    return Backoff(base=0.01, cap=0.05, rng=random.Random(1))


def wanted(frames: list[bytes]) -> list[int]:
    """The seqs of the identity and account events among `frames`."""
    from atwhois.stream import decode

    return [e.seq for e in map(decode, frames) if isinstance(e, IdentityEvent | AccountEvent)]


async def follow(subscriber: Subscriber, done: Callable[[], bool]) -> None:
    task = asyncio.create_task(subscriber.run())
    try:
        await eventually(done)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_events_arrive_in_order_once_across_dropped_connections(relay: Relay) -> None:
    seen: list[int] = []

    async def on_event(event: IdentityEvent | AccountEvent) -> None:
        seen.append(event.seq)

    relay.drop_after = 30  # the relay hangs up every 30 frames
    subscriber = Subscriber(relay.url, on_event, MemoryCursor(), backoff=quick(), save_every=0)
    await follow(subscriber, lambda: subscriber.state.cursor == Seq(200))
    assert seen == wanted(relay.frames)  # each once, in order
    assert relay.cursors[:3] == [None, 30, 60]  # each reconnection resumes where it was
    assert subscriber.state.reconnects >= 6
    state = subscriber.state.to_json()
    assert state["events"]["#commit"] + state["events"].get("#sync", 0) + len(seen) == 200


async def test_the_cursor_survives_a_restart_in_the_store(relay: Relay, tmp_path: Path) -> None:
    everything = relay.frames
    relay.frames = everything[:50]  # what the relay has while the first daemon runs
    store = SqliteStore(tmp_path / "cache.db")
    try:
        cursor = StoreCursor(store, relay.url, Seq)
        first = Subscriber(relay.url, _ignore, cursor, backoff=quick(), save_every=0)
        await follow(first, lambda: first.state.cursor == Seq(50))
        again = SqliteStore(tmp_path / "cache.db")  # another process, the same file
        try:
            relay.frames = everything
            connections = len(relay.cursors)
            kept = StoreCursor(again, relay.url, Seq)
            second = Subscriber(relay.url, _ignore, kept, backoff=quick())
            await follow(second, lambda: second.state.cursor == Seq(200))
        finally:
            await again.close()
        assert relay.cursors[connections] == 50  # resumed, not replayed from the start
        await cursor.save(None)
        assert await cursor.load() is None
    finally:
        await store.close()


async def test_a_cursor_ahead_of_the_relay_is_dropped(relay: Relay) -> None:
    cursor = MemoryCursor(Seq(10**9))  # from another relay, or this one lost its state
    subscriber = Subscriber(relay.url, _ignore, cursor, backoff=quick(), save_every=0)
    await follow(subscriber, lambda: subscriber.state.cursor == Seq(200))
    assert relay.cursors[:2] == [10**9, None] and subscriber.state.events["error"] == 1
    assert subscriber.state.last_error is not None


async def test_an_outdated_cursor_is_counted_and_the_stream_goes_on(relay: Relay) -> None:
    relay.oldest = 100
    cursor = MemoryCursor(Seq(10))
    subscriber = Subscriber(relay.url, _ignore, cursor, backoff=quick(), save_every=0)
    await follow(subscriber, lambda: subscriber.state.cursor == Seq(200))
    assert subscriber.state.outdated_cursor == 1 and relay.cursors[0] == 10


async def test_malformed_frames_are_skipped_and_counted(relay: Relay) -> None:
    relay.frames[5] = b"\xff\xfe not cbor"
    relay.frames[6] = f.identity(7, did="did:plc:<script>")
    seen: list[int] = []

    async def on_event(event: IdentityEvent | AccountEvent) -> None:
        seen.append(event.seq)

    subscriber = Subscriber(relay.url, on_event, MemoryCursor(), backoff=quick(), save_every=0)
    await follow(subscriber, lambda: subscriber.state.cursor == Seq(200))
    assert subscriber.state.malformed == 2 and 7 not in seen


def test_backoff_is_jittered_grows_and_is_capped() -> None:
    backoff = Backoff(base=0.5, cap=8.0, rng=random.Random(4))
    waits = [backoff.next() for _ in range(10)]
    ceilings = [min(8.0, 0.5 * 2**n) for n in range(10)]
    assert all(0 <= w <= c for w, c in zip(waits, ceilings, strict=True))
    assert len(set(waits)) == 10  # jittered, not a fixed ladder
    assert max(waits[6:]) > 2.0  # it did grow
    backoff.reset()
    assert backoff.next() <= 0.5


async def _ignore(_: IdentityEvent | AccountEvent) -> None:
    pass


async def test_events_for_one_did_are_coalesced_into_at_most_one_more_refresh() -> None:
    """A unit test of the follower's bookkeeping, with a resolver stand-in that counts and
    takes its time: five events during one refresh make one more, not five; an event about
    a DID the cache does not hold resolves nothing."""
    from types import SimpleNamespace

    from atwhois.cache.stores.memory import MemoryStore
    from atwhois.stream.follower import Follower

    refreshed: list[str] = []

    async def refresh(identifier: str) -> Any:
        refreshed.append(identifier)
        await asyncio.sleep(0.05)
        return SimpleNamespace(declared_handle="alice.example.com")

    async def held(did: str) -> tuple[bool, str | None]:
        return (True, "alice.example.com") if did == f.DID else (False, None)

    async def claim(did: str, what: str, window: float) -> bool:
        return did == f.DID  # opened only about a DID held

    cached = SimpleNamespace(
        refresh=refresh,
        held=held,
        claim=claim,
        claim_open=lambda did: False,  # the first refresh shows the change
        store=MemoryStore(),
    )
    follower = Follower(cached, [])  # type: ignore[arg-type]
    for seq in range(1, 6):  # five events (a replay of one seq would be the same event)
        await follower.on_event(IdentityEvent(seq, f.DID, f.TIME, None))
        await asyncio.sleep(0.005)
    await eventually(lambda: not follower.revalidator._running)
    assert refreshed.count(f.DID) == 2 and follower.revalidator.revalidations == 2
    # the handle it declares (now as before) was resolved with its document, both ways: not
    # again on its own (which would ask the directory for the document twice)
    assert "alice.example.com" not in refreshed
    # a DID this daemon does not hold: nobody asked, nothing is resolved
    await follower.on_event(IdentityEvent(2, "did:plc:" + "b" * 24, f.TIME, "x.example.com"))
    await eventually(lambda: not follower.revalidator._running)
    assert follower.revalidator.revalidations == 2 and "x.example.com" not in refreshed


async def test_re_verifications_after_events_are_bounded_and_the_overflow_counted() -> None:
    """A flood of `#identity` events about held DIDs opens at most `max_pending` claims, each
    re-verified; the rest are counted (`overflow`) and not followed; once those end, the next
    event is followed again. (The daemon's bound is the `max_claims` setting.)"""
    from types import SimpleNamespace

    from atwhois.cache.revalidate import Revalidator
    from atwhois.cache.stores.memory import MemoryStore

    release = asyncio.Event()
    claimed: list[str] = []

    async def refresh(identifier: str) -> Any:
        await release.wait()
        return SimpleNamespace(declared_handle=None)

    async def held(did: str) -> tuple[bool, str | None]:
        return True, None

    async def claim(did: str, what: str, window: float) -> bool:
        claimed.append(did)
        return True

    cached = SimpleNamespace(
        refresh=refresh, held=held, claim=claim, claim_open=lambda did: False, store=MemoryStore()
    )
    revalidator = Revalidator(cached, max_pending=3)  # type: ignore[arg-type]
    dids = [f"did:plc:{str(i) * 24}"[:32] for i in range(2, 8)]
    for did in dids:
        await revalidator.claimed(did, None, f"#identity about {did}")
    assert len(revalidator._running) == 3 and claimed == dids[:3]
    assert revalidator.claims["overflow"] == 3
    await revalidator.claimed(
        dids[0], None, "#identity seq 2"
    )  # one under way: coalesced, no overflow
    assert revalidator.claims["overflow"] == 3
    release.set()
    await eventually(lambda: not revalidator._running)
    await revalidator.claimed(dids[5], None, "#identity seq 3")
    assert claimed[-1] == dids[5]
    await revalidator.stop()


async def test_a_reading_process_gap_is_not_counted_again_by_the_next_child() -> None:
    """F-CUR-2, F-CUR-3: the daemon tells a child that replaces one whether the stream was
    followed before (then a start without a cursor is a gap). After a child's gap refused
    between connections (CursorTooOld), its start from the present is what that gap counted:
    the next child is not told the stream was followed, so the gap is not counted twice; a
    gap during a connection (OutdatedCursor) leaves that connection followed."""
    from atwhois.stream.process import StreamProcess
    from atwhois.stream.state import StreamState

    gaps: list[str] = []

    async def gap() -> None:
        gaps.append("gap")

    process = StreamProcess("ws://relay.example", _ignore, MemoryCursor(), on_gap=gap)
    connected = StreamState(process.url, connected=True)
    await process._apply(("state", connected))
    assert process._followed
    await process._apply(("state", StreamState(process.url)))  # between connections
    await process._apply(("gap", None))
    assert not process._followed and gaps == ["gap"]
    await process._apply(("state", connected))
    await process._apply(("gap", None))
    assert process._followed and gaps == ["gap", "gap"]


async def test_the_streams_reading_process_runs_behind_the_one_that_answers() -> None:
    """Issue 69: the child that reads and decodes the stream (a relay's burst is ten times
    its usual rate) has a lower CPU priority than the daemon that answers, as the
    re-verifying workers do: where cores are few, an answer goes first."""
    import multiprocessing

    from atwhois.foundation.pool import BACKGROUND_NICENESS
    from atwhois.stream.process import StreamProcess

    own = os.getpriority(os.PRIO_PROCESS, 0)
    before = set(multiprocessing.active_children())
    process = StreamProcess("ws://127.0.0.1:9", _ignore, MemoryCursor())  # refused: retried
    following = asyncio.create_task(process.run())
    try:
        await eventually(lambda: bool(set(multiprocessing.active_children()) - before), 20)
        (child,) = set(multiprocessing.active_children()) - before
        assert child.pid is not None and own + BACKGROUND_NICENESS <= 19
        await eventually(
            lambda: os.getpriority(os.PRIO_PROCESS, child.pid) == own + BACKGROUND_NICENESS,
            timeout=20,
        )
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
