"""The resolver against the real test network: every case of the world, with the exact
status and evidence each must produce."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from atwhois.resolver import Config, Nameserver, Outcome, Resolver, Status
from atwhois.resolver.did import check_plc_response
from atwhois.resolver.dns import DnsClient
from atwhois.resolver.errors import ResolutionError
from atwhois.resolver.fetch import Fetcher
from atwhois.resolver.response import Response
from devnet import world
from devnet.https import Certificates, HttpsHosts
from devnet.network import DevnetState
from tests.support.lookup_cases import CASES, NF, OK, SKIP, Case
from tests.support.waiting import eventually


def _did(devnet: DevnetState, ref: str | None) -> str | None:
    if ref is None or ref.startswith("did:"):
        return ref
    return world.NEVER_REGISTERED_DID if ref == "never" else devnet.did(ref)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.query)
async def test_handle_lookups(case: Case, resolver: Resolver, devnet: DevnetState) -> None:
    identity = await resolver.lookup(case.query)
    evidence = (identity.dns, identity.https, identity.did_doc)
    assert identity.status is case.status, identity.error
    assert identity.did == _did(devnet, case.did)
    assert tuple(e.outcome for e in evidence) == (case.dns, case.https, case.doc)
    for expected, got in zip(case.error_kinds, evidence, strict=True):
        if expected is not None:
            assert got.error_kind == expected, got.error
    assert set(identity.warnings) == case.warnings
    verified = case.status is Status.VERIFIED
    handle = case.query.removeprefix("@").lower()
    assert identity.handle == (handle if verified else "handle.invalid")  # H-INV-2
    assert (identity.error is None) is verified
    for e in evidence:  # every step that ran says how long it took and where it asked
        assert (e.ms is not None) is (e.outcome is not SKIP)
        assert (e.source is not None) is (e.outcome is not SKIP)


async def test_evidence_carries_what_each_method_saw(
    resolver: Resolver, devnet: DevnetState
) -> None:
    conflict = await resolver.lookup("conflict.test")
    assert conflict.dns.dids == (devnet.did("ivan"),)
    assert conflict.https.dids == (devnet.did("alice"),)
    ambiguous = await resolver.lookup("two-dids.test")
    assert set(ambiguous.dns.dids) == {devnet.did("alice"), devnet.did("bob")}
    redirect = await resolver.lookup("redirect.test")
    assert redirect.https.source == "https://redirect.test/.well-known/atproto-did"


async def test_document_data(resolver: Resolver, devnet: DevnetState) -> None:
    grace = await resolver.lookup("grace.test")
    assert grace.also_known_as[0] == "https://grace.example.com"
    assert grace.declared_handle == "grace.test"  # not under_score.test, not grace-alt.test
    assert grace.pds == world.PDS and grace.signing_key and grace.signing_key.startswith("did:key:")
    dave = await resolver.lookup("dave.test")
    assert dave.pds == "https://pds2.test"  # the op signed by the rotated-in key applied
    quinn = await resolver.lookup("quinn.test")
    assert quinn.signing_key == world.P256_SIGNING_KEY
    web, legacy = await resolver.lookup("web.test"), await resolver.lookup("legacyweb.test")
    assert web.signing_key == legacy.signing_key == "did:key:" + world.K256_MULTIKEY
    frank = await resolver.lookup("frank.test")
    assert frank.also_known_as == ("at://frank.test",)  # not the nullified at://evil.test
    assert frank.did_document is not None and frank.did_document["id"] == devnet.did("frank")


@pytest.mark.parametrize(
    ("ref", "status", "handle_outcomes"),
    [
        ("alice", Status.VERIFIED, (OK, OK)),
        ("bob", Status.VERIFIED, (OK, NF)),
        ("erin", Status.DID_DEACTIVATED, (SKIP, SKIP)),
        ("never", Status.DID_NOT_FOUND, (SKIP, SKIP)),
        ("did:web:web.test", Status.VERIFIED, (OK, NF)),
        ("did:web:imposter.test", Status.INVALID_DOCUMENT, (SKIP, SKIP)),
        ("did:web:nobody.test", Status.DID_NOT_FOUND, (SKIP, SKIP)),  # NXDOMAIN (D-WEB-4)
        ("did:web:error.test", Status.UNAVAILABLE, (SKIP, SKIP)),  # 503
        ("did:web:redirect.test", Status.INVALID_DOCUMENT, (SKIP, SKIP)),  # no redirects
        ("did:web:bigdoc.test", Status.INVALID_DOCUMENT, (SKIP, SKIP)),  # over 64 KiB
        ("did:web:nested.test", Status.INVALID_DOCUMENT, (SKIP, SKIP)),  # 30,000 levels deep
        ("did:web:expired.test", Status.UNAVAILABLE, (SKIP, SKIP)),  # TLS: transient
        ("did:web:feedgen.test", Status.HANDLE_NOT_FOUND, (SKIP, SKIP)),  # declares no handle
        ("uma", Status.HANDLE_NOT_FOUND, (SKIP, SKIP)),  # declares uma.local: H-TLD-1
        ("trent", Status.HANDLE_MISMATCH, (OK, OK)),  # declares alice.test: impersonation
    ],
)
async def test_did_lookups(
    ref: str,
    status: Status,
    handle_outcomes: tuple[Outcome, Outcome],
    resolver: Resolver,
    devnet: DevnetState,
) -> None:
    did = _did(devnet, ref)
    assert did is not None
    identity = await resolver.lookup(did)
    assert identity.status is status, identity.error
    assert identity.did == did
    assert (identity.dns.outcome, identity.https.outcome) == handle_outcomes


async def test_did_first_reports_why(resolver: Resolver, devnet: DevnetState) -> None:
    # H-RES-5: trent declares alice.test, which resolves to alice: an impersonation.
    trent = await resolver.lookup(devnet.did("trent"))
    assert trent.declared_handle == "alice.test" and trent.handle == "handle.invalid"
    assert trent.dns.dids == (devnet.did("alice"),)
    assert trent.error == f"alice.test resolves to {devnet.did('alice')}, not {devnet.did('trent')}"
    uma = await resolver.lookup(devnet.did("uma"))
    assert uma.dns.error is not None and "H-TLD-1" in uma.dns.error
    feedgen = await resolver.lookup("did:web:feedgen.test")
    assert feedgen.error == "the DID document declares no at:// handle"
    assert set(feedgen.warnings) == {"no_signing_key", "no_pds"}


async def test_invalid_input_never_touches_the_network(devnet_config: Config) -> None:
    class NoNetwork(DnsClient):
        async def txt(self, name: str) -> list[list[bytes]]:
            raise AssertionError("DNS asked for invalid input")

        async def addresses(self, host: str) -> list[str]:
            raise AssertionError("HTTP attempted for invalid input")

    dns = NoNetwork(devnet_config)
    async with Resolver(devnet_config, dns=dns, web=Fetcher(devnet_config, dns)) as resolver:
        for text, rule in [
            ("john..test", "H-SYN-2"),
            ("laptop.local", "H-TLD-1"),
            ("handle.invalid", "H-INV-1"),
            ("did:key:zQ3sh", "D-SYN-9"),
            ("did:plc:short", "D-PLC-1"),
            ("did:web:a.com:path", "D-WEB-1"),
            ("DID:plc:ewvi7nxzyoun6zhxrhs64oiz", "D-SYN-1"),
            ("at://a.test/", "U-1"),
        ]:
            identity = await resolver.lookup(text)
            assert identity.status is Status.INVALID_INPUT
            assert identity.error is not None and f"[{rule}]" in identity.error
            assert identity.status.exit_code == 2


async def test_test_tld_needs_dev_mode(devnet_config: Config) -> None:
    async with Resolver(dataclasses.replace(devnet_config, dev=False)) as resolver:
        identity = await resolver.lookup("alice.test")
    assert identity.status is Status.INVALID_INPUT and "H-TLD-2" in (identity.error or "")


async def test_methods_run_concurrently(devnet_config: Config) -> None:
    """H-RES-1, H-RES-2: DNS and HTTPS are asked at once, and the document as soon as either
    names the DID. Here the DNS answer is held back until the document has arrived, which
    only the well-known's DID can have asked for: a lookup that asked DNS first, or waited
    for both methods before the document, would never end (a deadlock, not a slow run)."""
    async with Resolver(devnet_config) as resolver:
        document_fetched = asyncio.Event()
        txt, get = resolver.dns.txt, resolver.plc.get

        async def held_back(name: str) -> list[list[bytes]]:
            await document_fetched.wait()
            return await txt(name)

        async def fetched(url: str, **options: Any) -> Any:
            answer = await get(url, **options)
            document_fetched.set()
            return answer

        resolver.dns.txt = held_back  # type: ignore[method-assign]
        resolver.plc.get = fetched  # type: ignore[method-assign]
        async with asyncio.timeout(30):
            identity = await resolver.lookup("alice.test")
    assert identity.status is Status.VERIFIED
    assert identity.dns.outcome is OK and identity.https.outcome is OK


async def test_fallback_nameserver_is_asked_when_the_primary_fails(
    devnet_config: Config, devnet: DevnetState
) -> None:
    # A primary nothing answers on (the discard port), then the real one.
    config = dataclasses.replace(
        devnet_config,
        dns_servers=(Nameserver("127.0.0.1", 9),),
        dns_fallback_servers=devnet_config.dns_servers,
        dns_timeout=2.0,
    )
    async with Resolver(config) as resolver:
        identity = await resolver.lookup("alice.test")
    assert identity.status is Status.VERIFIED and identity.dns.outcome is OK


async def test_cancellation_leaves_no_task_behind(resolver: Resolver) -> None:
    """A lookup cancelled mid-way (its well-known's headers take 30 s) leaves none of the
    tasks it started: the tasks compared are those made since it began, by identity (the
    session's other tasks ending meanwhile cannot hide one left behind)."""
    before = asyncio.all_tasks()
    task = asyncio.create_task(resolver.lookup("slow-headers.test"))
    await eventually(lambda: len(asyncio.all_tasks() - before - {task}) >= 1)  # under way
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: not {t for t in asyncio.all_tasks() - before if not t.done()})


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (410, b'{"message": "DID not available: did:plc:x"}', "DidDeactivated"),  # API spec
        (404, b'{"message": "DID not available: did:plc:x"}', "DidDeactivated"),  # reference
        (404, b'{"message": "DID not registered: did:plc:x"}', "NotFound"),
        (404, b"<html>not json</html>", "NotFound"),
        (500, b"", "UpstreamFailure"),
        (429, b"", "UpstreamFailure"),
        # Any other status says nothing about the DID: never absence, never invalid data.
        (400, b'{"message": "bad"}', "UpstreamFailure"),
        (403, b"<html>Request blocked</html>", "UpstreamFailure"),
    ],
)
def test_plc_directory_statuses(status: int, body: bytes, error: str) -> None:
    with pytest.raises(ResolutionError) as info:
        check_plc_response(Response("http://plc", status, body), "did:plc:x")
    assert type(info.value).__name__ == error


