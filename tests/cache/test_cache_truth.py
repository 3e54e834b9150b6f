"""What a cached answer means, tried the way a hostile world would try it: the world changes
between steps (DNS zone reloads, new PLC operations, well-known bodies), upstreams fail in
every way they do (403 from a firewall, an HTML page, half a body, a reset, a hang), the
shared store goes away, and every reader is asked what it sees after each step.

Each test drives the real `atwhois serve` as a child process over HTTP.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devnet.atwhois import ATWHOIS, Daemon, daemon_here, running_daemon
from devnet.forwarder import PlcStandIn
from devnet.network import DevnetState
from devnet.plc_ops import PlcAccount, new_handle
from devnet.redis_server import RedisServer
from tests.support import metrics
from tests.support.http import XRPC, get, max_age
from tests.support.waiting import eventually, until

TOKEN = "truth-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def refresh(daemon: Daemon, identifier: str) -> httpx.Response:
    return httpx.post(
        daemon.url + XRPC + "refreshIdentity",
        json={"identifier": identifier},
        headers=AUTH,
        timeout=30,
    )


def report(daemon: Daemon, identifier: str) -> dict[str, object]:
    data: dict[str, object] = get(daemon, f"/v1/identity/{identifier}").json()
    return data


def wait_until_idle(daemon: Daemon, timeout: float = 10) -> None:
    """Until no resolution (lookup or background refresh) is under way in the daemon."""
    deadline = time.monotonic() + timeout
    while metrics.value(get(daemon, "/metrics").text, "atwhois_inflight_resolutions") != 0:
        assert time.monotonic() < deadline, "the daemon never became idle"
        time.sleep(0.05)


@pytest.fixture
def plc_stand_in(devnet: DevnetState) -> Iterator[PlcStandIn]:
    with PlcStandIn(devnet.plc_url) as stand_in:
        yield stand_in


# --- 1. freshness of a composed answer is that of its stalest part ----------------------


def test_a_stale_document_is_never_composed_into_a_fresh_answer(
    devnet: DevnetState, tmp_path: Path
) -> None:
    old, new = new_handle("old"), new_handle("new")
    account = PlcAccount(devnet.plc_url, old)
    devnet.set_dns_faults({f"_atproto.{old}.": "servfail"})
    args = ("--cache", "memory:", "--ttl-unverified", "1:60", "--ttl-verified", "60:600")
    try:
        with daemon_here(devnet.env(), tmp_path / "serve.log", *args) as daemon:
            # Only the document is cached: the declared handle failed transiently.
            assert get(daemon, XRPC + "resolveDid", did=account.did).status_code == 200
            # The world changes: the old handle points at the DID, which now declares another.
            devnet.set_dns_faults({})
            devnet.set_txt(old, [f"did={account.did}"])
            account.set_handle(new)
            time.sleep(1.2)  # the cached document is past its fresh window
            answer = get(daemon, XRPC + "resolveHandle", handle=old)
            assert answer.status_code == 400, (answer.text, answer.headers["Cache-Control"])
            assert answer.json()["error"] == "InvalidRequest"
            assert report(daemon, old)["status"] == "handle_mismatch"
    finally:
        devnet.set_dns_faults({})


def test_refresh_re_resolves_every_part(devnet: DevnetState, tmp_path: Path) -> None:
    handle = new_handle("moving")
    first, second = PlcAccount(devnet.plc_url, handle), PlcAccount(devnet.plc_url, handle)
    devnet.set_txt(handle, [f"did={first.did}"])
    with daemon_here(
        devnet.env(), tmp_path / "serve.log", "--cache", "memory:", "--refresh-token", TOKEN
    ) as daemon:
        # The second DID claims the handle too: its document is cached, declaring the handle.
        claimed = get(daemon, XRPC + "resolveIdentity", identifier=second.did).json()
        assert claimed["handle"] == "handle.invalid"
        assert get(daemon, XRPC + "resolveHandle", handle=handle).json() == {"did": first.did}
        # The handle moves to the second DID, whose document now declares another handle.
        devnet.set_txt(handle, [f"did={second.did}"])
        second.set_handle(new_handle("elsewhere"))
        refreshed = refresh(daemon, handle)
        assert refreshed.status_code == 400, refreshed.text  # not verified: it no longer holds
        assert refreshed.json()["message"].startswith("handle_mismatch")
        assert get(daemon, XRPC + "resolveHandle", handle=handle).status_code == 400
        assert report(daemon, handle)["status"] == "handle_mismatch"


# --- 2. only a confirmed answer may replace a good one ----------------------------------

BROKEN_ANSWERS = ["status:403", "status:400", "status:429", "html", "truncated", "cut", "reset"]


@pytest.mark.parametrize("fault", [*BROKEN_ANSWERS, "hang"])
def test_a_broken_directory_answer_never_replaces_a_good_entry(
    devnet: DevnetState, plc_stand_in: PlcStandIn, tmp_path: Path, fault: str
) -> None:
    handle = new_handle("kept")
    account = PlcAccount(devnet.plc_url, handle)
    devnet.set_txt(handle, [f"did={account.did}"])
    env = {**devnet.env(), "ATWHOIS_PLC_URL": plc_stand_in.url}
    args = ("--cache", "memory:", "--ttl-verified", "1:600", "--timeout", "1")
    with daemon_here(env, tmp_path / "serve.log", *args) as daemon:
        good = get(daemon, XRPC + "resolveDid", did=account.did)
        assert good.status_code == 200
        plc_stand_in.set_fault(fault)
        time.sleep(1.1)  # stale now: the next read refreshes in the background
        assert get(daemon, XRPC + "resolveDid", did=account.did).json() == good.json()
        wait_until_idle(daemon)
        kept = get(daemon, XRPC + "resolveDid", did=account.did)
        assert kept.status_code == 200 and kept.json() == good.json()
        assert max_age(kept) == 0  # served stale, and says so
        cached = report(daemon, account.did)
        assert cached["status"] == "verified"
        assert cached["cache"]["state"] == "stale"  # type: ignore[index]
        assert cached["cache"]["refresh_error"]  # type: ignore[index]


@pytest.mark.parametrize("fault", BROKEN_ANSWERS)
def test_a_broken_directory_answer_is_never_cached_as_absence(
    devnet: DevnetState, plc_stand_in: PlcStandIn, tmp_path: Path, fault: str
) -> None:
    account = PlcAccount(devnet.plc_url, None)
    env = {**devnet.env(), "ATWHOIS_PLC_URL": plc_stand_in.url}
    with daemon_here(env, tmp_path / "serve.log", "--cache", "memory:") as daemon:
        plc_stand_in.set_fault(fault)
        failed = get(daemon, XRPC + "resolveDid", did=account.did)
        assert failed.status_code == 502, failed.text
        assert failed.headers["Cache-Control"] == "no-store"
        plc_stand_in.set_fault(None)
        assert get(daemon, XRPC + "resolveDid", did=account.did).status_code == 200


# --- 3. memory has a bound in bytes ------------------------------------------------------


def test_distinct_large_documents_do_not_grow_memory_past_the_cap(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """600 distinct did:web identities with 60 KB documents (36 MB of JSON, more decoded),
    through the default configuration (64 MiB for the in-process tiers): the daemon's RSS
    must stay near its start-up size plus that cap, not grow by the documents' decoded size.
    (RSS grew 22 MiB with 600, 900 or 1,500 documents, and as much with a cap of 1000 MiB:
    600 say what 1,500 said, in 9 s instead of 22.)"""
    with running_daemon(devnet.env(), tmp_path / "serve.log", "--cache", "memory:") as daemon:
        get(daemon, XRPC + "resolveDid", did="did:web:pad60-warmup.bulk.test")
        start = _rss_mib(daemon)

        async def load() -> Counter[int]:
            codes: Counter[int] = Counter()
            gate = asyncio.Semaphore(16)
            async with httpx.AsyncClient(base_url=daemon.url, timeout=60) as client:

                async def one(i: int) -> None:
                    async with gate:
                        did = f"did:web:pad60-{i}.bulk.test"
                        response = await client.get(XRPC + "resolveDid", params={"did": did})
                        codes[response.status_code] += 1

                await asyncio.gather(*(one(i) for i in range(600)))
            return codes

        codes = asyncio.run(load())
        grown = _rss_mib(daemon) - start
    assert codes == Counter({200: 600})
    assert grown < 64 + 40, f"RSS grew by {grown:.0f} MiB"


def _rss_mib(daemon: Daemon) -> float:
    status = Path(f"/proc/{daemon.process.pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


# --- 4. a store outage degrades, never fails --------------------------------------------


def test_a_redis_outage_degrades_the_daemon_and_it_recovers(
    devnet: DevnetState, tmp_path: Path
) -> None:
    identifiers = ["alice.test", "bob.test", "carol.test", "grace.test", "henry.test"]
    identifiers += [devnet.did(name) for name in ("alice", "dave", "frank", "quinn")]
    loaded = identifiers[:-2]  # the last two are first asked for during the outage
    with (
        RedisServer(tmp_path) as redis,
        daemon_here(devnet.env(), tmp_path / "serve.log", "--cache", redis.url) as daemon,
    ):
        for identifier in identifiers[:4]:  # some cached before the outage, some not
            assert get(daemon, XRPC + "resolveIdentity", identifier=identifier).status_code == 200
        assert get(daemon, "/_health").json()["status"] == "ok"

        async def load(stop_after: float) -> list[httpx.Response]:
            answers: list[httpx.Response] = []
            end = time.monotonic() + stop_after
            async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as client:

                async def worker(offset: int) -> None:
                    i = offset
                    while time.monotonic() < end:
                        i += 1
                        identifier = loaded[i % len(loaded)]
                        params = {"identifier": identifier}
                        answers.append(await client.get(XRPC + "resolveIdentity", params=params))

                await asyncio.gather(*(worker(n) for n in range(8)))
            return answers

        async def scenario() -> tuple[list[httpx.Response], dict[str, object]]:
            running = asyncio.create_task(load(3.0))
            await asyncio.sleep(1.0)
            redis.stop()  # mid-load
            await asyncio.sleep(1.0)
            async with httpx.AsyncClient(base_url=daemon.url, timeout=10) as client:
                health = (await client.get("/_health")).json()
            return await running, health

        answers, health = asyncio.run(scenario())
        assert len(answers) > 50
        for answer in answers:
            assert answer.status_code == 200, answer.text  # resolved, or served from memory
        assert health["status"] == "degraded" and health["reasons"], health
        # Uncached identities are still answered (by resolving them directly); keeping
        # them fails, and is counted (the load alone may touch only what memory holds).
        for identifier in identifiers:
            assert get(daemon, XRPC + "resolveIdentity", identifier=identifier).status_code == 200
        redis.start()
        deadline = time.monotonic() + 10
        while get(daemon, "/_health").json()["status"] != "ok":
            assert time.monotonic() < deadline, "the daemon never recovered from the outage"
            time.sleep(0.2)
        text = get(daemon, "/metrics").text
        assert metrics.value(text, "atwhois_store_errors_total", store="redis") > 0


# --- 5. a refresh during an outage keeps the fallback copy ------------------------------


def test_a_refresh_during_an_outage_keeps_the_copy_readers_fall_back_on(
    devnet: DevnetState, plc_stand_in: PlcStandIn, tmp_path: Path
) -> None:
    handle = new_handle("outage")
    account = PlcAccount(devnet.plc_url, handle)
    devnet.set_txt(handle, [f"did={account.did}"])
    env = {**devnet.env(), "ATWHOIS_PLC_URL": plc_stand_in.url}
    args = ("--cache", "memory:", "--refresh-token", TOKEN)
    with daemon_here(env, tmp_path / "serve.log", *args) as daemon:
        good = get(daemon, XRPC + "resolveIdentity", identifier=handle)
        assert good.status_code == 200 and good.json()["handle"] == handle
        plc_stand_in.set_fault("status:500")
        failed = refresh(daemon, handle)
        assert failed.status_code == 502 and failed.json()["error"] == "UpstreamFailure"
        for _ in range(3):  # every later read still has the copy, marked
            kept = get(daemon, XRPC + "resolveIdentity", identifier=handle)
            assert kept.status_code == 200 and kept.json() == good.json()
        cached = report(daemon, handle)
        assert cached["cache"]["refresh_error"]  # type: ignore[index]
        plc_stand_in.set_fault(None)
        assert refresh(daemon, handle).status_code == 200


# --- also seen: daemons sharing a store, the load gate, unexpected errors ----------------


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_a_refresh_reaches_every_daemon_on_the_store_within_a_second(
    devnet: DevnetState, tmp_path: Path, store: str
) -> None:
    handle = new_handle("shared")
    first, second = PlcAccount(devnet.plc_url, handle), PlcAccount(devnet.plc_url, None)
    devnet.set_txt(handle, [f"did={first.did}"])
    with RedisServer(tmp_path) as redis:
        args = ["--refresh-token", TOKEN]
        args += ["--cache", redis.url] if store == "redis" else ["--cache", str(tmp_path / "c.db")]
        with (
            daemon_here(devnet.env(), tmp_path / "one.log", *args) as one,
            daemon_here(devnet.env(), tmp_path / "two.log", *args) as two,
        ):
            for daemon in (one, two):
                answer = get(daemon, XRPC + "resolveHandle", handle=handle)
                assert answer.json() == {"did": first.did}
            devnet.set_txt(handle, [f"did={second.did}"])
            first.set_handle(None)
            second.set_handle(handle)
            assert refresh(one, handle).json()["did"] == second.did
            # the other daemon hears of it through the store (how soon: `bench`'s business)
            until(
                lambda: (
                    get(two, XRPC + "resolveHandle", handle=handle).json() == {"did": second.did}
                )
            )


def test_workers_share_the_port_and_a_refresh_reaches_every_one_within_a_second(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """`serve --workers 2` on one SQLite cache: both workers answer on the one port (the
    kernel spreads new connections), each keeps rendered answers, and a refresh through one
    worker reaches the other within a second: the other's answer, rendered before the
    change, is dropped by the store's change log, not kept for its hour. SIGTERM stops both
    gracefully; settings that must run in one process are refused."""
    handle = new_handle("workers")
    first, second = PlcAccount(devnet.plc_url, handle), PlcAccount(devnet.plc_url, None)
    devnet.set_txt(handle, [f"did={first.did}"])
    args = ("--refresh-token", TOKEN, "--cache", str(tmp_path / "c.db"), "--workers", "2")
    with running_daemon(devnet.env(), tmp_path / "serve.log", *args) as daemon:

        def by_worker() -> dict[int, httpx.Response]:
            """resolveHandle once through each worker (fresh connections until both did)."""
            seen: dict[int, httpx.Response] = {}
            for _ in range(200):
                with httpx.Client(base_url=daemon.url) as one_connection:
                    pid = one_connection.get("/_health").json()["pid"]
                    if pid not in seen:
                        seen[pid] = one_connection.get(
                            XRPC + "resolveHandle", params={"handle": handle}
                        )
                if len(seen) == 2:
                    return seen
            raise AssertionError(f"one worker answered 200 connections: {seen}")

        assert {a.json()["did"] for a in by_worker().values()} == {first.did}
        assert {a.json()["did"] for a in by_worker().values()} == {first.did}  # rendered now
        devnet.set_txt(handle, [f"did={second.did}"])
        first.set_handle(None)
        second.set_handle(handle)
        assert refresh(daemon, handle).json()["did"] == second.did  # through one of them
        until(lambda: {a.json()["did"] for a in by_worker().values()} == {second.did})
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(30) == 0
    refused = subprocess.run(
        [ATWHOIS, "serve", "--port", "0", "--workers", "2", "--cache", "memory:"],
        capture_output=True,
        text=True,
        env={**os.environ, **devnet.env()},
        timeout=60,
    )
    assert refused.returncode == 2 and "--cache memory:" in refused.stderr
    # A cache the workers cannot open is a configuration error, said, with the worker's code.
    (tmp_path / "a-folder.db").mkdir()
    unopened = subprocess.run(
        [
            ATWHOIS,
            "serve",
            "--port",
            "0",
            "--workers",
            "2",
            "--cache",
            str(tmp_path / "a-folder.db"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **devnet.env()},
        timeout=60,
    )
    assert unopened.returncode == 2, unopened.stderr
    assert f"SQLite cache {tmp_path / 'a-folder.db'}: unable to open" in unopened.stderr


def test_health_and_metrics_answer_while_the_daemon_is_saturated(
    devnet: DevnetState, tmp_path: Path
) -> None:
    args = ("--cache", "memory:", "--max-concurrency", "1")
    with running_daemon(devnet.env(), tmp_path / "serve.log", *args) as daemon:

        async def scenario() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as client:
                slow = asyncio.create_task(  # holds the only slot for 1.5 s
                    client.get(XRPC + "resolveHandle", params={"handle": "slow.test"})
                )

                async def slot_taken() -> bool:
                    text = (await client.get("/metrics")).text
                    return metrics.value(text, "atwhois_inflight_resolutions") >= 1

                await eventually(slot_taken)
                answers = [await client.get("/_health"), await client.get("/metrics")]
                # not queued behind the gate: answered while the only slot is still held (a
                # gated request waits for it, then is refused with a 503)
                assert not slow.done()
                await slow
                return answers

        health, exposition = asyncio.run(scenario())
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert exposition.status_code == 200 and "atwhois_requests_total" in exposition.text


def test_a_handle_that_cannot_be_checked_now_is_never_called_invalid(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """resolveIdentity by DID while the declared handle's DNS fails: the document is there,
    but whether the handle verifies is unknown, so the answer is an upstream failure, not
    `handle.invalid` (which says the binding fails). resolveDid needs no handle: 200."""
    handle = new_handle("blip")
    account = PlcAccount(devnet.plc_url, handle)
    devnet.set_txt(handle, [f"did={account.did}"])
    devnet.set_dns_faults({f"_atproto.{handle}.": "servfail"})
    try:
        with daemon_here(devnet.env(), tmp_path / "serve.log", "--cache", "memory:") as d:
            unknown = get(d, XRPC + "resolveIdentity", identifier=account.did)
            assert unknown.status_code == 502 and unknown.json()["error"] == "UpstreamFailure"
            assert get(d, XRPC + "resolveDid", did=account.did).status_code == 200
            devnet.set_dns_faults({})
            known = get(d, XRPC + "resolveIdentity", identifier=account.did)
            assert known.status_code == 200 and known.json()["handle"] == handle
    finally:
        devnet.set_dns_faults({})
