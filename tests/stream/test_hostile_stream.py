"""The event-stream follower against hostile streams (issue 36, items 8-11): stand-ins on
loopback that send real DAG-CBOR frames, a seq that goes back, a frame that never ends, an
`#account` flood about DIDs nobody here asked about, and a PDS speaking about an account it
does not host; the follower's resolver is the real one, on the test network."""

from __future__ import annotations

import asyncio
import random
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from atwhois.cache import CachedResolver
from atwhois.cache.accounts import PREFIX, STATUSES, AccountStates, Mark
from atwhois.cache.stores.memory import MemoryStore
from atwhois.foundation import Backoff
from atwhois.resolver import Resolver, Status
from atwhois.stream import AccountEvent, IdentityEvent
from atwhois.stream.cursors import MemoryCursor, Seq, StoreCursor, Time
from atwhois.stream.follower import Follower
from atwhois.stream.subscriber import Subscriber
from atwhois.stream.wires import PATH
from devnet import relay_frames as f
from devnet.jetstream_wire import events
from devnet.network import DevnetState
from tests.support.clock import Clock
from tests.support.waiting import eventually, while_running

Script = Callable[[web.WebSocketResponse, web.Request, int], Awaitable[None]]


@dataclass
class Stream:
    """A relay or PDS stand-in: each connection runs `script` (given the connection's
    number); `described` is what it answers to describeServer (None: it has no such
    method, as a relay)."""

    script: Script
    described: dict[str, Any] | None = None
    url: str = ""
    cursors: list[str | None] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.cursors.append(request.query.get("cursor"))
        await self.script(ws, request, len(self.cursors))
        await ws.close()
        return ws

    async def describe(self, _: web.Request) -> web.Response:
        if self.described is None:
            raise web.HTTPNotImplemented()
        return web.json_response(self.described)