async def test_did_web_localhost_with_a_port_in_dev_mode(devnet_config: Config) -> None:
    # D-WEB-3: did:web:localhost%3APORT over plain http, only in development.
    app = web.Application()
    port_box: list[int] = []

    async def did_json(_: web.Request) -> web.Response:
        did = f"did:web:localhost%3A{port_box[0]}"
        return web.json_response({"id": did, "alsoKnownAs": ["at://alice.test"]})

    app.router.add_get("/.well-known/did.json", did_json)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port_box.append(runner.addresses[0][1])
    did = f"did:web:localhost%3A{port_box[0]}"
    try:
        async with Resolver(devnet_config) as resolver:
            identity = await resolver.lookup(did)
        # The document is fetched; alice.test points at alice, not at this DID.
        assert identity.did_doc.outcome is OK and identity.did_doc.source == (
            f"http://localhost:{port_box[0]}/.well-known/did.json"
        )
        assert identity.status is Status.HANDLE_MISMATCH
        async with Resolver(dataclasses.replace(devnet_config, dev=False)) as resolver:
            refused = await resolver.lookup(did)
        assert refused.status is Status.INVALID_INPUT and "D-WEB-3" in (refused.error or "")
    finally:
        await runner.cleanup()


async def test_a_did_web_handle_on_its_own_host_takes_one_tls_connection(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """A handle whose DID is did:web on the handle's own host: DNS names the DID while the
    well-known fetch is still under way; the did.json fetch waits for it and reuses its
    connection (one TLS handshake, not two). Served by the test network's HTTPS hosts,
    which keep a connection open as a real server does."""
    certificates = Certificates(tmp_path / "tls")
    hosts = HttpsHosts(tmp_path / "files", certificates)
    port = await hosts.start()
    try:
        handle = world.bulk_host(77_001)  # a generated well-known file and did.json
        devnet.set_txt(handle, [f"did=did:web:{handle}"])
        config = devnet.config(https_port=port, ca_bundle=str(certificates.ca_file))
        async with Resolver(config) as resolver:
            identity = await resolver.lookup(handle)
        assert identity.status is Status.VERIFIED, identity.to_json()
        assert (hosts.requests, hosts.connections) == (2, 1)
    finally:
        hosts.close()
