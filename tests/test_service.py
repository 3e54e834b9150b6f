"""The real `atwhois serve` daemon, called over HTTP against the test network."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from cache import CachedResolver, MemoryStore, SqliteStore, TieredStore
from cli import settings
from devnet.atwhois import Daemon, running_daemon
from devnet.forwarder import PlcStandIn
from devnet.identities import verified
from devnet.network import DevnetState
from resolver import Config, Identity, Resolver, Status
from server import Service, Settings, xrpc_errors
from server.answers import AnswerCache
from tests.support import metrics
from tests.support.cache_model import LoopThread, start_daemon, stop_daemons
from tests.support.clock import Clock
from tests.support.http import XRPC, get

TOKEN = "test-refresh-token"


@pytest.fixture(scope="module")
def daemon(devnet: DevnetState, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    log = tmp_path_factory.mktemp("daemon") / "serve.log"
    with running_daemon(devnet.env(), log, "--cache", "memory:", "--refresh-token", TOKEN) as d:
        yield d


def xrpc_error(response: httpx.Response, status: int, name: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == name and isinstance(body["message"], str)
    return str(body["message"])


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
    return int(metrics.value(text, "atwhois_cache_refreshes_total", kind="requested"))


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
    assert count == metrics.value(before, "atwhois_requests_total", **requests) + 3
    fresh = metrics.value(after, "atwhois_cache_lookups_total", result="fresh")
    assert fresh >= metrics.value(before, "atwhois_cache_lookups_total", result="fresh") + 2
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
    assert metrics.value(after, "python_gc_objects_collected_total", generation="0") >= 0
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
    time.sleep(0.6)  # lines are written in batches, every 0.25 s
    lines = [line for line in daemon.log_lines() if line.get("request_id") == "trace-me-42"]
    assert lines and lines[0]["path"] == "/_health" and lines[0]["status"] == 200
    kept = [line for line in daemon.log_lines() if line.get("request_id") == "ask-3"]
    assert kept and kept[0]["path"] == XRPC + "resolveHandle" and kept[0]["status"] == 200
    assert kept[0]["method"] == "GET" and kept[0]["remote"] == "127.0.0.1" and kept[0]["ms"] >= 0


async def test_coalescing_through_the_http_api(daemon: Daemon) -> None:
    def upstream_handles(text: str) -> float:
        return metrics.value(text, "atwhois_upstream_resolutions_total", kind="handles")

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
            await asyncio.sleep(1.2)  # carol's entry is now stale
            stale = await client.get(XRPC + "resolveDid", params=carol)
            assert stale.status_code == 200 and stale.json()["didDoc"]["id"] == carol["did"]
            assert stale.headers["Cache-Control"].startswith("public, max-age=0")
            nothing = await client.get(XRPC + "resolveDid", params={"did": devnet.did("alice")})
            xrpc_error(nothing, 502, "UpstreamFailure")
            assert nothing.headers["Retry-After"] == "30"
            await asyncio.sleep(0.3)
            report = (await client.get(f"/v1/identity/{carol['did']}")).json()
            assert report["cache"]["state"] == "stale"
            assert "cannot connect" in report["evidence"]["refresh"]["error"]


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
                await asyncio.sleep(0.4)  # the DNS answer takes 1.5 s
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
                await asyncio.sleep(0.1)
                crowded = await client.get("/v1/identity/alice.test")  # waits 1 s, then 503
                return await slow, crowded

        slow, crowded = asyncio.run(scenario())
        assert "deadline" in xrpc_error(slow, 502, "UpstreamFailure")
        xrpc_error(crowded, 503, "NotEnoughResources")
        assert crowded.headers["Retry-After"] == "1"
        time.sleep(0.5)  # the shared resolution finished meanwhile, and was cached
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


LEXICONS = Path(__file__).parent / "vectors" / "lexicons"


def declared_errors(nsid: str) -> set[str]:
    lexicon = json.loads((LEXICONS / (nsid.replace(".", "/") + ".json")).read_text())
    return {error["name"] for error in lexicon["defs"]["main"].get("errors", [])}


def test_each_method_uses_only_its_lexicons_error_names() -> None:
    failing = set(Status) - {Status.VERIFIED, Status.INVALID_INPUT}
    for nsid, table in xrpc_errors.TABLES.items():
        declared = declared_errors(nsid)
        names = {name for _, name in table.values()}
        assert names <= declared | xrpc_errors.GENERIC_ERRORS, nsid
        assert declared <= names, f"{nsid}: a declared error is never used"
    for table in (xrpc_errors.RESOLVE_HANDLE, xrpc_errors.RESOLVE_IDENTITY):
        assert set(table) == failing  # a lookup by handle can end in any of them
    assert set(xrpc_errors.RESOLVE_DID) == {  # a DID's own failures
        Status.DID_NOT_FOUND,
        Status.DID_DEACTIVATED,
        Status.INVALID_DOCUMENT,
        Status.PLC_LOG_INVALID,
        Status.UNAVAILABLE,
    }


@pytest.mark.parametrize(
    ("method", "param", "value"),
    [
        ("resolveHandle", "handle", "@alice.test"),  # H-SYN-7: `@` is UI only
        ("resolveHandle", "handle", "at://alice.test"),
        ("resolveHandle", "handle", "https://bsky.app/profile/alice.test"),
        ("resolveHandle", "handle", " alice.test"),
        ("resolveDid", "did", "alice.test"),
        ("resolveDid", "did", "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz"),
        ("resolveIdentity", "identifier", "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz"),
        ("resolveIdentity", "identifier", "@alice.test"),
        ("resolveIdentity", "identifier", "https://bsky.app/profile/alice.test"),
        ("resolveIdentity", "identifier", "DID:plc:ewvi7nxzyoun6zhxrhs64oiz"),
    ],
)
def test_inputs_outside_the_lexicon_format_are_invalid_requests(
    daemon: Daemon, method: str, param: str, value: str
) -> None:
    message = xrpc_error(get(daemon, XRPC + method, **{param: value}), 400, "InvalidRequest")
    assert param in message


def test_refresh_takes_an_at_identifier_only(daemon: Daemon) -> None:
    url = daemon.url + XRPC + "refreshIdentity"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for identifier in ("at://alice.test", "@alice.test", 42):
        response = httpx.post(url, json={"identifier": identifier}, headers=auth)
        xrpc_error(response, 400, "InvalidRequest")


@pytest.mark.parametrize(
    ("method", "identifier", "status", "name", "reason"),
    [
        ("resolveHandle", "nobody.test", 404, "HandleNotFound", "handle_not_found"),
        ("resolveHandle", "ghost.test", 404, "HandleNotFound", "did_not_found"),
        ("resolveHandle", "erin.test", 404, "HandleNotFound", "did_deactivated"),
        ("resolveHandle", "bob-old.test", 400, "InvalidRequest", "handle_mismatch"),
        ("resolveHandle", "two-dids.test", 400, "InvalidRequest", "ambiguous"),
        ("resolveHandle", "imposter.test", 502, "UpstreamFailure", "invalid_document"),
        ("resolveDid", "did:plc:neverregisteredaaaaaaaaa", 404, "DidNotFound", "did_not_found"),
        ("resolveDid", "erin", 404, "DidDeactivated", "did_deactivated"),
        ("resolveDid", "did:web:imposter.test", 502, "UpstreamFailure", "invalid_document"),
        ("resolveIdentity", "nobody.test", 404, "HandleNotFound", "handle_not_found"),
        ("resolveIdentity", "ghost.test", 404, "DidNotFound", "did_not_found"),
        ("resolveIdentity", "erin.test", 404, "DidDeactivated", "did_deactivated"),
        ("resolveIdentity", "erin", 404, "DidDeactivated", "did_deactivated"),
        ("resolveIdentity", "bob-old.test", 400, "InvalidRequest", "handle_mismatch"),
        ("resolveIdentity", "two-dids.test", 400, "InvalidRequest", "ambiguous"),
        ("resolveIdentity", "did:web:imposter.test", 502, "UpstreamFailure", "invalid_document"),
    ],
)
def test_failures_map_to_the_lexicons_names(
    daemon: Daemon,
    devnet: DevnetState,
    method: str,
    identifier: str,
    status: int,
    name: str,
    reason: str,
) -> None:
    if "." not in identifier and ":" not in identifier:
        identifier = devnet.did(identifier)
    param = {"resolveHandle": "handle", "resolveDid": "did"}.get(method, "identifier")
    response = get(daemon, XRPC + method, **{param: identifier})
    message = xrpc_error(response, status, name)
    assert name in declared_errors(f"com.atproto.identity.{method}") | xrpc_errors.GENERIC_ERRORS
    assert message.startswith(reason + ": ")
    assert "Retry-After" not in response.headers  # none of these is transient


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


# --- the answer cache: a hit is ready bytes, never an answer an entry no longer backs --------


DOCUMENT = b'{"id":"did:plc:a"}'
HANDLE_A = XRPC + "resolveHandle?handle=a.test"


def _kept(answers: AnswerCache, identity: Identity, document: bytes | None = DOCUMENT) -> None:
    answers.put(identity, document, answers.changes)


async def test_an_answer_is_kept_while_fresh_and_dropped_when_an_entry_it_rests_on_changes() -> (
    None
):
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0])
    answers = AnswerCache(store, clock=lambda: now[0])
    _kept(answers, verified("did:plc:a", "a.test", fresh_for=60))
    now[0] += 59  # past the old half-second limit, still fresh
    found = answers.get(HANDLE_A)
    assert found == (
        b'{"did":"did:plc:a"}',
        "public, max-age=1, stale-while-revalidate=60, stale-if-error=60",
    )
    now[0] += 2
    assert answers.get(HANDLE_A) is None  # never past its fresh window
    for changed in ("d:did:plc:a", "h:a.test"):
        _kept(answers, verified("did:plc:a", "a.test"))
        await store.put("h:other.test", b"x", now[0] + 60)
        assert answers.get(HANDLE_A) is not None  # another entry changed: still true
        await store.delete([changed])
        assert answers.get(HANDLE_A) is None, changed
        assert answers.get(XRPC + "resolveDid?did=did:plc:a") is None, changed
    _kept(answers, verified("did:plc:a", "a.test"))
    store.announce(["d:did:plc:a"])  # what the key means changed (an account's status)
    assert answers.get(HANDLE_A) is None
    assert len(answers._records) == 0  # nothing left under either key


async def test_an_answer_looked_up_across_a_change_is_not_kept() -> None:
    store = MemoryStore()
    answers = AnswerCache(store)
    before = answers.changes
    await store.put("d:did:plc:a", b"new", time.time() + 60)  # while the lookup ran
    answers.put(verified("did:plc:a", "a.test"), DOCUMENT, before)
    assert answers.get(HANDLE_A) is None


async def test_answers_are_kept_half_a_second_while_other_processes_changes_are_not_followed(
    tmp_path: Path,
) -> None:
    now = [1000.0]
    store = TieredStore(MemoryStore(), SqliteStore(tmp_path / "c.db"))
    answers = AnswerCache(store, clock=lambda: now[0])
    assert not store.following  # not yet watching
    _kept(answers, verified("did:plc:a", "a.test"))
    now[0] += 0.4
    assert answers.get(HANDLE_A) is not None
    now[0] += 0.2
    assert answers.get(HANDLE_A) is None
    await store.close()


async def test_a_kept_answer_spares_the_memory_tier_its_entries(tmp_path: Path) -> None:
    """A hot identity is held once in memory, as the record its answers are rendered from,
    not also as the entries it was composed from, while the store below holds those (issue
    18: 3.2 KB per identity, a third of it such copies); memory alone keeps its entries."""
    tier = TieredStore(MemoryStore(), SqliteStore(tmp_path / "c.db"))
    alone = MemoryStore()
    for store in (tier, alone):
        answers = AnswerCache(store)
        for key in ("h:a.test", "d:did:plc:a"):
            await store.put(key, b"entry", time.time() + 60)
        _kept(answers, verified("did:plc:a", "a.test"))
        assert answers.get(HANDLE_A) is not None
    assert tier.memory.slot("h:a.test") is None and tier.memory.slot("d:did:plc:a") is None
    found = await tier.get("d:did:plc:a")  # read back from below to compose a new answer
    assert found is not None and found.value == b"entry"
    assert alone.slot("h:a.test") is not None and alone.slot("d:did:plc:a") is not None
    await tier.close()


def test_answers_pushed_out_by_the_bound_leave_nothing_behind() -> None:
    answers = AnswerCache(MemoryStore(), max_bytes=10_000)
    for i in range(1000):
        _kept(answers, verified(f"did:plc:{i}", f"u{i}.test"))
    assert answers.used_bytes <= 10_000
    by_did = [answers.get(f"{XRPC}resolveDid?did=did:plc:{i}") is not None for i in range(1000)]
    by_handle = [answers.get(f"{XRPC}resolveHandle?handle=u{i}.test") for i in range(1000)]
    assert 0 < sum(by_did) < 1000
    assert [found is not None for found in by_handle] == by_did  # both keys, or neither
    assert len(answers._records) == 2 * sum(by_did)


def _as(identity: Identity, status: Status, **changes: str | None) -> Identity:
    return dataclasses.replace(identity, status=status, **changes)  # type: ignore[arg-type]


def test_one_record_answers_each_method_only_what_the_method_would() -> None:
    """An identity's record answers resolveHandle, resolveDid and resolveIdentity, by DID and
    by handle, for the one spelling of each question it can be sure of; everything else
    goes the long way (None here)."""
    answers = AnswerCache(MemoryStore())
    _kept(answers, verified("did:plc:a", "a.test"))

    def body(question: str) -> bytes | None:
        found = answers.get(XRPC + question)
        return found[0] if found else None

    full = b'{"did":"did:plc:a","handle":"a.test","didDoc":{"id":"did:plc:a"}}'
    assert body("resolveHandle?handle=a.test") == b'{"did":"did:plc:a"}'
    assert body("resolveDid?did=did:plc:a") == b'{"didDoc":{"id":"did:plc:a"}}'
    assert body("resolveDid?did=did%3Aplc%3Aa") == b'{"didDoc":{"id":"did:plc:a"}}'
    assert body("resolveIdentity?identifier=a.test") == full
    assert body("resolveIdentity?identifier=did:plc:a") == full
    for other in (
        "resolveHandle?handle=A.test",  # the long way lower-cases it
        "resolveHandle?handle=did:plc:a",
        "resolveHandle?handle=a.test&x=1",
        "resolveDid?did=a.test",
        "resolveDid?handle=a.test",
        "resolveIdentity?handle=a.test",
        "refreshIdentity?identifier=a.test",
    ):
        assert body(other) is None, other
    assert answers.get("/xrpc/com.bad-example.identity.resolveMiniDoc?identifier=a.test") is None

    # a DID whose handle does not verify: no answer by that handle, handle.invalid by DID
    _kept(answers, _as(verified("did:plc:b", "b.test"), Status.HANDLE_MISMATCH, query="did:plc:b"))
    assert body("resolveHandle?handle=b.test") is None
    assert body("resolveIdentity?identifier=b.test") is None
    shown = body("resolveIdentity?identifier=did:plc:b")
    assert shown == b'{"did":"did:plc:b","handle":"handle.invalid","didDoc":{"id":"did:plc:a"}}'
    # a handle that could not be checked: resolveIdentity fails, the document is served
    _kept(answers, _as(verified("did:plc:c", "c.test"), Status.UNAVAILABLE))
    assert body("resolveIdentity?identifier=did:plc:c") is None
    assert body("resolveDid?did=did:plc:c") is not None
    # no document to serve: only resolveHandle answers
    _kept(answers, verified("did:plc:d", "d.test"), document=None)
    assert body("resolveHandle?handle=d.test") == b'{"did":"did:plc:d"}'
    assert body("resolveDid?did=did:plc:d") is None
    assert body("resolveIdentity?identifier=d.test") is None


def test_a_handle_holds_one_record_and_another_handles_lookup_keeps_none() -> None:
    """A DID that declares a handle another DID holds takes the handle's key: the other
    record goes whole (under its DID too), never half. A lookup of a handle that names
    another DID's document rests on that handle too, which no record is kept under."""
    answers = AnswerCache(MemoryStore())
    _kept(answers, verified("did:plc:a", "a.test"))
    claim = _as(verified("did:plc:x", "a.test"), Status.HANDLE_MISMATCH, handle_queried=None)
    _kept(answers, claim)
    assert answers.get(HANDLE_A) is None
    assert answers.get(XRPC + "resolveDid?did=did:plc:a") is None
    assert answers.get(XRPC + "resolveDid?did=did:plc:x") is not None
    assert len(answers._records) == 2
    answers.changed(["h:a.test"])
    assert len(answers._records) == 0
    other = _as(verified("did:plc:y", "y.test"), Status.HANDLE_MISMATCH, handle_queried="z.test")
    _kept(answers, other)
    assert answers.get(XRPC + "resolveDid?did=did:plc:y") is None


