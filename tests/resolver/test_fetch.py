"""The hardened fetcher: SSRF guard, rebinding, caps, redirects (real TLS on the test network)."""

from __future__ import annotations

import asyncio
import ipaddress
import re

import pytest

from atwhois.resolver import Config
from atwhois.resolver.config import Nameserver, parse_networks
from atwhois.resolver.dns import DnsClient
from atwhois.resolver.errors import ForbiddenAddress, InvalidData, ResponseTooLarge, UpstreamFailure
from atwhois.resolver.fetch import AddressGuard, Fetcher, HostGates
from devnet.dns import DnsProxy
from devnet.network import DevnetState

WELL_KNOWN = "/.well-known/atproto-did"


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("127.0.0.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("100.64.0.1", False),  # carrier-grade NAT
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("255.255.255.255", False),
        ("192.0.2.1", False),  # documentation
        ("::1", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("ff02::1", False),
        ("::ffff:10.0.0.1", False),  # IPv4-mapped private address
        ("::ffff:8.8.8.8", True),
    ],
)
def test_guard_refuses_non_public_addresses(address: str, allowed: bool) -> None:
    guard = AddressGuard(Config(), DnsClient(Config()))
    assert guard.permits(ipaddress.ip_address(address)) is allowed


def test_allow_list_opens_only_its_ranges() -> None:
    config = Config(allow_nets=parse_networks(["127.0.0.0/8", "fd00::/8"]))
    guard = AddressGuard(config, DnsClient(config))
    assert guard.permits(ipaddress.ip_address("127.0.0.53"))
    assert guard.permits(ipaddress.ip_address("fd12::1"))
    assert not guard.permits(ipaddress.ip_address("10.0.0.1"))


