"""Following Jetstream v2 as the reference server sends it (issue 65), against the stand-in
that sends what the reference sends, its events the test network's real PDS's: an error
frame mid-stream resumes from the last applied seq, nothing lost or applied twice; a
refusal that is not CursorTooOld is a failure asked again, never a gap (F-CUR-5); a v1
time goes to v2 only in timestamp form and a v2 seq never to v1 (F-CUR-4); the subprotocol
is echoed only when offered, and what comes is the reference's bytes."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

import aiohttp
import httpx
import pytest

from atwhois.cache.stores import MemoryStore
from atwhois.foundation import Backoff
from atwhois.stream.cursors import MemoryCursor, Seq, StoreCursor, Time
from atwhois.stream.frames import AccountEvent, IdentityEvent, decode_jetstream_v2
from atwhois.stream.subscriber import Subscriber
from atwhois.stream.wires import JETSTREAM, JETSTREAM2, Wire
from devnet import world
from devnet.jetstream import V2_PATH, JetstreamStandIn, Kept
from devnet.network import DevnetState
from devnet.pds import create_account
from tests.support.waiting import eventually, until, while_running


@dataclass
class Account:
    """An account on the test network's PDS, whose handle changes make identity events."""

    devnet: DevnetState
    name: str
    did: str
    token: str

    def rename(self, tag: str) -> str:
        handle = f"{self.name}-{tag}{world.LIVE_HANDLE_SUFFIX}"
        answer = httpx.post(
            f"{self.devnet.pds_url}/xrpc/com.atproto.identity.updateHandle",
            json={"handle": handle},
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        return handle


def _account(devnet: DevnetState) -> Account:
    name = f"jv{uuid.uuid4().hex[:8]}"
    did = create_account(devnet.pds_url, name)
    session = httpx.post(
        f"{devnet.pds_url}/xrpc/com.atproto.server.createSession",
        json={"identifier": name + world.LIVE_HANDLE_SUFFIX, "password": world.live_password(name)},
        timeout=30,
    ).json()
    return Account(devnet, name, did, session["accessJwt"])


def _kept(jetstream: JetstreamStandIn, handle: str) -> Kept | None:
    """The identity event that named `handle` (None: not kept yet)."""
    for kept in list(jetstream.kept):
        if kept.event.kind == "identity" and kept.event.carried.get("handle") == handle:
            return kept
    return None


def _named(jetstream: JetstreamStandIn, handle: str) -> int | None:
    """The seq of the identity event that named `handle` (None: not kept yet)."""
    kept = _kept(jetstream, handle)
    return None if kept is None else kept.seq


def _followed(jetstream: JetstreamStandIn) -> list[int]:
    """The seqs of what the daemon's v2 wire asks for: identity and account events."""
    return [k.seq for k in list(jetstream.kept) if k.event.kind in ("identity", "account")]


def _subscriber(
    url: str, applied: list[int], cursor: MemoryCursor | StoreCursor, wire: Wire, gaps: list[str]
) -> Subscriber:
    async def on_event(event: IdentityEvent | AccountEvent) -> None:
        applied.append(event.seq)

    async def gap() -> None:
        gaps.append("gap")

    quick = Backoff(base=0.01, cap=0.05)
    return Subscriber(url, on_event, cursor, wire=wire, on_gap=gap, backoff=quick, save_every=0)


def _firehose(devnet: DevnetState) -> str:
    return devnet.pds_url.replace("http://", "ws://")


@pytest.mark.parametrize("code", ["ConsumerTooSlow", "InternalError"])
async def test_after_an_error_frame_the_follower_resumes_from_its_last_applied_seq(
    devnet: DevnetState, code: str
) -> None:
    """F-CUR-5: the stand-in ends the connection after two frames with the reference's
    error frame and a close without a goodbye; the follower asks again, after a back-off,
    from the seq it applied last (inclusive: that event comes again and is dropped), and
    every event after its cursor is applied once, in order."""
    account = _account(devnet)
    with JetstreamStandIn(_firehose(devnet)) as jetstream:
        handles = [account.rename(tag) for tag in "bcde"]  # while nobody follows
        until(lambda: all(_named(jetstream, handle) for handle in handles), 10)
        backlog = _followed(jetstream)
        jetstream.fail_next(code, after=2)
        applied: list[int] = []
        gaps: list[str] = []
        subscriber = _subscriber(
            jetstream.url, applied, MemoryCursor(Seq(backlog[0])), JETSTREAM2, gaps
        )
        await while_running(subscriber.run(), lambda: applied[-1:] == backlog[-1:])
    # frame 1: the event at the cursor (applied already); frame 2: the next, applied; error
    assert jetstream.cursors == [str(backlog[0]), str(backlog[1])]
    assert applied[: len(backlog) - 1] == backlog[1:] and gaps == []
    assert applied == sorted(set(applied))  # in order, each once (later ones may follow)
    state = subscriber.state
    assert state.events["error"] == 1 and state.reconnects >= 1
    assert (state.last_error or "").startswith(code) and state.backwards == 0


@pytest.mark.parametrize(
    ("asked", "name", "says"),
    [
        (("kinds", "likes"), "InvalidRequest", 'unknown kind "likes"'),
        (("zstdDictionary", "1"), "UnknownZstdDictionary", "current dictionary id is 20260811"),
    ],
)
async def test_a_refusal_other_than_cursor_too_old_is_a_failure_asked_again_not_a_gap(
    devnet: DevnetState, asked: tuple[str, str], name: str, says: str
) -> None:
    """F-CUR-5: a 400 before the upgrade is read for its XRPC error (the same URL asked
    again, plainly): InvalidRequest or UnknownZstdDictionary keeps the cursor, is said in the
    stream's state and health, and is asked again with back-off; only CursorTooOld is a gap."""
    with JetstreamStandIn(_firehose(devnet)) as jetstream:
        wire = JETSTREAM2._replace(params=(*JETSTREAM2.params, asked))
        cursor = MemoryCursor(Seq(1))
        gaps: list[str] = []
        subscriber = _subscriber(jetstream.url, [], cursor, wire, gaps)
        await while_running(subscriber.run(), lambda: subscriber.state.reconnects >= 2)
    state = subscriber.state
    assert state.gaps == 0 and gaps == [] and state.cursor == Seq(1)
    assert await cursor.load() == Seq(1)
    assert f"HTTP 400 {name}" in (state.last_error or "") and says in (state.last_error or "")
    idle = state.problem(time.monotonic() + state.stall_after + 1) or ""
    assert name in idle  # what /_health says when it lasts
    assert jetstream.asked_plainly[:2] == ["1", "1"] and jetstream.protocols == []


async def test_a_v1_time_resumes_an_upgraded_instance_in_timestamp_form(
    devnet: DevnetState,
) -> None:
    """F-CUR-4: an instance followed on v1 (its cursor a time) and then on v2 is asked from
    the microsecond after that time, a value of 10^15 or more, which it translates to the
    first seq it witnessed then or after: the change made between is applied, no gap; from
    then on the cursor is the instance's seq."""
    account = _account(devnet)
    with JetstreamStandIn(_firehose(devnet)) as jetstream:
        store = MemoryStore()
        cursor = StoreCursor(store, jetstream.url, JETSTREAM2.stored)
        seen: list[int] = []
        gaps: list[str] = []
        on_v1 = _subscriber(jetstream.url, seen, cursor, JETSTREAM, gaps)
        running = asyncio.create_task(on_v1.run())
        try:
            await eventually(lambda: on_v1.state.connected, 10)
            first = account.rename("b")
            # applied: its time is the cursor (saved when the run is stopped)
            await eventually(lambda: (k := _kept(jetstream, first)) and k.time_us in seen, 10)
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        stored = await cursor.load()
        assert isinstance(stored, Time) and seen and stored == Time(seen[-1])
        missed = account.rename("c")  # while nobody follows
        until(lambda: _named(jetstream, missed) is not None, 10)
        applied: list[int] = []
        on_v2 = _subscriber(jetstream.url, applied, cursor, JETSTREAM2, gaps)
        await while_running(on_v2.run(), lambda: _named(jetstream, missed) in applied)
    assert jetstream.cursors == [str(stored.value + 1)] and stored.value + 1 >= 10**15
    assert gaps == [] and applied.count(_named(jetstream, missed) or 0) == 1
    assert on_v2.state.cursor == Seq(applied[-1])


async def test_a_v2_seq_is_never_sent_to_a_v1_instance(devnet: DevnetState) -> None:
    """F-CUR-4: an instance without v2 (404) is followed on /subscribe; a stored v2 seq is no
    cursor there (the reference would read it as a seq of its own): a gap, from the present."""
    with JetstreamStandIn(_firehose(devnet), v2=False) as jetstream:
        gaps: list[str] = []
        subscriber = _subscriber(jetstream.url, [], MemoryCursor(Seq(3)), JETSTREAM2, gaps)
        await while_running(subscriber.run(), lambda: subscriber.state.connected)
    assert jetstream.cursors_v1 == [None] and jetstream.cursors == []
    assert gaps == ["gap"] and subscriber.wire.path == "/subscribe"


async def test_the_subprotocol_is_echoed_only_when_offered_and_frames_are_the_references(
    devnet: DevnetState,
) -> None:
    """`xrpc.v1.json` comes back when offered, nothing otherwise (v1 never negotiates); a
    replayed event arrives as the reference's encoder writes it, and reads as the event."""
    account = _account(devnet)
    with JetstreamStandIn(_firehose(devnet)) as jetstream:
        handle = account.rename("b")
        until(lambda: _named(jetstream, handle) is not None, 10)
        seq = _named(jetstream, handle)
        (kept,) = [k for k in jetstream.kept if k.seq == seq]
        url = jetstream.url.replace("ws://", "http://")
        offers: list[tuple[str, tuple[str, ...]]] = [
            (V2_PATH, ()),
            (V2_PATH, ("xrpc.v1.json",)),
            (V2_PATH, ("other.v1",)),
            ("/subscribe", ("xrpc.v1.json",)),
        ]
        echoed = [await _echo(url + path, offer, seq) for path, offer in offers]
    assert [protocol for protocol, _ in echoed] == [None, "xrpc.v1.json", None, None]
    assert jetstream.protocols == ["", "xrpc.v1.json", ""]
    for _, frame in echoed[:3]:
        assert frame == kept.v2
        event = decode_jetstream_v2(frame)
        assert isinstance(event, IdentityEvent) and (event.seq, event.did) == (seq, account.did)


async def _echo(url: str, protocols: tuple[str, ...], seq: int | None) -> tuple[str | None, bytes]:
    """The subprotocol a connection got, and the first frame it was sent."""
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, params={"cursor": str(seq)}, protocols=protocols) as ws,
    ):
        message = await ws.receive(timeout=10)
        return ws.protocol, message.data.encode()


