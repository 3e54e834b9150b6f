"""The test network itself: each of the three real servers answers, as the world says."""

from __future__ import annotations

import json
import ssl

import dns.asyncquery
import dns.asyncresolver
import dns.message
import dns.nameserver
import dns.rcode
import dns.resolver
import httpx
import pytest

from devnet import world
from devnet.network import DevnetState


def _resolver(devnet: DevnetState) -> dns.asyncresolver.Resolver:
    host, port = devnet.dns_server.split(":")
    resolver = dns.asyncresolver.Resolver(configure=False)
    resolver.nameservers = [dns.nameserver.Do53Nameserver(host, int(port))]
    resolver.lifetime = 2
    return resolver


async def _txt(devnet: DevnetState, name: str) -> list[list[bytes]]:
    answer = await _resolver(devnet).resolve(name, "TXT")
    return sorted(list(rdata.strings) for rdata in answer)


async def test_knot_serves_the_atproto_txt_records(devnet: DevnetState) -> None:
    assert await _txt(devnet, "_atproto.alice.test") == [[f"did={devnet.did('alice')}".encode()]]
    split = await _txt(devnet, "_atproto.split.test")
    assert len(split) == 1 and len(split[0]) == 2  # one record, two character-strings
    assert b"".join(split[0]) == f"did={devnet.did('kate')}".encode()


async def test_dns_cases_that_break_resolvers(devnet: DevnetState) -> None:
    # CNAME followed to a valid record.
    assert await _txt(devnet, "_atproto.cname.test") == [[f"did={devnet.did('leo')}".encode()]]
    # Too large for UDP: the answer is truncated, and dnspython retries over TCP.
    host, port = devnet.dns_server.split(":")
    udp = await dns.asyncquery.udp(
        dns.message.make_query("_atproto.big.test", "TXT"),
        host,
        port=int(port),
        timeout=2,
        raise_on_truncation=False,
    )
    assert udp.flags & dns.flags.TC
    assert len(await _txt(devnet, "_atproto.big.test")) == 13
    with pytest.raises(dns.resolver.NXDOMAIN):
        await _txt(devnet, "_atproto.nobody.test")
    with pytest.raises(dns.resolver.NoAnswer):  # NODATA: the name exists, no TXT
        await _txt(devnet, "_atproto.nodata.test")
    reply = await dns.asyncquery.udp(
        dns.message.make_query("_atproto.servfail.test", "TXT"), host, port=int(port), timeout=2
    )
    assert reply.rcode() == dns.rcode.SERVFAIL
    with pytest.raises(dns.exception.Timeout):
        await dns.asyncquery.udp(
            dns.message.make_query("_atproto.blackhole.test", "TXT"),
            host,
            port=int(port),
            timeout=0.5,
        )


async def test_plc_directory_serves_seeded_audit_logs(devnet: DevnetState) -> None:
    async with httpx.AsyncClient(base_url=devnet.plc_url) as client:
        log = (await client.get(f"/{devnet.did('frank')}/log/audit")).json()
        assert [entry["nullified"] for entry in log] == [False, True, False]
        assert log[1]["operation"]["alsoKnownAs"] == ["at://evil.test"]
        tombstoned = await client.get(f"/{devnet.did('erin')}")
        assert tombstoned.status_code == 404  # the reference server says 404, not 410
        assert "DID not available" in tombstoned.json()["message"]
        missing = await client.get(f"/{world.NEVER_REGISTERED_DID}")
        assert missing.status_code == 404 and "not registered" in missing.json()["message"]
        doc = (await client.get(f"/{devnet.did('alice')}")).json()
        assert doc["alsoKnownAs"] == ["at://alice.test"]


async def test_tls_hosts_serve_well_known_files_with_verified_certificates(
    devnet: DevnetState,
) -> None:
    # The test network's hosts only resolve through its DNS; map them here for this check.
    async with _https_via_loopback(devnet, "alice.test") as client:
        response = await client.get("/.well-known/atproto-did")
        assert response.text == devnet.did("alice")
    async with _https_via_loopback(devnet, "web.test") as client:
        assert (
            json.loads((await client.get("/.well-known/did.json")).text)["id"] == "did:web:web.test"
        )
    for broken in (world.TLS_EXPIRED, world.TLS_UNKNOWN_CA, world.TLS_WRONG_NAME):
        async with _https_via_loopback(devnet, broken) as client:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.get("/.well-known/atproto-did")


def _https_via_loopback(devnet: DevnetState, host: str) -> httpx.AsyncClient:
    context = ssl.create_default_context(cafile=devnet.ca_file)
    return httpx.AsyncClient(
        verify=context,
        base_url=f"https://127.0.0.1:{devnet.https_port}",
        headers={"Host": host},
        event_hooks={"request": [lambda r: _set_sni(r, host)]},
    )


async def _set_sni(request: httpx.Request, host: str) -> None:
    request.extensions["sni_hostname"] = host
