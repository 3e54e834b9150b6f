"""The reference PDS in the test network: accounts it made through its own XRPC API verify
end to end, a handle change made through its API is what a fresh lookup sees, and its
event stream, followed by `stream.Subscriber`, carries the identity and account events
of those changes."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from atwhois.foundation import Backoff
from atwhois.resolver import Config, Resolver, Status
from atwhois.stream import AccountEvent, IdentityEvent
from atwhois.stream.cursors import MemoryCursor, Seq
from atwhois.stream.subscriber import Subscriber
from devnet import world
from devnet.atwhois import Daemon, daemon_here, running_daemon
from devnet.network import DevnetState
from devnet.pds import create_account
from devnet.process import children, connections_to
from tests.support import metrics
from tests.support.waiting import eventually
from tests.support.webhook_receiver import Receiver


def xrpc(
    devnet: DevnetState, method: str, body: dict[str, Any] | None, token: str | None = None
) -> Any:
    """A procedure of the PDS's own API (`body` None: one that takes none)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"{devnet.pds_url}/xrpc/{method}"
    response = httpx.post(url, json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return response.json() if response.content else None


async def test_the_accounts_it_made_verify(devnet: DevnetState, devnet_config: Config) -> None:
    config = dataclasses.replace(devnet_config, verify_plc=True)
    async with Resolver(config) as resolver:
        for handle, did in devnet.live.items():
            identity = await resolver.lookup(handle)
            assert identity.status is Status.VERIFIED, identity.error
            assert identity.did == did and identity.pds == f"https://{world.LIVE_PDS_HOST}"
            assert identity.https.did == did  # served by the PDS itself
            assert identity.plc_log.outcome == "ok"  # registered by it with the directory


async def test_its_event_stream_tells_of_a_handle_change_and_a_deactivation(
    devnet: DevnetState, devnet_config: Config
) -> None:
    name = f"ev{uuid.uuid4().hex[:8]}"
    did = create_account(devnet.pds_url, name)
    old = name + world.LIVE_HANDLE_SUFFIX
    session = xrpc(
        devnet,
        "com.atproto.server.createSession",
        {"identifier": old, "password": world.live_password(name)},
    )
    events: list[IdentityEvent | AccountEvent] = []

    async def on_event(event: IdentityEvent | AccountEvent) -> None:
        if event.did == did:
            events.append(event)

    subscriber = Subscriber(
        devnet.pds_url.replace("http://", "ws://"),
        on_event,
        MemoryCursor(Seq(0)),
        backoff=Backoff(0.05, 0.2),
    )
    task = asyncio.create_task(subscriber.run())
    try:
        new = f"{name}-new{world.LIVE_HANDLE_SUFFIX}"
        await asyncio.to_thread(
            xrpc, devnet, "com.atproto.identity.updateHandle", {"handle": new}, session["accessJwt"]
        )
        await eventually(
            lambda: any(isinstance(e, IdentityEvent) and e.handle == new for e in events), 20
        )
        async with Resolver(devnet_config) as resolver:
            assert (await resolver.lookup(new)).status is Status.VERIFIED
            assert (await resolver.lookup(old)).status is not Status.VERIFIED
        await asyncio.to_thread(
            xrpc, devnet, "com.atproto.server.deactivateAccount", {}, session["accessJwt"]
        )
        await eventually(
            lambda: any(isinstance(e, AccountEvent) and not e.active for e in events), 20
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    deactivated = next(e for e in events if isinstance(e, AccountEvent) and not e.active)
    assert deactivated.status == "deactivated"
    assert subscriber.state.cursor is not None and subscriber.state.malformed == 0
    assert subscriber.state.events["#identity"] >= 1


def test_the_daemon_follows_the_pds_and_re_verifies_at_once(
    devnet: DevnetState, tmp_path: Path, receiver: Receiver
) -> None:
    """Two daemons cache the same verified handle (TTL one hour); the account moves to
    another handle through the PDS's API. Within 2 s, with no refresh call, the one that
    follows the PDS's stream answers the new handle, refuses the old one (HandleNotFound)
    and shows the new alias for the DID, from its cache; the other still serves what it
    cached, as its TTL allows. A deactivation is DidDeactivated within 2 s, a reactivation
    lifts it; the audits re-check the watched handle at once and deliver their finding."""
    name = f"fol{uuid.uuid4().hex[:8]}"
    did = create_account(devnet.pds_url, name)
    old, new = name + world.LIVE_HANDLE_SUFFIX, f"{name}-moved{world.LIVE_HANDLE_SUFFIX}"
    stream_url = devnet.pds_url.replace("http://", "ws://")
    common = ("--cache", "memory:", "--ttl-verified", "3600:86400")
    follow = (
        "--firehose", stream_url, "--refresh-token", "t0k", "--webhook", receiver.url,
        "--audit-db", str(tmp_path / "audit.db"),
    )  # fmt: skip
    with (
        daemon_here(devnet.env(), tmp_path / "a.log", *common, *follow) as following,
        daemon_here(devnet.env(), tmp_path / "b.log", *common) as other,
    ):
        for daemon in (following, other):
            assert resolve_handle(daemon, old) == (200, did)
        watched = httpx.post(
            following.url + "/v1/watch",
            json={"identifier": old, "label": "ours"},
            headers={"Authorization": "Bearer t0k"},
        )
        assert watched.status_code == 201
        baseline = httpx.post(  # the audit's first check: what an event is compared with
            following.url + "/v1/audit/runs", headers={"Authorization": "Bearer t0k"}, timeout=60
        )
        assert baseline.json()["by_status"] == {"verified": 1}
        _wait(lambda: httpx.get(following.url + "/_health").json()["streams"][0]["connected"])
        session = xrpc(
            devnet,
            "com.atproto.server.createSession",
            {"identifier": old, "password": world.live_password(name)},
        )
        xrpc(devnet, "com.atproto.identity.updateHandle", {"handle": new}, session["accessJwt"])
        _wait(lambda: resolve_handle(following, new) == (200, did), timeout=10)
        # Served no more: HandleNotFound once the old handle's own re-verification is in;
        # until then (seen under load: that fetch failed, so its part was kept, as any
        # failed refresh keeps it) the DID declaring another handle refuses it all the same.
        refused = xrpc_get(following, "resolveHandle", handle=old)
        assert (refused.status_code, refused.json()["error"]) in {
            (404, "HandleNotFound"),
            (400, "InvalidRequest"),
        }
        document = xrpc_get(following, "resolveDid", did=did)
        assert document.json()["didDoc"]["alsoKnownAs"] == [f"at://{new}"]
        report = httpx.get(f"{following.url}/v1/identity/{did}").json()
        assert report["status"] == "verified" and report["handle"] == new
        assert report["cache"]["cached"] and report["cache"]["state"] == "fresh"  # not a miss
        assert resolve_handle(other, old) == (200, did)  # without the stream: an hour-old truth

        # The audits heard it: the watched handle re-checked now, its finding delivered.
        _wait(lambda: bool(receiver.payloads()), timeout=10)
        delivered = receiver.payloads()[0]
        assert delivered["source"] == "event stream"
        assert ("became_unverified", old, "ours") in {
            (f["kind"], f["identifier"], f["label"]) for f in delivered["findings"]
        }

        xrpc(devnet, "com.atproto.server.deactivateAccount", {}, session["accessJwt"])
        _wait(lambda: xrpc_get(following, "resolveDid", did=did).status_code == 404, timeout=10)
        gone = xrpc_get(following, "resolveDid", did=did).json()
        assert gone["error"] == "DidDeactivated" and "deactivated" in gone["message"]
        assert resolve_handle(following, new)[0] == 404  # its handle leads nowhere now
        xrpc(devnet, "com.atproto.server.activateAccount", None, session["accessJwt"])
        _wait(lambda: xrpc_get(following, "resolveDid", did=did).status_code == 200, timeout=10)

        health = httpx.get(following.url + "/_health").json()["streams"][0]
        assert health["events"]["#identity"] >= 1 and health["events"]["#account"] >= 2
        assert health["cursor"] is not None and health["malformed"] == 0
        text = httpx.get(following.url + "/metrics").text
        assert metrics.value(text, "atwhois_stream_revalidations_total", result="done") >= 1
        assert metrics.value(text, "atwhois_stream_connected", url=stream_url) == 1


def test_a_restarted_daemon_applies_what_changed_while_it_was_away(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """The cursor and the cache are in the SQLite file: a daemon stopped, a handle changed
    meanwhile, the daemon started again resumes from its cursor and applies the change."""
    name = f"rst{uuid.uuid4().hex[:8]}"
    did = create_account(devnet.pds_url, name)
    first, second, third = (f"{name}{tag}{world.LIVE_HANDLE_SUFFIX}" for tag in ("", "-b", "-c"))
    session = xrpc(
        devnet,
        "com.atproto.server.createSession",
        {"identifier": first, "password": world.live_password(name)},
    )
    args = (
        "--cache", f"sqlite://{tmp_path}/cache.db", "--ttl-verified", "3600:86400",
        "--firehose", devnet.pds_url.replace("http://", "ws://"),
    )  # fmt: skip
    with daemon_here(devnet.env(), tmp_path / "a.log", *args) as daemon:
        _wait(lambda: httpx.get(daemon.url + "/_health").json()["streams"][0]["connected"])
        xrpc(devnet, "com.atproto.identity.updateHandle", {"handle": second}, session["accessJwt"])
        _wait(lambda: resolve_handle(daemon, second) == (200, did))  # cached, verified

        def cursor_now() -> Any:
            return httpx.get(daemon.url + "/_health").json()["streams"][0]["cursor"]

        _wait(lambda: cursor_now() is not None)  # the event came: the cursor is stored
        cursor = cursor_now()
    # while no daemon listens
    xrpc(devnet, "com.atproto.identity.updateHandle", {"handle": third}, session["accessJwt"])
    with daemon_here(devnet.env(), tmp_path / "b.log", *args) as daemon:
        _wait(lambda: resolve_handle(daemon, second)[0] == 404)  # the cached answer replaced
        assert resolve_handle(daemon, third) == (200, did)
        assert httpx.get(daemon.url + "/_health").json()["streams"][0]["cursor"] > cursor


def xrpc_get(daemon: Daemon, method: str, **params: str) -> httpx.Response:
    return httpx.get(f"{daemon.url}/xrpc/com.atproto.identity.{method}", params=params, timeout=30)


def resolve_handle(daemon: Daemon, handle: str) -> tuple[int, str | None]:
    answer = httpx.get(
        daemon.url + "/xrpc/com.atproto.identity.resolveHandle",
        params={"handle": handle},
        timeout=30,
    )
    return answer.status_code, answer.json().get("did")


def _wait(condition: Any, timeout: float = 20) -> float:
    """Until `condition()`; the seconds it took (more than `timeout` fails the test)."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"not within {timeout} s"
        time.sleep(0.05)
    return time.monotonic() - started


def test_a_takedown_and_a_deletion_by_the_pds_are_what_readers_see(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """The PDS's administrator takes an account down, lifts it, then deletes the account
    (its own admin API): the daemon following its stream answers `DidDeactivated` with the
    status as the reason (`takendown`, then `deleted`), and verifies it again between."""
    name = f"adm{uuid.uuid4().hex[:8]}"
    did = create_account(devnet.pds_url, name)
    handle = name + world.LIVE_HANDLE_SUFFIX
    stream_url = devnet.pds_url.replace("http://", "ws://")
    args = ("--firehose", stream_url, "--cache", "memory:", "--ttl-verified", "3600:86400")
    subject = {"$type": "com.atproto.admin.defs#repoRef", "did": did}
    with daemon_here(devnet.env(), tmp_path / "serve.log", *args) as daemon:
        assert resolve_handle(daemon, handle) == (200, did)
        _wait(lambda: httpx.get(daemon.url + "/_health").json()["streams"][0]["connected"])

        def refused_for(status: str) -> bool:
            answer = xrpc_get(daemon, "resolveDid", did=did)
            body = answer.json()
            return answer.status_code == 404 and status in body.get("message", "")

        for applied in (True, False):
            admin(devnet, "com.atproto.admin.updateSubjectStatus", {
                "subject": subject, "takedown": {"applied": applied, "ref": "test"},
            })  # fmt: skip
            if applied:
                _wait(lambda: refused_for("takendown"), timeout=5)
                gone = xrpc_get(daemon, "resolveDid", did=did).json()
                assert gone["error"] == "DidDeactivated" and "moderation" in gone["message"]
            else:
                _wait(lambda: xrpc_get(daemon, "resolveDid", did=did).status_code == 200, 5)
        admin(devnet, "com.atproto.admin.deleteAccount", {"did": did})
        _wait(lambda: refused_for("deleted"), timeout=5)


def admin(devnet: DevnetState, method: str, body: dict[str, Any]) -> None:
    """A procedure of the PDS's admin API (HTTP Basic, the test network's admin password)."""
    response = httpx.post(
        f"{devnet.pds_url}/xrpc/{method}",
        json=body,
        auth=("admin", world.LIVE_PDS_ADMIN_PASSWORD),
        timeout=30,
    )
    assert response.status_code == 200, response.text


def test_the_stream_is_read_in_a_process_of_its_own_started_again_when_killed(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """Issue 55, item 7: the daemon's event loop does not read the stream (a relay's commits,
    99.5 % of its frames, would take it): a child process holds the connection and passes up
    only what the daemon acts on. Killed, the child is started again from the saved cursor,
    and a handle change made meanwhile still replaces the cached answer."""
    name = f"prc{uuid.uuid4().hex[:8]}"
    did = create_account(devnet.pds_url, name)
    first, second = (f"{name}{tag}{world.LIVE_HANDLE_SUFFIX}" for tag in ("", "-b"))
    pds_port = int(devnet.pds_url.rsplit(":", 1)[1])
    args = ("--cache", "memory:", "--ttl-verified", "3600:86400")
    args += ("--firehose", devnet.pds_url.replace("http://", "ws://"))
    with running_daemon(devnet.env(), tmp_path / "a.log", *args) as daemon:
        pid = daemon.process.pid
        _wait(lambda: httpx.get(daemon.url + "/_health").json()["streams"][0]["connected"])
        readers = [c for c in children(pid) if connections_to(c, pds_port)]
        assert len(readers) == 1 and connections_to(pid, pds_port) == 0
        assert resolve_handle(daemon, first) == (200, did)  # held for an hour

        os.kill(readers[0], signal.SIGKILL)
        _wait(lambda: readers[0] not in children(pid))
        session = xrpc(
            devnet,
            "com.atproto.server.createSession",
            {"identifier": first, "password": world.live_password(name)},
        )
        xrpc(devnet, "com.atproto.identity.updateHandle", {"handle": second}, session["accessJwt"])
        _wait(lambda: resolve_handle(daemon, first)[0] != 200)  # the held answer replaced
        again = [c for c in children(pid) if connections_to(c, pds_port)]
        assert len(again) == 1 and again != readers and connections_to(pid, pds_port) == 0
        assert "stream_process_ended" in daemon.log.read_text()
