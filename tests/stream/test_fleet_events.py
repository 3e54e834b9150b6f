"""A fleet of daemons on one shared store hears each `#identity` event once per daemon, and
re-verifies it once (F-CUR-7, issue 69): the first daemon to take the event up in the shared
store does it; the others count it (`fleet`) and leave it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from atwhois.cache.revalidate import Revalidator
from atwhois.cache.stores.sqlite import SqliteStore
from tests.support.waiting import eventually

DID = "did:plc:" + "a" * 24


async def test_an_event_is_re_verified_by_one_daemon_of_the_fleet(tmp_path: Path) -> None:
    refreshed: list[str] = []

    async def refresh(identifier: str) -> Any:
        refreshed.append(identifier)
        return SimpleNamespace(declared_handle=None)

    async def held(did: str) -> tuple[bool, str | None]:
        return True, None

    async def claim(did: str, what: str, window: float) -> bool:
        return True

    def daemon() -> Revalidator:  # each its own connection to the one shared file
        store = SqliteStore(tmp_path / "shared.db")
        cached = SimpleNamespace(
            refresh=refresh, held=held, claim=claim, claim_open=lambda did: False, store=store
        )
        return Revalidator(cached)  # type: ignore[arg-type]

    fleet = [daemon() for _ in range(3)]
    event = f"#identity seq 7 from wss://relay.example ({'2026-12-06T05:00:00Z'})"
    for revalidator in fleet:
        await revalidator.claimed(DID, None, event)
    await eventually(lambda: not any(r._running for r in fleet))
    assert refreshed == [DID]  # once in the fleet
    assert [r.claims["fleet"] for r in fleet] == [0, 1, 1]
    # another event about it is another claim: taken up again, once
    for revalidator in reversed(fleet):
        await revalidator.claimed(DID, None, event.replace("seq 7", "seq 8"))
    await eventually(lambda: not any(r._running for r in fleet))
    assert refreshed == [DID, DID] and [r.claims["fleet"] for r in fleet] == [1, 2, 1]
