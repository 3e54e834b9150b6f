"""What a gap in an event stream costs (issue 66, F-CUR-6): one pass over the identities held,
paced, whatever number of gaps come during it (a gap then owes one more pass, never a second
at once, never a burst of every identity into the revalidator), and a stream that gaps more
than 3 times in 10 minutes is a fault in /_health until the window has passed."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import SimpleNamespace
from typing import Any

from atwhois.cache.revalidate import Revalidator
from atwhois.cache.stores.memory import MemoryStore
from atwhois.cache.sweep import AT_ONCE, Sweep
from tests.support.waiting import eventually


async def test_gaps_during_a_pass_owe_one_more_pass_not_one_each() -> None:
    """F-CUR-6, with a resolver stand-in that waits to be let go: a gap starts a pass over
    the 25 DIDs held (read 10 at a time from the store), at most AT_ONCE at once; three more
    gaps during it owe one pass more, run after it: each DID is re-verified twice, not four
    times, and never two passes at once. A gap once all is done starts another."""
    store = MemoryStore()
    held = [f"did:plc:{i:024d}" for i in range(25)]
    for did in held:
        await store.put("d:" + did, b"held", 2e9)
    await store.put("h:alice.test", b"a handle", 2e9)  # not a DID: not walked
    refreshed: Counter[str] = Counter()
    going = asyncio.Event()
    at_once = most_at_once = 0

    async def refresh(identifier: str) -> Any:
        nonlocal at_once, most_at_once
        at_once += 1
        most_at_once = max(most_at_once, at_once)
        await going.wait()
        at_once -= 1
        refreshed[identifier] += 1
        return SimpleNamespace(declared_handle=None)

    async def held_(did: str) -> tuple[bool, str | None]:
        return True, None

    cached = SimpleNamespace(refresh=refresh, held=held_, claim_open=lambda did: False, store=store)
    sweep = Sweep(Revalidator(cached), page=10)  # type: ignore[arg-type]
    sweep.gap()
    await eventually(lambda: at_once == AT_ONCE)
    assert sweep.health() == {
        "running": True,
        "done": 0,
        "to_do": 25,
        "passes": 0,
        "owed": 0,
        "failed": 0,
    }
    for _ in range(3):
        sweep.gap()
    assert sweep.owed == 1 and sweep.running
    going.set()
    await eventually(lambda: not sweep.running)
    assert refreshed == Counter({did: 2 for did in held}) and most_at_once == AT_ONCE
    assert sweep.health() == {
        "running": False,
        "done": 25,
        "to_do": 25,
        "passes": 2,
        "owed": 0,
        "failed": 0,
    }
    sweep.gap()
    await eventually(lambda: not sweep.running and sweep.passes == 3)
    assert sum(refreshed.values()) == 3 * 25
