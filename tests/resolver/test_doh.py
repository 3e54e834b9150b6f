"""DNS over HTTPS as the upstream (`resolver.doh`): the test network's dnsdist, a real DoH
server in front of the same DNS proxy, answers lookups, DNSSEC walks and failures as port 53
does; a DoH server that is gone, or that answers what no DoH server may, is a transient
failure of that server, and the fallbacks are asked."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from atwhois.resolver import Config, Outcome, Resolver, Status
from atwhois.resolver.config import Nameserver
from atwhois.resolver.errors import InvalidInput
from devnet import dnssec as island
from devnet.atwhois import run
from devnet.network import DevnetState
from devnet.pds import free_port


def _doh(devnet: DevnetState, *servers: str, **changes: object) -> Config:
    return devnet.config(dns_servers=tuple(Nameserver.parse(s) for s in servers), **changes)


def test_a_doh_server_is_given_by_its_https_url_and_nothing_else() -> None:
    server = Nameserver.parse("https://dns.example/dns-query")
    assert (server.host, server.port, str(server)) == (
        "dns.example",
        443,
        "https://dns.example/dns-query",
    )
    assert Nameserver.parse("https://127.0.0.1:8443/q").port == 8443
    for bad in ("http://dns.example/dns-query", "https:///dns-query", "https://dns.example:x/q"):
        with pytest.raises(InvalidInput, match="DNS server"):
            Nameserver.parse(bad)


async def test_lookups_over_doh_give_what_lookups_over_port_53_give(devnet: DevnetState) -> None:
    """The same verdicts and DNS evidence over dnsdist's DoH as over the proxy, for answers,
    absences, an ambiguous name and a SERVFAIL; DNSSEC through DoH too (DO passes)."""
    handles = ["alice.test", "dupe.test", "two-dids.test", "no-did.test", "servfail.test"]
    handles.append(island.handle(island.NSEC3_ZONE))
    async with (
        Resolver(_doh(devnet, devnet.doh_url, dnssec=True)) as over_doh,
        Resolver(_doh(devnet, devnet.dns_server, dnssec=True)) as over_53,
    ):
        for handle in handles:
            doh, plain = await over_doh.lookup(handle), await over_53.lookup(handle)
            assert (doh.status, doh.dns.outcome, doh.dns.dids) == (
                plain.status,
                plain.dns.outcome,
                plain.dns.dids,
            ), handle
            assert doh.dns.dnssec == plain.dns.dnssec
    assert doh.dns.dnssec is not None and doh.dns.dnssec.state == "secure"


async def test_a_doh_server_that_is_gone_fails_over_to_the_fallback(devnet: DevnetState) -> None:
    gone = f"https://127.0.0.1:{free_port()}/dns-query"
    async with Resolver(_doh(devnet, gone)) as alone:
        identity = await alone.lookup("sam.dnssec.test")
        assert identity.dns.outcome is Outcome.FAILED and identity.status is Status.UNAVAILABLE
        assert gone in (identity.dns.error or "")
    config = dataclasses.replace(
        _doh(devnet, gone), dns_fallback_servers=(Nameserver.parse(devnet.doh_url),)
    )
    async with Resolver(config) as with_fallback:
        assert (await with_fallback.lookup("sam.dnssec.test")).verified


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def hostile_doh() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    """A misbehaving DoH server on loopback, over plain HTTP (the client's handling of what
    it answers is under test, over real sockets; configuration accepts only https URLs)."""
    runners: list[web.AppRunner] = []

    async def serve(handler: Handler) -> str:
        app = web.Application()
        app.router.add_post("/dns-query", handler)
        runner = web.AppRunner(app, shutdown_timeout=0.2)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        return f"http://127.0.0.1:{port}/dns-query"

    yield serve
    for runner in runners:
        await runner.cleanup()  # a handler still sleeping is not waited for


def _slowly() -> web.Response:
    raise TimeoutError  # stands for "never answers": the handler sleeps instead


REPLIES: dict[str, tuple[Callable[[], web.Response], str]] = {
    "an error status": (lambda: web.Response(status=503), "HTTP 503"),
    "an HTML page": (lambda: web.Response(text="<html>", content_type="text/html"), "text/html"),
    "too large": (
        lambda: web.Response(body=b"\0" * 70_000, content_type="application/dns-message"),
        "over 16,384 [H-DNS-8]",
    ),
    "not DNS": (
        lambda: web.Response(body=b"\1\2\3", content_type="application/dns-message"),
        "no DNS message",
    ),
    "no answer": (_slowly, "no DNS answer within"),
}


@pytest.mark.parametrize("name", list(REPLIES))
async def test_a_doh_server_answering_nonsense_is_a_transient_failure_named(
    devnet: DevnetState, hostile_doh: Callable[[Handler], Awaitable[str]], name: str
) -> None:
    """Each a classified failure of that server (never a crash, never an absence), its
    reason in the evidence; with a good server after it, the good one answers."""
    reply, reason = REPLIES[name]

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        if reply is _slowly:
            await asyncio.sleep(30)  # cancelled when the test's server closes
        return reply()

    url = await hostile_doh(handler)
    from atwhois.resolver.dns import DnsClient
    from atwhois.resolver.doh import DohNameserver

    # two servers configured: each gets half of the DNS deadline
    config = _doh(devnet, devnet.doh_url, devnet.doh_url, dns_timeout=2.0)
    client = DnsClient(config)
    hostile, good = (
        DohNameserver(url, None, "test"),
        DohNameserver(devnet.doh_url, devnet.ca_file, "t"),
    )
    client._resolver.nameservers = [hostile]
    async with Resolver(config, dns=client) as resolver:
        identity = await resolver.lookup("alice.test")
        assert identity.dns.outcome is Outcome.FAILED, name
        assert reason in (identity.dns.error or ""), identity.dns.error
        assert identity.status is Status.UNAVAILABLE  # the web host's address is asked there too
        client._resolver.nameservers = [hostile, good]
        assert (await resolver.lookup("sam.dnssec.test")).verified


def test_the_command_line_takes_a_doh_url_as_its_dns_server(
    devnet: DevnetState, devnet_env: dict[str, str]
) -> None:
    env = {**devnet_env, "ATWHOIS_DNS_SERVER": devnet.doh_url}
    code, out, err = run(["lookup", "--dnssec", "sam.dnssec.test"], env=env)
    assert code == 0 and "dnssec  secure" in out and devnet.doh_url not in err, err
    code, out, err = run(["config", "show"], env=env)
    assert devnet.doh_url in out