def test_a_kept_answer_is_what_its_method_answered(devnet: DevnetState, tmp_path: Path) -> None:
    """Each method's kept answer, rendered from the identity's record, is byte for byte what
    the method answered (asked twice: resolved, then composed from the cache and kept),
    with the same Cache-Control; also for a DID sent percent-encoded, as the TypeScript and
    Go clients send it, and for a DID whose handle does not verify. A spelling the record
    does not answer (an upper-case handle) is answered the long way, the same."""
    alice, trent = devnet.did("alice"), devnet.did("trent")
    questions = [
        "resolveHandle?handle=alice.test",
        f"resolveDid?did={alice}",
        f"resolveDid?did={alice.replace(':', '%3A')}",
        "resolveIdentity?identifier=alice.test",
        f"resolveIdentity?identifier={alice}",
        f"resolveIdentity?identifier={trent}",  # claims alice.test: handle.invalid
        f"resolveDid?did={trent}",
    ]
    loop = LoopThread()
    store = TieredStore(MemoryStore(), SqliteStore(tmp_path / "c.db"))
    daemon = loop.run(start_daemon(Resolver(devnet.config()), store, Clock()))
    try:
        with httpx.Client(base_url=daemon.url) as client:
            for question in questions:
                target = XRPC + question
                answered = [client.get(target) for _ in range(2)]
                kept = daemon.service.answers.get(target)
                assert kept is not None, question
                for answer in (*answered, client.get(target)):
                    assert answer.status_code == 200, question
                    assert answer.content == kept[0], question
                    assert answer.headers["Cache-Control"] == kept[1], question
            upper = client.get(XRPC + "resolveHandle?handle=ALICE.test")
            assert upper.json() == {"did": alice}
            assert daemon.service.answers.get(XRPC + "resolveHandle?handle=ALICE.test") is None
            shown = client.get(XRPC + f"resolveIdentity?identifier={trent}").json()
            assert shown["handle"] == "handle.invalid"
    finally:
        stop_daemons(loop, [daemon])
        loop.stop()


