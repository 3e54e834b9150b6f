"""Polite upstreams (issues 57 and 66) on the test network: a stand-in in front of the
reference PLC directory records when each request reaches it and, on command, answers 429
with a Retry-After. A directory that asks for a pause gets no request until it ends, and no
answer meanwhile is an absence; a pause lasts the cap at most and /_health names it; a
burst of 2,000 distinct lookups keeps to the configured rate at the directory, as measured
there; a redirect to the directory goes at its pace; a flood of refused service-auth
tokens leaves the lookups their share of it."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from atwhois.resolver import Resolver, Status
from atwhois.resolver.fetch import host_of, shared_pace
from devnet.atwhois import running_daemon
from devnet.counting_directory import PlcStandIn, busiest_second
from devnet.network import DevnetState
from devnet.tokens import AUDIENCE, forged_token
from tests.support import metrics
from tests.support.waiting import eventually, until


@pytest.fixture
def standin(devnet: DevnetState, tmp_path: Path) -> Iterator[PlcStandIn]:
    plc = PlcStandIn(devnet.plc_url, tmp_path / "standin.log")
    yield plc
    plc.stop()


async def test_a_directory_that_says_retry_after_gets_nothing_until_then(
    devnet: DevnetState, standin: PlcStandIn
) -> None:
    standin.refuse(1)
    config = devnet.config(
        plc_url=standin.url, plc_rate=300.0, user_agent="atwhois/test (+https://ops.example)"
    )
    did = devnet.did("alice")
    async with Resolver(config) as resolver:
        first = await resolver.lookup(did)
        assert first.status is Status.UNAVAILABLE and len(standin.times) == 1
        asked_at = standin.times[0]
        meanwhile = []
        while time.monotonic() - asked_at < 2.7:
            meanwhile.append(await resolver.lookup(did))
            await asyncio.sleep(0.1)
        assert len(meanwhile) > 10 and len(standin.times) == 1  # nothing reached it
        assert {identity.status for identity in meanwhile} == {Status.UNAVAILABLE}  # no absence
        assert "Retry-After" in (meanwhile[-1].error or "")
        await asyncio.sleep(max(0.0, asked_at + 3.05 - time.monotonic()))
        after = await resolver.lookup(did)
    assert after.status is Status.VERIFIED and len(standin.times) == 2
    assert standin.times[1] - asked_at >= 3.0
    assert standin.agents == {"atwhois/test (+https://ops.example)"}


@pytest.mark.alone
async def test_a_burst_of_distinct_lookups_keeps_to_the_rate_at_the_directory(
    devnet: DevnetState, standin: PlcStandIn
) -> None:
    rate = 400.0
    config = devnet.config(plc_url=standin.url, plc_rate=rate)
    dids = [f"did:plc:{os.urandom(15).hex()[:24].translate(_BASE32)}" for _ in range(2000)]
    gate = asyncio.Semaphore(100)

    async def look(resolver: Resolver, did: str) -> Status:
        async with gate:
            return (await resolver.lookup(did)).status

    started = time.monotonic()
    async with Resolver(config) as resolver:
        statuses = await asyncio.gather(*(look(resolver, did) for did in dids))
    took = time.monotonic() - started
    assert set(statuses) == {Status.DID_NOT_FOUND} and len(standin.times) == 2000
    busiest = busiest_second(standin.times)
    print(f"2,000 lookups in {took:.1f} s; busiest second at the directory: {busiest} requests")
    # As sent: the rate and a tenth of a second's burst (440). As seen at the stand-in, in
    # its own process: arrivals it could not read at once (the machine busy elsewhere) are
    # read together, a few more in the busiest second.
    assert busiest <= rate * 1.1 + rate * 0.05
    assert took >= (2000 - rate * 0.1) / rate * 0.95


_BASE32 = str.maketrans("0189", "abcd")  # hex digits as did:plc's base32 alphabet allows


async def test_the_mirrors_backfill_keeps_the_same_pauses(
    devnet: DevnetState, standin: PlcStandIn
) -> None:
    """The PLC mirror's upstream is paced by the same name as the lookups: a Retry-After
    answered to its export page parks the directory for both."""
    from atwhois.mirror import Upstream
    from atwhois.resolver.errors import UpstreamFailure
    from atwhois.resolver.fetch import shared_pace

    standin.refuse(1)
    config = devnet.config(plc_url=standin.url, plc_rate=299.0)
    upstream = Upstream(standin.url, pace=shared_pace(config))
    try:
        with pytest.raises(UpstreamFailure, match="HTTP 429"):
            await asyncio.to_thread(upstream.page, "0")
        with pytest.raises(UpstreamFailure, match="Retry-After"):
            await asyncio.to_thread(upstream.page, "0")
        async with Resolver(config) as resolver:  # the lookups wait for the same pause
            assert (await resolver.lookup(devnet.did("alice"))).status is Status.UNAVAILABLE
        assert len(standin.times) == 1
        await asyncio.sleep(max(0.0, standin.times[0] + 3.05 - time.monotonic()))
        assert await asyncio.to_thread(upstream.page, "0")  # the directory's first page
        assert len(standin.times) == 2
    finally:
        upstream.close()


def test_a_directory_asking_for_an_hour_is_parked_the_cap_at_most_and_health_names_it(
    devnet: DevnetState, standin: PlcStandIn, tmp_path: Path
) -> None:
    """POL-PARK-1, POL-PARK-2 (issue 66): one 429 with Retry-After: 3600 parked the directory
    for an hour (every lookup needing it answered 502) while /_health said ok. Parked for
    the cap (here 5 s) at most: /_health is not ok and names it meanwhile, nothing reaches
    it, and then one request asks (the probe) and lookups are answered again."""
    standin.refuse(1, retry_after="3600")
    env = {**devnet.env(), "ATWHOIS_PLC_URL": standin.url, "ATWHOIS_MAX_PARK": "5"}
    alice = {"did": devnet.did("alice")}
    with (
        running_daemon(env, tmp_path / "d.log", "--cache", "memory:") as daemon,
        httpx.Client(base_url=daemon.url, timeout=30) as client,
    ):
        resolve = "/xrpc/com.atproto.identity.resolveDid"
        assert client.get(resolve, params=alice).status_code == 502  # the 429
        health = client.get("/_health").json()
        assert health["ok"] is False and health["status"] == "degraded", health
        [reason] = health["reasons"]
        assert f"upstream {host_of(standin.url)} parked" in reason, reason
        bob = client.get(resolve, params={"did": devnet.did("bob")})
        assert bob.status_code == 502 and "Retry-After" in bob.json()["message"]
        assert len(standin.times) == 1  # nothing reached it meanwhile
        until(lambda: client.get(resolve, params=alice).status_code == 200, timeout=60)
        assert len(standin.times) == 2  # the probe: it answered, the park is over
        assert client.get(resolve, params={"did": devnet.did("bob")}).status_code == 200
        health = client.get("/_health").json()
        assert health["ok"] is True and health["reasons"] == [], health


async def test_a_redirect_to_the_directory_goes_at_its_pace_and_is_counted_as_it(
    devnet: DevnetState, standin: PlcStandIn
) -> None:
    """POL-PACE-1 (issue 66): a handle's well-known that redirects to the directory sent it
    requests its pace never counted nor held back (600 lookups: 600 requests, counters 0).
    Each hop goes at its own host's pace: counted as the directory's, and refused while the
    directory is parked."""
    config = devnet.config(plc_url=standin.url, plc_rate=297.0)
    directory = host_of(standin.url)
    handles = [f"redir{os.urandom(4).hex()}.bulk.test" for _ in range(3)]
    to_directory = {"status": 302, "headers": {"Location": f"{standin.url}/{devnet.did('alice')}"}}
    devnet.set_https_faults(dict.fromkeys(handles, to_directory))
    try:
        async with Resolver(config) as resolver:
            for handle in handles[:2]:
                await resolver.lookup(handle)  # its well-known: the directory's JSON, not a DID
            pace = shared_pace(config)
            assert standin.paths == [f"/{devnet.did('alice')}"] * 2
            assert pace.counts[directory]["requests"] == 2  # each hop, as the directory's
            standin.refuse(1, retry_after="30")
            parked = await resolver.lookup(devnet.did("bob"))  # parks the directory
            assert parked.status is Status.UNAVAILABLE and len(standin.times) == 3
            redirected = await resolver.lookup(handles[2])
            assert len(standin.times) == 3  # its hop to the parked directory was not sent
            assert "Retry-After" in (redirected.https.error or ""), redirected.https
            assert pace.counts[directory]["parked"] == 1
    finally:
        devnet.set_https_faults({})


def _random_plc() -> str:
    return f"did:plc:{os.urandom(15).hex()[:24].translate(_BASE32)}"


def test_a_flood_of_refused_tokens_leaves_the_lookups_their_share(
    devnet: DevnetState, standin: PlcStandIn, tmp_path: Path
) -> None:
    """POL-BUDGET-1 (issue 66): every caller is anonymous, and a token's issuer is resolved
    before its signature is checked, so 60 callers sending refused tokens (each naming
    another did:plc) kept 60 requests queued at the directory's pace (5/s) ahead of the
    lookups, which waited past their deadline: 502. The tokens' work keeps to its share (a
    tenth), refused at once past it: the lookups asked meanwhile are answered."""
    env = {**devnet.env(), "ATWHOIS_PLC_URL": standin.url, "ATWHOIS_PLC_RATE": "5"}
    honest = [_random_plc() for _ in range(6)]
    with running_daemon(env, tmp_path / "d.log", "--cache", "memory:") as daemon:

        async def run() -> tuple[list[str], list[httpx.Response]]:
            limits = httpx.Limits(max_connections=100)
            done = asyncio.Event()
            async with httpx.AsyncClient(base_url=daemon.url, timeout=60, limits=limits) as c:

                async def flood() -> list[str]:
                    outcomes = []
                    while not done.is_set():
                        body = {"token": forged_token(_random_plc()), "audience": AUDIENCE}
                        answer = await c.post("/v1/verify/service-auth", json=body)
                        outcomes.append(answer.json()["outcome"])
                    return outcomes

                floods = [asyncio.ensure_future(flood()) for _ in range(60)]
                under_way = lambda: asyncio.to_thread(lambda: bool(standin.times))  # noqa: E731
                await eventually(under_way)  # the flood reached the directory
                lookups = await asyncio.gather(*(c.get(f"/v1/identity/{did}") for did in honest))
                done.set()
                return [o for outcomes in await asyncio.gather(*floods) for o in outcomes], lookups

        outcomes, lookups = asyncio.run(run())
        statuses = [lookup.json()["status"] for lookup in lookups]
        assert statuses == ["did_not_found"] * 6, [lookup.json()["error"] for lookup in lookups]
        assert set(outcomes) == {"invalid", "unavailable"}  # some had their share, most none
        text = httpx.get(f"{daemon.url}/metrics", timeout=10).text
        refused = metrics.value(
            text,
            "atwhois_upstream_host_requests_total",
            host=host_of(standin.url),
            pace="over_budget",
        )
        assert refused == outcomes.count("unavailable")