@pytest.fixture
async def serve_stream() -> AsyncIterator[Callable[[Stream], Awaitable[Stream]]]:
    runners: list[web.AppRunner] = []

    async def start(stream: Stream) -> Stream:
        app = web.Application()
        app.router.add_get(PATH, stream.handle)
        app.router.add_get("/xrpc/com.atproto.server.describeServer", stream.describe)
        runner = web.AppRunner(app, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        stream.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        return stream

    yield start
    for runner in runners:
        await runner.cleanup()


def _quick() -> Backoff:
    return Backoff(base=0.01, cap=0.05, rng=random.Random(2))


async def _run(subscriber: Subscriber, done: Callable[[], bool], timeout: float = 10) -> None:
    await while_running(subscriber.run(), done, timeout)


async def test_a_seq_that_goes_back_is_a_fault_never_a_cursor(
    serve_stream: Callable[[Stream], Awaitable[Stream]],
) -> None:
    """Item 9: 1..5, then 3 (a relay that went back), then, asked again from 5, 6 and 7.
    The event at 3 is not applied, the cursor never goes below 5, the fault is counted."""

    async def script(ws: web.WebSocketResponse, _: web.Request, connection: int) -> None:
        seqs = [1, 2, 3, 4, 5, 3, 8] if connection == 1 else [6, 7]
        for seq in seqs:
            await ws.send_bytes(f.identity(seq, handle=f"s{seq}.example.com"))

    stream = await serve_stream(Stream(script))
    seen: list[int] = []
    cursors: list[Seq | None] = []

    async def on_event(event: IdentityEvent | AccountEvent) -> None:
        seen.append(event.seq)
        cursors.append(subscriber.state.cursor)

    subscriber = Subscriber(stream.url, on_event, MemoryCursor(), backoff=_quick())
    await _run(subscriber, lambda: 7 in seen)
    assert seen == [1, 2, 3, 4, 5, 6, 7]
    assert stream.cursors[:2] == [None, "5"]  # asked again from where it was
    assert subscriber.state.backwards >= 1 and subscriber.state.cursor == Seq(7)
    assert all(c is None or c.value < s for c, s in zip(cursors, seen, strict=True))


async def test_a_stream_opened_again_without_a_cursor_is_a_gap(
    serve_stream: Callable[[Stream], Awaitable[Stream]],
) -> None:
    """F-CUR-2: the first connection closes before any frame gave a cursor (a quiet PDS, a
    reader process killed), so the second is from the present: what happened in between is
    a gap, handed to `on_gap`. The second sends seq 7: later ones replay from 7, no gap.
    A process that replaces one that followed the stream says so (`followed_before`)."""

    async def script(ws: web.WebSocketResponse, _: web.Request, connection: int) -> None:
        if connection == 2:
            await ws.send_bytes(f.identity(7))

    stream = await serve_stream(Stream(script))
    gaps: list[str] = []

    async def on_event(event: IdentityEvent | AccountEvent) -> None:
        pass

    async def gap() -> None:
        gaps.append("gap")

    subscriber = Subscriber(stream.url, on_event, MemoryCursor(), backoff=_quick(), on_gap=gap)
    await _run(subscriber, lambda: len(stream.cursors) >= 4)
    assert stream.cursors[:4] == [None, None, "7", "7"]
    assert gaps == ["gap"] and subscriber.state.gaps == 1

    async def replacing_one(stored: int | None) -> list[str]:
        """The gaps a subscriber that replaces one which followed the stream reports, by its
        first connection (asked from `stored`)."""
        gaps.clear()
        connections = len(stream.cursors)
        cursor = MemoryCursor()
        await cursor.save(None if stored is None else Seq(stored))
        replacing = Subscriber(
            stream.url, on_event, cursor, backoff=_quick(), on_gap=gap, followed_before=True
        )
        await _run(replacing, lambda: len(stream.cursors) > connections)
        assert stream.cursors[connections] == (None if stored is None else str(stored))
        return list(gaps)

    assert await replacing_one(None) == ["gap"]
    assert await replacing_one(7) == []


async def test_a_relay_that_only_goes_back_makes_no_progress(
    serve_stream: Callable[[Stream], Awaitable[Stream]],
) -> None:
    """A relay restarted with lower numbers, sending only those: its frames are not
    followed, and however many arrive, the stream reports no progress."""

    async def script(ws: web.WebSocketResponse, _: web.Request, connection: int) -> None:
        seqs = [5000, 5001, 5002] if connection == 1 else [101, 102, 103]
        for seq in seqs:
            await ws.send_bytes(f.identity(seq))

    stream = await serve_stream(Stream(script))
    seen: list[int] = []

    async def on_event(event: IdentityEvent | AccountEvent) -> None:
        seen.append(event.seq)

    subscriber = Subscriber(stream.url, on_event, MemoryCursor(), backoff=_quick())
    subscriber.state.stall_after = 1.0
    await _run(subscriber, lambda: subscriber.state.problem() is not None, timeout=10)
    assert seen == [5000, 5001, 5002] and subscriber.state.cursor == Seq(5002)
    assert subscriber.state.backwards >= 3
    assert set(stream.cursors[1:]) == {"5002"}  # asked again from its cursor, every time


async def test_a_frame_that_never_ends_is_a_failure_and_health_says_so(
    serve_stream: Callable[[Stream], Awaitable[Stream]],
) -> None:
    """Item 11: a 4 MiB binary frame announced, then a byte every 50 ms. Each byte would
    reset a heartbeat; what counts is a complete message, so the connection is given up
    after two quiet spells and opened again, and the stream reports no progress."""

    async def script(ws: web.WebSocketResponse, request: web.Request, _: int) -> None:
        transport = request.transport
        assert transport is not None
        transport.write(b"\x82\x7f" + struct.pack(">Q", 4 * 1024 * 1024))
        while not transport.is_closing():
            transport.write(b"\x00")
            await asyncio.sleep(0.05)

    stream = await serve_stream(Stream(script))

    async def on_event(event: IdentityEvent | AccountEvent) -> None:
        raise AssertionError("no event was sent")

    subscriber = Subscriber(stream.url, on_event, MemoryCursor(), backoff=_quick(), quiet_after=0.3)
    subscriber.state.stall_after = 1.0
    await _run(subscriber, lambda: subscriber.state.reconnects >= 2, timeout=20)
    assert "no complete message" in str(subscriber.state.last_error)
    await _run(subscriber, lambda: subscriber.state.problem() is not None, timeout=10)
    assert not subscriber.state.connected


@pytest.fixture
async def cached(devnet: DevnetState) -> AsyncIterator[CachedResolver]:
    async with CachedResolver(Resolver(devnet.config()), MemoryStore()) as resolver:
        yield resolver


async def _account_events(
    serve_stream: Callable[[Stream], Awaitable[Stream]],
    frames: list[bytes],
    described: dict[str, Any] | None,
) -> Stream:
    async def script(ws: web.WebSocketResponse, _: web.Request, connection: int) -> None:
        if connection == 1:
            for frame in frames:
                await ws.send_bytes(frame)
        async for _ in ws:  # then quiet, until the follower goes
            pass

    return await serve_stream(Stream(script, described))


async def _followed(cached: CachedResolver, stream: Stream, cursor: int) -> Follower:
    """A follower of `stream`, run until its cursor is `cursor`, then stopped."""
    follower = Follower(cached, [stream.url], quiet_after=5)
    await follower.start()
    try:
        await eventually(lambda: follower.subscribers[0].state.cursor == Seq(cursor), 10)
    finally:
        await follower.stop()
    return follower


async def test_an_account_flood_about_strangers_keeps_nothing(
    serve_stream: Callable[[Stream], Awaitable[Stream]],
    cached: CachedResolver,
    devnet: DevnetState,
) -> None:
    """Item 8: 20,000 `#account active: false` events about DIDs this daemon neither holds
    nor watches keep nothing (no row, no mark); one about a DID it holds, in the middle of
    the flood, is kept as a row of its own and changes its answers."""
    alice = devnet.did("alice")
    assert (await cached.lookup("alice.test")).status is Status.VERIFIED
    frames = [
        f.account(seq, False, "takendown", did=f"did:plc:{seq:024d}") for seq in range(1, 20001)
    ]
    frames.insert(10_000, f.account(20_001, False, "suspended", did=alice))
    frames[10_001:] = [
        f.account(seq + 20_001, False, "takendown", did=f"did:plc:{seq:024d}z")
        for seq in range(1, len(frames) - 10_000)
    ]
    stream = await _account_events(serve_stream, frames, None)
    follower = Follower(cached, [stream.url], quiet_after=5)
    await follower.start()
    try:
        await eventually(lambda: follower.ignored["not_held"] >= 20_000, 60)
    finally:
        await follower.stop()
    assert follower.ignored["not_held"] == 20_000
    rows = await cached.store.scan(PREFIX, 100)
    assert rows == [(PREFIX + alice, b"suspended")]
    assert len(cached.accounts) == 1
    assert (await cached.lookup("alice.test")).status is Status.DID_DEACTIVATED
    again = AccountStates()  # a restart: the row is what is kept
    await again.load(cached.store, 0.0)
    assert again.status(alice) == "suspended"


@pytest.mark.parametrize("speaker", ["other-pds", "its-pds", "relay"])
async def test_a_pds_speaks_only_for_the_accounts_it_hosts(
    serve_stream: Callable[[Stream], Awaitable[Stream]],
    cached: CachedResolver,
    devnet: DevnetState,
    speaker: str,
) -> None:
    """Item 10: `#account active: false` about a held DID, from a PDS's stream that does not
    host it, changes nothing; from the PDS its document names, or from a relay, it does."""
    alice = devnet.did("alice")
    assert (await cached.lookup("alice.test")).status is Status.VERIFIED
    pds = await cached.hosted_at(alice)
    assert pds is not None
    host = {"other-pds": "elsewhere.test", "its-pds": pds.split("://")[1].split(":")[0]}
    described = None if speaker == "relay" else {"did": f"did:web:{host[speaker]}"}
    stream = await _account_events(
        serve_stream, [f.account(1, False, "deactivated", did=alice)], described
    )
    follower = await _followed(cached, stream, 1)
    state = follower.subscribers[0].state
    assert state.role == ("relay" if speaker == "relay" else "pds")
    status = (await cached.lookup("alice.test")).status
    if speaker == "other-pds":
        assert follower.ignored["not_its_account"] == 1
        assert status is Status.VERIFIED and cached.accounts.status(alice) is None
    else:
        assert status is Status.DID_DEACTIVATED
        assert cached.accounts.status(alice) == "deactivated"


async def test_marks_are_bounded_in_number() -> None:
    """Past `max_marked`, a new mark is refused and counted; lifting one makes room."""
    store, states = MemoryStore(), AccountStates(max_marked=2)
    dids = [f"did:plc:{n:024d}" for n in range(3)]
    assert await states.mark(store, dids[0], Mark(False, "takendown"), time.time())
    assert await states.mark(store, dids[1], Mark(False, "takendown"), time.time())
    assert not await states.mark(store, dids[2], Mark(False, "takendown"), time.time())
    assert states.refused == 1 and states.status(dids[2]) is None
    assert await states.mark(store, dids[0], None, time.time())
    assert await states.mark(store, dids[2], Mark(False, "deleted"), time.time())
    assert sorted(k for k, _ in await store.scan(PREFIX, 10)) == [PREFIX + d for d in dids[1:]]


async def test_a_stored_cursor_that_is_no_number_is_dropped() -> None:
    """Smaller item: a cursor entry in non-ASCII digits (`٣` passes `str.isdigit()` and
    `int()` takes it) or past 64 bits is not a cursor: the stream starts from the present."""
    store = MemoryStore()
    cursor = StoreCursor(store, "ws://relay.test", Seq)
    for text in ("٣", "99999999999999999999", "-5", ""):
        await store.put(cursor.key, text.encode(), time.time() + 60)
        assert await cursor.load() is None, text
    await cursor.save(Seq(42))
    assert await cursor.load() == Seq(42)


@pytest.mark.parametrize(
    ("active", "status"),
    [(False, status) for status in STATUSES]
    + [(False, None), (False, "a-status-not-known-yet")]
    + [(True, status) for status, meaning in STATUSES.items() if meaning.serves],
)
async def test_every_account_status_is_what_a_reader_sees(
    serve_stream: Callable[[Stream], Awaitable[Stream]],
    cached: CachedResolver,
    devnet: DevnetState,
    active: bool,
    status: str | None,
) -> None:
    """Sync 1.1, one row of `cache.accounts.STATUSES` each, through the follower and a
    relay stand-in: not active (any status, a new one too) is `did_deactivated` with the
    status and its meaning as the reason; `desynchronized` or `throttled` while active is
    still verified, with a warning, never deactivated; plainly active lifts either."""
    alice = devnet.did("alice")
    assert (await cached.lookup("alice.test")).status is Status.VERIFIED
    frames = [f.account(1, active, status, did=alice), f.account(2, True, None, did=alice)]
    await _followed(cached, await _account_events(serve_stream, frames[:1], None), 1)
    seen = await cached.lookup("alice.test")
    meaning = STATUSES.get(status or "")
    if active:
        assert meaning is not None and meaning.serves
        assert seen.status is Status.VERIFIED and f"account_{status}" in seen.warnings
    else:
        assert seen.status is Status.DID_DEACTIVATED
        assert f"the account is {status or 'inactive'}" in (seen.error or "")
        if meaning is not None:
            assert meaning.means in (seen.error or "")
    await _followed(cached, await _account_events(serve_stream, frames[1:], None), 2)
    lifted = await cached.lookup("alice.test")
    assert lifted.status is Status.VERIFIED and not any(
        w.startswith("account_") for w in lifted.warnings
    )


async def test_an_identity_event_without_a_handle_still_re_verifies_the_handle(
    serve_stream: Callable[[Stream], Awaitable[Stream]],
    devnet: DevnetState,
) -> None:
    """A relay may drop an `#identity` event's handle: the handle the DID declares is
    resolved afresh all the same (its entry, a minute old by the cache's clock and still
    fresh, so that only the event can have made it new)."""
    alice = devnet.did("alice")
    clock = Clock()
    store = MemoryStore(clock=clock)
    async with CachedResolver(Resolver(devnet.config()), store, clock=clock) as cached:
        assert (await cached.lookup("alice.test")).status is Status.VERIFIED
        clock.now += 60
        aged = (await cached.lookup("alice.test")).cache
        assert aged is not None and aged.age_s >= 60 and aged.state == "fresh"
        stream = await _account_events(serve_stream, [f.identity(1, did=alice, handle=None)], None)
        follower = Follower(cached, [stream.url], quiet_after=5)
        await follower.start()
        try:

            async def refreshed() -> bool:
                info = (await cached.lookup("alice.test")).cache
                return info is not None and info.age_s < 60

            await eventually(refreshed, timeout=10, what="the handle was not re-verified")
        finally:
            await follower.stop()


async def test_a_cursor_no_source_can_send_is_a_counted_fault_and_a_stored_one_is_repaired(
    serve_stream: Callable[[Stream], Awaitable[Stream]],
) -> None:
    """F-CUR-1 (issue 55, item 4): a Jetstream message whose time_us is 2^63-1, another of 10^30,
    among honest ones: both counted as implausible, neither applied nor made the cursor, and
    the honest events after them are applied (before, the cursor went to 2^63-1 and every
    later event was "backwards", across restarts). A stored cursor of 2^63-1 (written by an
    earlier version) is repaired on load: the stream is asked from its present (no cursor),
    the gap counted and told, so that what the daemon holds is re-verified."""
    from atwhois.stream.wires import JETSTREAM

    now_us = int(time.time() * 1_000_000)
    times = [now_us, 2**63 - 1, 10**30, now_us + 1, now_us + 2]

    async def script(ws: web.WebSocketResponse, _: web.Request, connection: int) -> None:
        for index, time_us in enumerate(times):
            frame = f.identity(index + 1, handle=f"j{index}.example.com")
            (event,) = events(frame)  # as the reference's v1 encoder writes it
            await ws.send_str((event.v1(time_us, 0) or b"").decode())

    stream = await serve_stream(Stream(script))
    stream_path = stream.url  # the Jetstream stand-in answers on the relay's path too
    applied: list[int] = []

    async def on_event(event: IdentityEvent | AccountEvent) -> None:
        applied.append(event.seq)

    subscriber = Subscriber(
        stream_path, on_event, MemoryCursor(), backoff=_quick(), wire=JETSTREAM._replace(path=PATH)
    )
    await _run(subscriber, lambda: now_us + 2 in applied)
    assert applied == [now_us, now_us + 1, now_us + 2]
    assert subscriber.state.implausible == 2 and subscriber.state.cursor == Time(now_us + 2)

    store = MemoryStore()
    cursor = StoreCursor(store, stream.url, JETSTREAM.stored)
    await cursor.save(Time(2**63 - 1))
    gaps: list[bool] = []

    async def gap() -> None:
        gaps.append(True)

    restarted = Subscriber(
        stream.url,
        on_event,
        cursor,
        backoff=_quick(),
        wire=JETSTREAM._replace(path=PATH),
        on_gap=gap,
    )
    await _run(restarted, lambda: restarted.state.cursor == Time(now_us + 2))
    assert stream.cursors[-1] is None  # asked from its present, not from 2^63
    assert restarted.state.gaps == 1 and gaps == [True]
    loaded = await cursor.load()
    assert loaded is None or (isinstance(loaded, Time) and loaded.value <= now_us + 2)
