"""The real `atwhois serve` daemon, called over HTTP against the test network."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
from aiohttp.test_utils import TestClient, TestServer

from atwhois import settings
from atwhois.cache import CachedResolver, MemoryStore
from atwhois.resolver import Config, Identity, Resolver, Status
from atwhois.server import Service, Settings
from devnet.atwhois import Daemon, running_daemon
from devnet.forwarder import PlcStandIn
from devnet.network import DevnetState
from tests.support import metrics
from tests.support.http import TOKEN, XRPC, get, xrpc_error
from tests.support.waiting import eventually, until


async def state_is(state: Callable[[], Awaitable[str]], wanted: str) -> bool:
    return await state() == wanted


async def resolving(client: httpx.AsyncClient) -> bool:
    """Whether the daemon has a resolution under way (its /metrics; /metrics is ungated)."""
    text = (await client.get("/metrics")).text
    return metrics.value(text, "atwhois_inflight_resolutions") >= 1


def idle(daemon: Daemon) -> bool:
    text = httpx.get(f"{daemon.url}/metrics", timeout=10).text
    return metrics.value(text, "atwhois_inflight_resolutions") == 0


def test_resolve_handle(daemon: Daemon, devnet: DevnetState) -> None:
    ok = get(daemon, XRPC + "resolveHandle", handle="alice.test")
    assert ok.status_code == 200 and ok.json() == {"did": devnet.did("alice")}
    assert re.fullmatch(
        r"public, max-age=\d+, stale-while-revalidate=\d+, stale-if-error=\d+",
        ok.headers["Cache-Control"],
    )
    assert int(ok.headers["Cache-Control"].split("max-age=")[1].split(",")[0]) > 3500
    assert re.fullmatch(r"[0-9a-f]{16}", ok.headers["X-Request-Id"])
    echoed = httpx.get(
        daemon.url + XRPC + "resolveHandle",
        params={"handle": "alice.test"},
        headers={"X-Request-Id": "caller-id-1"},
    )
    assert echoed.headers["X-Request-Id"] == "caller-id-1"
    xrpc_error(get(daemon, XRPC + "resolveHandle", handle="john..test"), 400, "InvalidRequest")
    xrpc_error(get(daemon, XRPC + "resolveHandle"), 400, "InvalidRequest")
    xrpc_error(
        get(daemon, XRPC + "resolveHandle", handle=devnet.did("alice")), 400, "InvalidRequest"
    )
    absent = get(daemon, XRPC + "resolveHandle", handle="nobody.test")
    xrpc_error(absent, 404, "HandleNotFound")
    assert absent.headers["Cache-Control"].startswith("public, max-age=1")  # 2 min, briefly
    # Verified both ways, unlike the lexicon's minimum: an old handle still in DNS is refused.
    # Not "not found": the handle names a DID, which declares another handle (a mismatch).
    message = xrpc_error(
        get(daemon, XRPC + "resolveHandle", handle="bob-old.test"), 400, "InvalidRequest"
    )
    assert message.startswith("handle_mismatch: ") and "declares bob.test" in message


def test_resolve_did(daemon: Daemon, devnet: DevnetState) -> None:
    ok = get(daemon, XRPC + "resolveDid", did=devnet.did("carol"))
    assert ok.status_code == 200 and ok.json()["didDoc"]["id"] == devnet.did("carol")
    xrpc_error(
        get(daemon, XRPC + "resolveDid", did="did:plc:neverregisteredaaaaaaaaa"), 404, "DidNotFound"
    )
    xrpc_error(get(daemon, XRPC + "resolveDid", did=devnet.did("erin")), 404, "DidDeactivated")
    xrpc_error(get(daemon, XRPC + "resolveDid", did="did:plc:short"), 400, "InvalidRequest")
    xrpc_error(get(daemon, XRPC + "resolveDid", did="alice.test"), 400, "InvalidRequest")
    # resolveDid does not need the handle to verify: trent's document is served.
    assert get(daemon, XRPC + "resolveDid", did=devnet.did("trent")).status_code == 200


def test_resolve_identity_and_mini_doc(daemon: Daemon, devnet: DevnetState) -> None:
    by_handle = get(daemon, XRPC + "resolveIdentity", identifier="alice.test").json()
    assert by_handle["did"] == devnet.did("alice") and by_handle["handle"] == "alice.test"
    assert by_handle["didDoc"]["alsoKnownAs"] == ["at://alice.test"]
    impostor = get(daemon, XRPC + "resolveIdentity", identifier=devnet.did("trent")).json()
    assert impostor["handle"] == "handle.invalid"  # it claims alice.test
    xrpc_error(get(daemon, XRPC + "resolveIdentity", identifier="erin.test"), 404, "DidDeactivated")
    xrpc_error(get(daemon, XRPC + "resolveIdentity", identifier="ghost.test"), 404, "DidNotFound")
    xrpc_error(
        get(daemon, XRPC + "resolveIdentity", identifier="wrong.test"), 400, "InvalidRequest"
    )
    xrpc_error(
        get(daemon, XRPC + "resolveIdentity", identifier="nobody.test"), 404, "HandleNotFound"
    )
    for nsid in (
        "com.bad-example.identity.resolveMiniDoc",
        "blue.microcosm.identity.resolveMiniDoc",
    ):
        mini = get(daemon, f"/xrpc/{nsid}", identifier="quinn.test").json()
        assert mini == {
            "did": devnet.did("quinn"),
            "handle": "quinn.test",
            "pds": "https://pds.test",
            "signing_key": "zDnaembgSGUhZULN2Caob4HLJPaxBh92N7rtH21TErzqf8HQo",
        }


def test_refresh_identity(daemon: Daemon, devnet: DevnetState) -> None:
    url = daemon.url + XRPC + "refreshIdentity"
    body = {"identifier": "alice.test"}
    xrpc_error(httpx.post(url, json=body), 401, "AuthenticationRequired")
    xrpc_error(
        httpx.post(url, json=body, headers={"Authorization": "Bearer nope"}), 403, "InvalidToken"
    )
    auth = {"Authorization": f"Bearer {TOKEN}"}
    before = _refreshes_requested(daemon)
    ok = httpx.post(url, json=body, headers=auth)
    assert ok.status_code == 200 and ok.json()["handle"] == "alice.test"
    assert _refreshes_requested(daemon) == before + 1  # counted in /metrics
    assert ok.headers["Cache-Control"] == "no-store"
    report = get(daemon, "/v1/identity/alice.test").json()
    assert report["cache"]["cached"] and report["cache"]["age_s"] < 5
    xrpc_error(httpx.post(url, content=b"{not json", headers=auth), 400, "InvalidRequest")
    xrpc_error(httpx.post(url, json={}, headers=auth), 400, "InvalidRequest")
    xrpc_error(httpx.post(url, json=["not", "an", "object"], headers=auth), 400, "InvalidRequest")
    deep = b"[" * 8000 + b"]" * 8000  # under the body cap, past the recursion limit
    xrpc_error(httpx.post(url, content=deep, headers=auth), 400, "InvalidRequest")
    xrpc_error(
        httpx.post(url, json={"identifier": "x" * 20_000}, headers=auth), 413, "PayloadTooLarge"
    )
    xrpc_error(httpx.get(url), 405, "MethodNotAllowed")


def _refreshes_requested(daemon: Daemon) -> int:
    text = get(daemon, "/metrics").text
    return int(metrics.value(text, "atwhois_cache_refreshes_total", missing=0.0, kind="requested"))


def test_identity_report(daemon: Daemon, devnet: DevnetState) -> None:
    first = get(daemon, "/v1/identity/grace.test")
    report = first.json()
    assert first.status_code == 200 and report["status"] == "verified"
    assert report["evidence"]["dns"]["outcome"] == "ok" and report["cache"]["state"] in (
        "miss",
        "fresh",
    )
    assert get(daemon, "/v1/identity/grace.test").json()["cache"]["state"] == "fresh"
    with_doc = get(daemon, "/v1/identity/grace.test", document="1").json()
    assert with_doc["did_document"]["id"] == devnet.did("grace")
    assert get(daemon, "/v1/identity/john..test").status_code == 400
    down = get(daemon, "/v1/identity/blackhole.test")
    assert down.status_code == 502 and down.json()["status"] == "unavailable"
    assert down.headers["Retry-After"] == "30" and down.headers["Cache-Control"] == "no-store"
    unavailable = get(daemon, XRPC + "resolveHandle", handle="blackhole.test")
    xrpc_error(unavailable, 502, "UpstreamFailure")
    assert unavailable.headers["Retry-After"] == "30"


def test_health_openapi_and_metrics(daemon: Daemon) -> None:
    health = get(daemon, "/_health").json()
    assert health["ok"] and health["store"] == "memory"
    spec = get(daemon, "/openapi.json").json()
    assert spec["openapi"].startswith("3.") and XRPC + "resolveHandle" in spec["paths"]

    before = get(daemon, "/metrics").text
    for _ in range(3):  # resolved, composed from the cache (and kept), the kept answer
        get(daemon, XRPC + "resolveHandle", handle="henry.test")
    response = get(daemon, "/metrics")
    after = response.text
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    requests = {"endpoint": "/xrpc/com.atproto.identity.resolveHandle", "code": "200"}
    count = metrics.value(after, "atwhois_requests_total", **requests)
    assert count == metrics.value(before, "atwhois_requests_total", missing=0.0, **requests) + 3
    fresh = metrics.value(after, "atwhois_cache_lookups_total", result="fresh")
    before_fresh = metrics.value(before, "atwhois_cache_lookups_total", missing=0.0, result="fresh")
    assert fresh >= before_fresh + 2
    assert (
        "atwhois_upstream_seconds_bucket",
        frozenset({("upstream", "dns"), ("le", "0.001")}),
    ) in (metrics.samples(after))
    assert metrics.value(after, "atwhois_inflight_resolutions") == 0
    # described (HELP) for every family, and the process's own figures beside the daemon's
    assert "# HELP atwhois_requests_total Requests answered" in after
    assert "# HELP atwhois_watched" in after
    assert metrics.value(after, "process_resident_memory_bytes") > 10_000_000
    assert metrics.value(after, "process_open_fds") > 3
    assert metrics.value(after, "process_cpu_seconds_total") > 0
    assert metrics.value(after, "python_gc_objects_collected_total", generation="0") > 0
    assert any(name == "python_info" for name, _ in metrics.samples(after))


def test_requests_are_logged_as_json_with_their_id(daemon: Daemon) -> None:
    httpx.get(daemon.url + "/_health", headers={"X-Request-Id": "trace-me-42"})
    # resolved, then composed from the cache (and kept), then answered from the kept answer
    for request_id in ("ask-1", "ask-2", "ask-3"):
        answer = httpx.get(
            daemon.url + XRPC + "resolveHandle",
            params={"handle": "alice.test"},
            headers={"X-Request-Id": request_id},
        )
        assert answer.headers["X-Request-Id"] == request_id
    # lines are written in batches, every 0.25 s: read once the last one is there
    until(lambda: any(line.get("request_id") == "ask-3" for line in daemon.log_lines()))
    lines = [line for line in daemon.log_lines() if line.get("request_id") == "trace-me-42"]
    assert lines and lines[0]["path"] == "/_health" and lines[0]["status"] == 200
    kept = [line for line in daemon.log_lines() if line.get("request_id") == "ask-3"]
    assert kept and kept[0]["path"] == XRPC + "resolveHandle" and kept[0]["status"] == 200
    assert kept[0]["method"] == "GET" and kept[0]["remote"] == "127.0.0.1" and kept[0]["ms"] >= 0


async def test_coalescing_through_the_http_api(daemon: Daemon) -> None:
    def upstream_handles(text: str) -> float:
        return metrics.value(
            text, "atwhois_upstream_resolutions_total", missing=0.0, kind="handles"
        )

    async with httpx.AsyncClient(
        base_url=daemon.url, timeout=30, limits=httpx.Limits(max_connections=100)
    ) as client:
        before = upstream_handles((await client.get("/metrics")).text)
        answers = await asyncio.gather(
            *(
                client.get(XRPC + "resolveHandle", params={"handle": "split.test"})
                for _ in range(100)
            )
        )
        after = upstream_handles((await client.get("/metrics")).text)
    assert {a.status_code for a in answers} == {200}
    assert after - before == 1


async def test_the_python_sdk_client_calls_it_unchanged(
    daemon: Daemon, devnet: DevnetState
) -> None:
    from atproto import AsyncClient

    client = AsyncClient(base_url=f"{daemon.url}/xrpc")
    resolved = await client.com.atproto.identity.resolve_handle({"handle": "alice.test"})
    assert resolved.did == devnet.did("alice")
    identity = await client.com.atproto.identity.resolve_identity({"identifier": "alice.test"})
    assert identity.handle == "alice.test" and identity.did == devnet.did("alice")
    document = await client.com.atproto.identity.resolve_did({"did": devnet.did("alice")})
    assert document.did_doc["id"] == devnet.did("alice")


async def test_upstream_down_with_and_without_a_cached_answer(
    devnet: DevnetState, tmp_path: Path
) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('cache = "memory:"\nttl_verified = "1:3600"\n')
    with (
        PlcStandIn(devnet.plc_url) as stand_in,
        running_daemon(
            {**devnet.env(), "ATWHOIS_PLC_URL": stand_in.url},
            tmp_path / "serve.log",
            "--config",
            str(config),
        ) as daemon,
    ):
        async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as client:
            carol = {"did": devnet.did("carol")}
            assert (await client.get(XRPC + "resolveDid", params=carol)).status_code == 200
            stand_in.set_fault("down")  # the PLC directory goes away

            async def state() -> str:
                report = (await client.get(f"/v1/identity/{carol['did']}")).json()
                return str(report["cache"]["state"])

            await eventually(lambda: state_is(state, "stale"))  # past its 1 s of freshness
            stale = await client.get(XRPC + "resolveDid", params=carol)
            assert stale.status_code == 200 and stale.json()["didDoc"]["id"] == carol["did"]
            assert stale.headers["Cache-Control"].startswith("public, max-age=0")
            nothing = await client.get(XRPC + "resolveDid", params={"did": devnet.did("alice")})
            xrpc_error(nothing, 502, "UpstreamFailure")
            assert nothing.headers["Retry-After"] == "30"

            async def refresh_failed() -> bool:
                report = (await client.get(f"/v1/identity/{carol['did']}")).json()
                refresh = report["evidence"].get("refresh") or {}
                return "cannot connect" in str(refresh.get("error"))

            await eventually(refresh_failed)  # the background refresh tried, and failed
            report = (await client.get(f"/v1/identity/{carol['did']}")).json()
            assert report["cache"]["state"] == "stale"


def test_refresh_is_refused_without_a_configured_token(devnet: DevnetState, tmp_path: Path) -> None:
    with running_daemon(devnet.env(), tmp_path / "serve.log", "--cache", "memory:") as daemon:
        refused = httpx.post(
            daemon.url + XRPC + "refreshIdentity",
            json={"identifier": "alice.test"},
            headers={"Authorization": "Bearer anything"},
        )
        assert "disabled" in xrpc_error(refused, 403, "Forbidden")


def test_sigterm_lets_in_flight_requests_finish(devnet: DevnetState, tmp_path: Path) -> None:
    with running_daemon(
        devnet.env(), tmp_path / "serve.log", "--cache", f"sqlite://{tmp_path}/c.db"
    ) as daemon:

        async def scenario() -> httpx.Response:
            async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as client:
                slow = asyncio.create_task(
                    client.get(XRPC + "resolveHandle", params={"handle": "slow.test"})
                )
                await eventually(lambda: resolving(client))  # its DNS answer takes 1.5 s
                daemon.process.send_signal(15)
                return await slow

        response = asyncio.run(scenario())
        assert response.status_code == 200
        assert daemon.process.wait(30) == 0
        assert any(line.get("event") == "stopping" for line in daemon.log_lines())
    assert json.loads((tmp_path / "serve.log").read_text().splitlines()[0])["store"] == (
        "memory+sqlite"
    )


def test_concurrency_limit_and_request_deadline(devnet: DevnetState, tmp_path: Path) -> None:
    args = ("--cache", "memory:", "--max-concurrency", "1", "--request-timeout", "1.3")
    with running_daemon(devnet.env(), tmp_path / "serve.log", *args) as daemon:

        async def scenario() -> tuple[httpx.Response, httpx.Response]:
            async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as client:
                slow = asyncio.create_task(  # DNS answers after 1.5 s: past the deadline
                    client.get(XRPC + "resolveHandle", params={"handle": "slow.test"})
                )
                await eventually(lambda: resolving(client))  # it holds the one slot
                crowded = await client.get("/v1/identity/alice.test")  # waits 1 s, then 503
                return await slow, crowded

        slow, crowded = asyncio.run(scenario())
        assert "deadline" in xrpc_error(slow, 502, "UpstreamFailure")
        xrpc_error(crowded, 503, "NotEnoughResources")
        assert crowded.headers["Retry-After"] == "1"
        until(lambda: idle(daemon))  # the shared resolution finished meanwhile, and was cached
        again = get(daemon, XRPC + "resolveHandle", handle="slow.test")
        assert again.status_code == 200


async def test_an_unexpected_error_is_an_xrpc_body_with_the_request_id(
    devnet_config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug must not become a bare 500: the caller gets an XRPC body naming the request
    id, and the log has the traceback under that id, once. (A fake cache: no input is
    known to raise here, which is the point.)"""

    class Broken(CachedResolver):
        async def lookup(self, identifier: str, *, timeout: float | None = None) -> Identity:
            raise RuntimeError("a bug")

    service = Service(Broken(Resolver(devnet_config), MemoryStore()), Settings(request_log=False))
    async with TestClient(TestServer(service.app())) as client:
        response = await client.get(XRPC + "resolveHandle", params={"handle": "alice.test"})
        body = await response.json()
    request_id = response.headers["X-Request-Id"]
    assert response.status == 500 and body["error"] == "InternalServerError"
    assert request_id in body["message"]
    logged = [r for r in caplog.records if request_id in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info and "a bug" in str(logged[0].exc_info[1])


def test_an_unparseable_request_is_one_log_line(daemon: Daemon) -> None:
    """A request line over aiohttp's 8 KiB limit is answered 400 and logged as one JSON
    line, not a traceback a stranger could repeat to fill the log."""
    response = httpx.get(daemon.url + XRPC + "resolveHandle", params={"handle": "a" * 9000})
    assert response.status_code == 400
    deadline = time.monotonic() + 5
    while "malformed_request" not in daemon.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = [ln for ln in daemon.log_lines() if ln.get("event") == "malformed_request"]
    assert lines and "8190 bytes" in str(lines[-1]["reason"])
    assert "Traceback" not in daemon.log.read_text()


def test_the_start_up_line_says_what_the_daemon_resolves_through(
    daemon: Daemon, devnet: DevnetState
) -> None:
    started = next(line for line in daemon.log_lines() if line.get("event") == "listening")
    assert started["store"] == "memory"
    given = started["settings"]
    assert given["dns_server"] == [[devnet.dns_server], "$ATWHOIS_DNS_SERVER"]
    assert given["plc_url"] == [devnet.plc_url, "$ATWHOIS_PLC_URL"]
    assert given["allow_net"][0] == ["127.0.0.0/8"] and given["dev"] == [True, "$ATWHOIS_DEV"]
    assert given["refresh_token"] == ["(set)", "flag"]
    assert given["cache"] == ["memory:", "flag"] and given["audit_db"][0].endswith(".db")
    assert given["port"][0] == 0 and set(given) == set(settings.SETTINGS)
    assert TOKEN not in json.dumps(started)  # the secret itself is never logged


async def test_a_running_daemon_is_a_directory(daemon: Daemon, devnet: DevnetState) -> None:
    """`Client` (`lookup --server`): the daemon's report; a refresh through
    refreshIdentity with the token (refused without it, as transient: nobody knows more);
    no purge, said as such."""
    from atwhois.resolver.remote import Client, PurgeNotOffered

    remote = Client(daemon.url, token=TOKEN)
    try:
        found = await remote.lookup("alice.test")
        assert found.status is Status.VERIFIED and found.did == devnet.dids["alice"]
        before = _refreshes_requested(daemon)
        refreshed = await remote.refresh("alice.test")
        assert refreshed.verified and refreshed.cache is not None
        assert refreshed.cache.age_s < 5  # resolved afresh, then reported from the cache
        assert _refreshes_requested(daemon) == before + 1
        with pytest.raises(PurgeNotOffered, match="atwhois cache purge"):
            await remote.purge("alice.test")
    finally:
        await remote.aclose()
    for token in (None, "wrong"):
        refused = Client(daemon.url, token=token)
        try:
            answer = await refused.refresh("alice.test")
        finally:
            await refused.aclose()
        assert answer.status is Status.UNAVAILABLE and daemon.url in (answer.error or "")
    assert _refreshes_requested(daemon) == before + 1  # neither reached a resolution


async def test_a_daemon_that_misbehaves_is_a_transient_failure_within_the_deadline() -> None:
    """`--server` points at the operator's own daemon, yet its answer is still held to a
    size cap and a deadline, and a redirect is not followed: each is `unavailable`, said
    as such, and the wait ends when the deadline does."""
    from atwhois.resolver.remote import Client

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = (await reader.readuntil(b"\r\n\r\n")).decode()
        if "/v1/identity/huge" in request:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
            for _ in range(80):  # 5 MiB, over the 4 MiB cap, with no length announced
                writer.write(b"x" * 65536)
                await writer.drain()
        elif "/v1/identity/trickle" in request:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
            for _ in range(100):
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(0.1)
        else:
            writer.write(b"HTTP/1.1 301 Moved\r\nLocation: http://127.0.0.1:9/\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    remote = Client(f"http://127.0.0.1:{port}", timeout=1.0)
    try:
        async with server:
            huge = await remote.lookup("huge")
            started = time.monotonic()
            trickle = await remote.lookup("trickle")
            waited = time.monotonic() - started
            moved = await remote.lookup("moved")
    finally:
        await remote.aclose()
    assert huge.status is Status.UNAVAILABLE and "over 4194304 bytes" in (huge.error or "")
    assert trickle.status is Status.UNAVAILABLE and "within 1.0s" in (trickle.error or "")
    assert waited < 5  # the deadline (1 s); the trickle would take 10 s
    assert moved.status is Status.UNAVAILABLE and "did not answer" in (moved.error or "")


async def test_a_resolver_is_a_directory_that_keeps_nothing(devnet_config: Config) -> None:
    async with Resolver(devnet_config) as resolver:
        refreshed = await resolver.refresh("alice.test")
        assert refreshed.status is Status.VERIFIED and refreshed.cache is None
        assert await resolver.purge("alice.test") == []
