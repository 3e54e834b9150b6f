"""The reference PDS in the test network: accounts it made through its own XRPC API verify
end to end, a handle change made through its API is what a fresh lookup sees, and its
event stream, followed by `stream.Subscriber`, carries the identity and account events
of those changes."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from typing import Any

import httpx

from resolver import Config, Resolver, Status
from stream import AccountEvent, IdentityEvent
from stream.subscriber import Backoff, MemoryCursor, Subscriber
from tests.devnet import world
from tests.devnet.network import DevnetState
from tests.devnet.pds import create_account


def xrpc(devnet: DevnetState, method: str, body: dict[str, Any], token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.post(f"{devnet.pds_url}/xrpc/{method}", json=body, headers=headers, timeout=30)
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
        MemoryCursor(0),
        backoff=Backoff(0.05, 0.2),
    )
    task = asyncio.create_task(subscriber.run())
    try:
        new = f"{name}-new{world.LIVE_HANDLE_SUFFIX}"
        await asyncio.to_thread(
            xrpc, devnet, "com.atproto.identity.updateHandle", {"handle": new}, session["accessJwt"]
        )
        await _until(lambda: any(isinstance(e, IdentityEvent) and e.handle == new for e in events))
        async with Resolver(devnet_config) as resolver:
            assert (await resolver.lookup(new)).status is Status.VERIFIED
            assert (await resolver.lookup(old)).status is not Status.VERIFIED
        await asyncio.to_thread(
            xrpc, devnet, "com.atproto.server.deactivateAccount", {}, session["accessJwt"]
        )
        await _until(lambda: any(isinstance(e, AccountEvent) and not e.active for e in events))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    deactivated = next(e for e in events if isinstance(e, AccountEvent) and not e.active)
    assert deactivated.status == "deactivated"
    assert subscriber.state.cursor is not None and subscriber.state.malformed == 0
    assert subscriber.state.events["#identity"] >= 1


async def _until(condition: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the event never came"
        await asyncio.sleep(0.05)
