"""`cache.histories`: a did:plc history kept a while, fetched once for concurrent callers,
never kept when the fetch failed, and within its byte bound (issue 56)."""

from __future__ import annotations

import asyncio

import pytest

from atwhois.cache.histories import Histories
from atwhois.resolver.errors import UpstreamFailure
from atwhois.resolver.plc import Audit


class Directory:
    def __init__(self) -> None:
        self.fetches: list[str] = []
        self.failing = False
        self.gate = asyncio.Event()

    async def audit_log(self, did: str) -> Audit:
        self.fetches.append(did)
        await self.gate.wait()
        if self.failing:
            raise UpstreamFailure("PLC directory: HTTP 503")
        return Audit(did, (), None, False, ())


async def test_concurrent_views_share_one_fetch_and_later_ones_are_kept() -> None:
    directory, now = Directory(), [0.0]
    histories = Histories(directory.audit_log, clock=lambda: now[0], kept_for=300)
    views = [asyncio.ensure_future(histories.get("did:plc:a")) for _ in range(10)]
    await asyncio.sleep(0)
    directory.gate.set()
    shown = await asyncio.gather(*views)
    assert directory.fetches == ["did:plc:a"] and {k.audit.did for k in shown} == {"did:plc:a"}
    now[0] = 299
    assert (await histories.get("did:plc:a")).fetched_at == 0 and len(directory.fetches) == 1
    now[0] = 301  # past what is shown as fetched: asked again
    await histories.get("did:plc:a")
    assert len(directory.fetches) == 2
    assert histories.counts == {"fetched": 2, "kept": 1, "joined": 9}


async def test_a_failed_fetch_is_not_kept() -> None:
    directory = Directory()
    directory.gate.set()
    directory.failing = True
    histories = Histories(directory.audit_log)
    with pytest.raises(UpstreamFailure):
        await histories.get("did:plc:a")
    directory.failing = False
    assert (await histories.get("did:plc:a")).audit.did == "did:plc:a"
    assert len(directory.fetches) == 2


async def test_the_histories_kept_stay_within_their_bound() -> None:
    directory = Directory()
    directory.gate.set()
    histories = Histories(directory.audit_log, max_bytes=3 * 1100)  # about three of them
    for n in range(10):
        await histories.get(f"did:plc:{n}")
    await histories.get("did:plc:0")  # pushed out: fetched again
    assert len(directory.fetches) == 11
