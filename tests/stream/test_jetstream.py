"""Following a Jetstream (`serve --jetstream URL`, issue 32): its JSON messages decoded as
the firehose's events (a stranger's bytes: malformed ones refused, never a crash), and the
daemon following a Jetstream stand-in that re-encodes the test network's real PDS stream:
a handle change and a deactivation made through the PDS's API answered within 2 s, and a
restart resumed from the stored cursor with nothing lost and nothing applied twice."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from atwhois.cache.stores import MemoryStore
from atwhois.foundation import Backoff
from atwhois.stream.cursors import Seq, StoreCursor, Time
from atwhois.stream.frames import (
    AccountEvent,
    IdentityEvent,
    MalformedFrame,
    Skipped,
    decode_jetstream,
)
from atwhois.stream.subscriber import Subscriber
from atwhois.stream.wires import JETSTREAM2
from devnet import world
from devnet.atwhois import Daemon, daemon_here
from devnet.jetstream import JetstreamStandIn
from devnet.network import DevnetState
from devnet.pds import create_account
from tests.support import metrics
from tests.support.waiting import eventually, until, while_running

DID = "did:plc:" + "a" * 24


def message(**fields: Any) -> bytes:
    return json.dumps({"did": DID, "time_us": 1725911162329308, **fields}).encode()


def test_jetstream_messages_are_the_firehoses_events() -> None:
    identity = message(kind="identity", identity={"did": DID, "handle": "a.test", "time": "t"})
    assert decode_jetstream(identity) == IdentityEvent(1725911162329308, DID, "t", "a.test")
    nameless = message(kind="identity", identity={"did": DID, "time": "t", "handle": "not ok!"})
    assert decode_jetstream(nameless) == IdentityEvent(1725911162329308, DID, "t", None)
    account = message(
        kind="account", account={"did": DID, "time": "t", "active": False, "status": "takendown"}
    )
    assert decode_jetstream(account) == AccountEvent(1725911162329308, DID, "t", False, "takendown")
    commit = message(kind="commit", commit={"collection": "app.bsky.feed.post"})
    assert decode_jetstream(commit) == Skipped("commit", 1725911162329308)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "a JSON object"),
        (json.dumps({"kind": "identity", "did": DID}).encode(), "time_us"),
        (message(time_us=-1, kind="identity"), "time_us"),
        (message(time_us=True, kind="identity"), "time_us"),
        (message(kind=7), "kind"),
        (message(kind="identity"), "identity` object"),
        (message(kind="identity", identity={"did": "nope", "time": "t"}), "not a DID"),
        (
            message(kind="identity", identity={"did": "did:plc:" + "b" * 24, "time": "t"}),
            "not its identity",
        ),
        (message(kind="account", account={"did": DID, "time": "t", "active": "no"}), "boolean"),
        (message(kind="identity", identity={"did": DID, "time": 5}), "`time`"),
        (b"{" + b'"a":' * 10 + b"1" + b"}" * 10, "not JSON"),
        (b" " * (5 * 1024 * 1024 + 1), "at most"),
    ],
)
def test_a_malformed_message_is_refused_with_its_reason(raw: bytes, why: str) -> None:
    with pytest.raises(MalformedFrame, match=why):
        decode_jetstream(raw)


def _pds(devnet: DevnetState, method: str, body: dict[str, Any] | None, token: str) -> None:
    answer = httpx.post(
        f"{devnet.pds_url}/xrpc/{method}",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text


def _did_of(daemon: Daemon, handle: str) -> tuple[int, str | None]:
    answer = httpx.get(
        f"{daemon.url}/xrpc/com.atproto.identity.resolveHandle",
        params={"handle": handle},
        timeout=30,
    )
    return answer.status_code, answer.json().get("did")


def _stream(daemon: Daemon) -> dict[str, Any]:
    streams: list[dict[str, Any]] = httpx.get(daemon.url + "/_health", timeout=10).json()["streams"]
    return streams[0]


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
def test_the_daemon_follows_a_jetstream_and_resumes_from_its_cursor(
    devnet: DevnetState, tmp_path: Path, v2: bool
) -> None:
    """On an instance with Jetstream v2 (issue 57) the daemon follows subscribeEvents, its
    cursor the instance's seq, resumed inclusive; on one without, /subscribe (v1), its
    cursor the message's time. The stand-in sends what the reference Jetstream sends (issue
    65): v2's `message` frames, v1's messages with `cursor`."""
    name = f"jet{uuid.uuid4().hex[:8]}"
    did = create_account(devnet.pds_url, name)
    first, second, third, fourth = (
        f"{name}{tag}{world.LIVE_HANDLE_SUFFIX}" for tag in ("", "-b", "-c", "-d")
    )
    session = httpx.post(
        f"{devnet.pds_url}/xrpc/com.atproto.server.createSession",
        json={"identifier": first, "password": world.live_password(name)},
        timeout=30,
    ).json()
    token = session["accessJwt"]
    cache = f"sqlite://{tmp_path}/cache.db"
    with JetstreamStandIn(devnet.pds_url.replace("http://", "ws://"), v2=v2) as jetstream:
        args = ("--jetstream", jetstream.url, "--cache", cache, "--ttl-verified", "3600:86400")
        with daemon_here(devnet.env(), tmp_path / "a.log", *args) as daemon:
            assert _did_of(daemon, first) == (200, did)  # held, for an hour: what follows
            # within seconds is the stream's work
            until(lambda: _stream(daemon)["connected"], 10)
            _pds(devnet, "com.atproto.identity.updateHandle", {"handle": second}, token)
            until(lambda: _did_of(daemon, second) == (200, did), 5)
            assert _did_of(daemon, first)[0] != 200
            _pds(devnet, "com.atproto.server.deactivateAccount", {}, token)
            resolve_did = f"{daemon.url}/xrpc/com.atproto.identity.resolveDid"
            until(lambda: httpx.get(resolve_did, params={"did": did}).status_code == 404, 5)
            _pds(devnet, "com.atproto.server.activateAccount", None, token)
            until(lambda: httpx.get(resolve_did, params={"did": did}).status_code == 200, 5)
            _pds(devnet, "com.atproto.identity.updateHandle", {"handle": third}, token)
            until(lambda: _did_of(daemon, third) == (200, did), 5)
            # the third handle resolves as a miss, maybe before its event is applied: the
            # daemon stops once its cursor is past that event, so that nothing comes again
            # after the restart
            until(lambda: _sent(jetstream, third, v2) is not None, 5)
            until(lambda: (_stream(daemon)["cursor"] or 0) >= (_sent(jetstream, third, v2) or 0), 5)
            before = _stream(daemon)
            assert before["role"] == "relay" and before["malformed"] == 0
            applied = before["events"]
        # while no daemon follows: a change it must not miss
        _pds(devnet, "com.atproto.identity.updateHandle", {"handle": fourth}, token)
        until(lambda: _sent(jetstream, fourth, v2) is not None, 5)
        with daemon_here(devnet.env(), tmp_path / "b.log", *args) as daemon:
            # as before the restart, the bound is the stream's work once it is connected
            # (its process starts behind the one that answers: seconds on a loaded machine)
            until(lambda: _stream(daemon)["connected"], 10)
            until(lambda: _did_of(daemon, fourth) == (200, did), 5)
            # the stream's state comes from its own process: read once it is past the event
            until(lambda: (_stream(daemon)["cursor"] or 0) > before["cursor"], 5)
            after = _stream(daemon)
            # resumed after its cursor: only what came while it was away, nothing again
            assert after["events"]["#identity"] == 1
            assert after["cursor"] > before["cursor"] and after["backwards"] == 0
        if v2:  # the instance no longer holds what follows the stored seq (CursorTooOld)
            until(lambda: jetstream.kept[-1].seq >= after["cursor"], 5)
            jetstream.forget_before(jetstream.next_seq + 1)
            with daemon_here(devnet.env(), tmp_path / "c.log", *args) as daemon:
                until(lambda: _stream(daemon)["gaps"] == 1, 10)  # /_health says so
                metrics_url = daemon.url + "/metrics"
                # every identity the daemon holds is re-verified
                until(lambda: _revalidated(httpx.get(metrics_url).text) >= 1, 10)
    assert applied.get("#identity", 0) >= 3 and applied.get("#account", 0) >= 2
    if v2:  # the stored seq, asked again (inclusive); never a time, never v1's path
        assert jetstream.cursors[0] is None and str(before["cursor"]) in jetstream.cursors[1:]
        assert before["cursor"] < 10**15 and jetstream.cursors_v1 == []
        # the refusal's 400 was asked again plainly, for its XRPC error name (CursorTooOld)
        assert jetstream.asked_plainly == [str(after["cursor"])]
        assert set(jetstream.protocols) == {"xrpc.v1.json"}  # offered, echoed
    else:  # the microsecond after the stored time (inclusive replay), on /subscribe
        assert jetstream.cursors_v1[0] is None
        assert str(before["cursor"] + 1) in jetstream.cursors_v1[1:]


def _revalidated(text: str) -> float:
    return metrics.value(text, "atwhois_stream_revalidations_total", missing=0.0, result="done")


def _sent(jetstream: JetstreamStandIn, handle: str, v2: bool = False) -> int | None:
    """The cursor of the identity event that named `handle` (None: not sent yet): its time
    in microseconds (v1), or its seq at this instance (v2)."""
    sent = [
        kept.seq if v2 else kept.time_us
        for kept in list(jetstream.kept)
        if kept.event.kind == "identity" and kept.event.carried.get("handle") == handle
    ]
    return sent[0] if sent else None


async def test_v2_gaps_a_cursor_too_old_an_outdated_time_and_another_instances_seq(
    devnet: DevnetState,
) -> None:
    """Issue 57, F-CUR-3: a seq below the instance's retention floor is refused before the
    upgrade (CursorTooOld, read from the 400's XRPC error), a time below it is clamped (#info
    OutdatedCursor), a seq past its next one starts at its live tip without a word (the
    first event comes below the cursor): each is a gap, handed to `on_gap` (the daemon
    re-verifies what it holds) and counted for /_health, never skipped silently. A cursor is
    stored by the instance's URL: another instance starts at its tip."""
    name = f"jg{uuid.uuid4().hex[:8]}"
    did = create_account(devnet.pds_url, name)
    session = httpx.post(
        f"{devnet.pds_url}/xrpc/com.atproto.server.createSession",
        json={"identifier": name + world.LIVE_HANDLE_SUFFIX, "password": world.live_password(name)},
        timeout=30,
    ).json()
    firehose = devnet.pds_url.replace("http://", "ws://")
    store = MemoryStore()
    applied: list[int] = []
    gaps: list[str] = []

    async def on_event(event: IdentityEvent | AccountEvent) -> None:
        applied.append(event.seq)

    async def gap() -> None:
        gaps.append("gap")

    def follower(url: str) -> Subscriber:
        cursor = StoreCursor(store, url, JETSTREAM2.stored)
        quick = Backoff(base=0.01, cap=0.05)
        return Subscriber(url, on_event, cursor, wire=JETSTREAM2, on_gap=gap, backoff=quick)

    with (
        JetstreamStandIn(firehose, first_seq=1) as one,
        JetstreamStandIn(firehose, first_seq=50_000) as other,
    ):
        first = follower(one.url)
        running = asyncio.create_task(first.run())
        try:
            await eventually(lambda: first.state.connected, 10)
            handle = {"handle": f"{name}-b{world.LIVE_HANDLE_SUFFIX}"}
            _pds(devnet, "com.atproto.identity.updateHandle", handle, session["accessJwt"])
            await eventually(lambda: first.state.cursor is not None and applied, 10)
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        seen = first.state.cursor
        assert isinstance(seen, Seq) and seen.value < 50_000 and gaps == []
        assert await StoreCursor(store, one.url, JETSTREAM2.stored).load() == seen
        elsewhere = follower(other.url)  # the same store: this instance's seq is not there
        await while_running(elsewhere.run(), lambda: elsewhere.state.connected)
        assert other.cursors == [None] and gaps == []

        one.forget_before(one.next_seq + 5)  # the floor passes the stored seq
        again = follower(one.url)
        await while_running(again.run(), lambda: again.state.gaps == 1 and again.state.connected)
        assert one.cursors[-2:] == [str(seen.value), None]  # refused, then from the present
        assert one.asked_plainly == [str(seen.value)]  # the 400 read for its error name
        assert gaps == ["gap"]

        time_us = one.kept[0].time_us - 2 if one.kept else 10**15 + 1  # asked: the µs after
        stored = StoreCursor(store, one.url, JETSTREAM2.stored)
        await stored.save(Time(time_us if time_us >= 10**15 else 10**15 + 1))
        clamped = follower(one.url)
        await while_running(clamped.run(), lambda: clamped.state.gaps == 1)
        assert clamped.state.outdated_cursor == 1 and gaps == ["gap", "gap"]
        assert clamped.state.events["#info"] == 1  # the info itself carried no seq, moved none

        await stored.save(Seq(one.next_seq + 1000))
        ahead = follower(one.url)
        running = asyncio.create_task(ahead.run())
        try:  # its live tip: the next event is below the cursor asked from
            await eventually(lambda: ahead.state.connected, 10)
            handle = {"handle": f"{name}-c{world.LIVE_HANDLE_SUFFIX}"}
            _pds(devnet, "com.atproto.identity.updateHandle", handle, session["accessJwt"])
            await eventually(lambda: ahead.state.gaps == 1, 10)
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        assert gaps == ["gap", "gap", "gap"]
    assert did