class RebindingDns(DnsClient):
    """Answers the first address lookup with loopback, every later one with 0.0.0.0."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.lookups: list[str] = []

    async def addresses(self, host: str) -> list[str]:
        self.lookups.append(host)
        return ["127.0.0.1"] if len(self.lookups) == 1 else ["0.0.0.0"]


async def test_each_fetch_connects_to_the_address_it_checked(devnet_config: Config) -> None:
    dns = RebindingDns(devnet_config)
    fetcher = Fetcher(devnet_config, dns)
    try:
        response = await fetcher.get(f"https://alice.test{WELL_KNOWN}", max_bytes=2048, timeout=3)
        assert response.status == 200 and dns.lookups == ["alice.test"]  # one lookup, used
        # The next fetch gets the rebinding answer and is refused, never connected.
        with pytest.raises(ForbiddenAddress, match=re.escape("0.0.0.0")):
            await fetcher.get(f"https://carol.test{WELL_KNOWN}", max_bytes=2048, timeout=3)
    finally:
        await fetcher.aclose()


@pytest.fixture
async def fetcher(devnet_config: Config):  # type: ignore[no-untyped-def]
    fetcher = Fetcher(devnet_config, DnsClient(devnet_config))
    yield fetcher
    await fetcher.aclose()


async def test_redirect_hops_are_checked_again(fetcher: Fetcher) -> None:
    with pytest.raises(ForbiddenAddress, match=re.escape("0.0.0.0")):
        await fetcher.get(
            f"https://redirect-private.test{WELL_KNOWN}", max_bytes=2048, timeout=3, max_redirects=5
        )
    with pytest.raises(InvalidData, match="H-WK-5"):  # no downgrade to plain http
        await fetcher.get(
            f"https://redirect-http.test{WELL_KNOWN}", max_bytes=2048, timeout=3, max_redirects=5
        )
    with pytest.raises(InvalidData, match="not followed"):  # DID documents: no redirects
        await fetcher.get("https://redirect.test/.well-known/did.json", max_bytes=2048, timeout=3)


async def test_size_cap_while_streaming(fetcher: Fetcher) -> None:
    with pytest.raises(ResponseTooLarge, match="over 2048 bytes"):  # no Content-Length
        await fetcher.get(f"https://chunked.test{WELL_KNOWN}", max_bytes=2048, timeout=5)
    with pytest.raises(ResponseTooLarge, match="body of"):  # refused from Content-Length
        await fetcher.get(f"https://huge.test{WELL_KNOWN}", max_bytes=2048, timeout=5)


async def test_plain_http_only_for_localhost_in_dev(devnet_config: Config) -> None:
    fetcher = Fetcher(devnet_config, DnsClient(devnet_config))
    try:
        with pytest.raises(InvalidData, match="H-WK-5"):
            await fetcher.get(f"http://alice.test{WELL_KNOWN}", max_bytes=2048, timeout=3)
    finally:
        await fetcher.aclose()


async def test_per_host_politeness_limits_and_forgets_hosts() -> None:
    gates = HostGates(2)
    inside: dict[str, int] = {"a": 0, "b": 0}
    peak: dict[str, int] = {"a": 0, "b": 0}

    async def request(host: str) -> None:
        async with gates.turn(host):
            inside[host] += 1
            peak[host] = max(peak[host], inside[host])
            await asyncio.sleep(0.01)
            inside[host] -= 1

    await asyncio.gather(*(request(h) for h in "aaaaabbbbb"))
    assert peak == {"a": 2, "b": 2}
    assert len(gates) == 0  # nothing kept for hosts no request is using


async def test_dev_mode_localhost_still_needs_the_allow_list() -> None:
    """D-WEB-3 lets development fetch `http://localhost:PORT`; it does not open loopback to
    every fetch (a redirect there included) unless `--allow-net` names it."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    async def answer(_: web.Request) -> web.Response:
        return web.Response(text="did:web:localhost")

    app = web.Application()
    app.router.add_get("/", answer)
    async with TestServer(app, host="127.0.0.1") as server:
        url = f"http://localhost:{server.port}/"
        closed = Config(dev=True)
        fetcher = Fetcher(closed, DnsClient(closed))
        try:
            with pytest.raises(ForbiddenAddress):
                await fetcher.get(url, max_bytes=2048, timeout=3)
        finally:
            await fetcher.aclose()
        opened = Config(dev=True, allow_nets=parse_networks(["127.0.0.1/32"]))
        fetcher = Fetcher(opened, DnsClient(opened))
        try:
            assert (await fetcher.get(url, max_bytes=2048, timeout=3)).status == 200
        finally:
            await fetcher.aclose()


async def test_a_hosts_addresses_are_asked_once_by_the_fetches_of_one_lookup(
    devnet: DevnetState,
) -> None:
    """A lookup fetches a host's well-known file and then its did.json: the A and AAAA
    asked for the first (still in flight, or answered within the last second) answer the
    second. Past a second they are asked again; a failure is shared only by those who
    waited for it, and the next caller asks again."""
    proxy = DnsProxy(devnet.knot_port)  # counts the queries that reach the DNS
    port = await proxy.start()
    try:
        dns = DnsClient(Config(dns_servers=(Nameserver("127.0.0.1", port),)))
        host = "u00001.bulk.test"
        together = await asyncio.gather(dns.addresses(host), dns.addresses(host))
        assert together == [["127.0.0.1"], ["127.0.0.1"]] and proxy.queries == 2
        assert await dns.addresses(host) == ["127.0.0.1"] and proxy.queries == 2
        await asyncio.sleep(1.1)
        assert await dns.addresses(host) == ["127.0.0.1"] and proxy.queries == 4
        failing = "_atproto.servfail.test"  # SERVFAIL for every type
        failures = await asyncio.gather(
            dns.addresses(failing), dns.addresses(failing), return_exceptions=True
        )
        assert all(isinstance(f, UpstreamFailure) for f in failures) and proxy.queries == 6
        with pytest.raises(UpstreamFailure):
            await dns.addresses(failing)
        assert proxy.queries == 8  # not kept: asked again
    finally:
        proxy.close()
