"""Following a Jetstream (`serve --jetstream URL`, issue 32): its JSON messages decoded as
the firehose's events (a stranger's bytes: malformed ones refused, never a crash), and the
daemon following a Jetstream stand-in that re-encodes the test network's real PDS stream:
a handle change and a deactivation made through the PDS's API answered within 2 s, and a
restart resumed from the stored cursor with nothing lost and nothing applied twice."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from atwhois.stream.frames import (
    AccountEvent,
    IdentityEvent,
    MalformedFrame,
    Skipped,
    decode_jetstream,
)
from devnet import world
from devnet.atwhois import Daemon, running_daemon
from devnet.jetstream import JetstreamStandIn
from devnet.network import DevnetState
from devnet.pds import create_account
from tests.support.waiting import until

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


def test_the_daemon_follows_a_jetstream_and_resumes_from_its_cursor(
    devnet: DevnetState, tmp_path: Path
) -> None:
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
    with JetstreamStandIn(devnet.pds_url.replace("http://", "ws://")) as jetstream:
        args = ("--jetstream", jetstream.url, "--cache", cache, "--ttl-verified", "3600:86400")
        with running_daemon(devnet.env(), tmp_path / "a.log", *args) as daemon:
            assert _did_of(daemon, first) == (200, did)  # held, for an hour
            until(lambda: _stream(daemon)["connected"], 10)
            _pds(devnet, "com.atproto.identity.updateHandle", {"handle": second}, token)
            until(lambda: _did_of(daemon, second) == (200, did), 2)
            assert _did_of(daemon, first)[0] != 200
            _pds(devnet, "com.atproto.server.deactivateAccount", {}, token)
            resolve_did = f"{daemon.url}/xrpc/com.atproto.identity.resolveDid"
            until(lambda: httpx.get(resolve_did, params={"did": did}).status_code == 404, 2)
            _pds(devnet, "com.atproto.server.activateAccount", None, token)
            until(lambda: httpx.get(resolve_did, params={"did": did}).status_code == 200, 2)
            _pds(devnet, "com.atproto.identity.updateHandle", {"handle": third}, token)
            until(lambda: _did_of(daemon, third) == (200, did), 2)
            # the third handle resolves as a miss, maybe before its event is applied: the
            # daemon stops once its cursor is past that event, so that nothing comes again
            # after the restart
            until(lambda: _sent(jetstream, third) is not None, 5)
            until(lambda: (_stream(daemon)["cursor"] or 0) >= (_sent(jetstream, third) or 0), 5)
            before = _stream(daemon)
            assert before["role"] == "relay" and before["malformed"] == 0
            applied = before["events"]
        # while no daemon follows: a change it must not miss
        _pds(devnet, "com.atproto.identity.updateHandle", {"handle": fourth}, token)
        until(lambda: _sent(jetstream, fourth) is not None, 5)
        with running_daemon(devnet.env(), tmp_path / "b.log", *args) as daemon:
            until(lambda: _did_of(daemon, fourth) == (200, did), 5)
            # the stream's state comes from its own process: read once it is past the event
            until(lambda: (_stream(daemon)["cursor"] or 0) > before["cursor"], 5)
            after = _stream(daemon)
            # resumed after its cursor: only what came while it was away, nothing again
            assert after["events"]["#identity"] == 1
            assert after["cursor"] > before["cursor"] and after["backwards"] == 0
    assert applied.get("#identity", 0) >= 3 and applied.get("#account", 0) >= 2


def _identities(jetstream: JetstreamStandIn) -> list[tuple[int, str, dict[str, Any]]]:
    return [entry for entry in list(jetstream.kept) if entry[1] == "identity"]


def _sent(jetstream: JetstreamStandIn, handle: str) -> int | None:
    """The cursor of the identity event that named `handle` (None: not sent yet)."""
    sent = [e[0] for e in _identities(jetstream) if e[2]["identity"].get("handle") == handle]
    return sent[0] if sent else None