@examples(max_examples=500, deadline=None)
@given(
    st.sampled_from(["resolveHandle?handle=", "resolveDid?did=", "resolveIdentity?identifier="]),
    st.one_of(st.sampled_from(["a.test", "did:plc:a", "A.test"]), st.text(max_size=40)),
    st.sampled_from(["", "%", "&x=1", "#"]),
    st.booleans(),
)
def test_a_strangers_target_is_answered_from_a_record_or_not_at_all(
    question: str, value: str, tail: str, encoded: bool
) -> None:
    """The target is read as sent, by hand: whatever the bytes, a lookup answers what the
    record says for exactly its DID or handle, or nothing; it never raises."""
    answers = AnswerCache(MemoryStore())
    _kept(answers, verified("did:plc:a", "a.test"))
    sent = urllib.parse.quote(value, safe="") if encoded else value
    found = answers.get(XRPC + question + sent + tail)
    if found is not None:
        assert tail == "" and value in ("a.test", "did:plc:a")


async def test_a_running_daemon_is_a_directory(daemon: Daemon, devnet: DevnetState) -> None:
    """`RemoteDirectory` (`lookup --server`): the daemon's report; a refresh through
    refreshIdentity with the token (refused without it, as transient: nobody knows more);
    no purge, said as such."""
    from resolver.remote import PurgeNotOffered, RemoteDirectory

    remote = RemoteDirectory(daemon.url, token=TOKEN)
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
        refused = RemoteDirectory(daemon.url, token=token)
        try:
            answer = await refused.refresh("alice.test")
        finally:
            await refused.aclose()
        assert answer.status is Status.UNAVAILABLE and daemon.url in (answer.error or "")
    assert _refreshes_requested(daemon) == before + 1  # neither reached a resolution


async def test_a_resolver_is_a_directory_that_keeps_nothing(devnet_config: Config) -> None:
    async with Resolver(devnet_config) as resolver:
        refreshed = await resolver.refresh("alice.test")
        assert refreshed.status is Status.VERIFIED and refreshed.cache is None
        assert await resolver.purge("alice.test") == []