async def test_one_cursor_too_old_is_one_gap(devnet: DevnetState) -> None:
    """F-CUR-3: a stream followed, stopped, and asked again from a seq the instance no
    longer keeps is refused CursorTooOld: one gap, counted once and handed on once, and the
    next connection is from the present (before, that connection, opened without a cursor
    by a subscriber that had followed the stream, was counted as a second gap)."""
    account = _account(devnet)
    with JetstreamStandIn(_firehose(devnet)) as jetstream:
        applied: list[int] = []
        gaps: list[str] = []
        subscriber = _subscriber(jetstream.url, applied, MemoryCursor(), JETSTREAM2, gaps)
        running = asyncio.create_task(subscriber.run())
        try:
            await eventually(lambda: subscriber.state.connected, 10)
            handle = account.rename("b")
            await eventually(lambda: _named(jetstream, handle) in applied, 10)
        finally:  # the connection ends with the cursor at that event
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        assert subscriber.state.cursor == Seq(applied[-1]) and gaps == []
        jetstream.forget_before(jetstream.next_seq + 1)  # the floor passes the cursor
        await while_running(
            subscriber.run(), lambda: len(jetstream.cursors) >= 3 and subscriber.state.connected
        )
    assert jetstream.cursors == [None, str(applied[-1]), None]  # refused, then the present
    assert jetstream.asked_plainly == [str(applied[-1])]  # read for its name: CursorTooOld
    assert gaps == ["gap"] and subscriber.state.gaps == 1
