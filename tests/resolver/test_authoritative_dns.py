"""H-DNS-9/10: a handle re-checked because something says it changed asks its TXT of the
zone's own nameservers too, past a recursive resolver that keeps the old answer; a plain
lookup keeps asking the recursive resolver.

The network tests put the test network's caching resolver (Debian's unbound, which keeps
every answer an hour: `devnet.unbound`) between atwhois and Knot, and change the zone.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import dns.flags
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset
import httpx
import pytest

from atwhois.cache import CachedResolver, MemoryStore
from atwhois.cache.revalidate import Revalidator
from atwhois.resolver import Config, Identity, Outcome, Resolver, Status
from atwhois.resolver.config import Nameserver
from atwhois.resolver.dns import DnsClient
from atwhois.resolver.dns_authority import authoritative_txt, nameservers_in, zone_in
from atwhois.resolver.errors import UpstreamFailure, UpstreamTimeout
from atwhois.resolver.response import AuthoritativeTxt
from atwhois.testing import World
from devnet.atwhois import daemon_here
from devnet.network import DevnetState
from devnet.plc_ops import PlcAccount, new_handle
from devnet.unbound import HELD_SECONDS
from tests.support.http import TOKEN, XRPC
from tests.support.waiting import eventually

NAME = "_atproto.alice.example.com."

# --- the pure rules over DNS messages --------------------------------------------------


def _response(
    qtype: str = "TXT", *, aa: bool = True, rcode: int = dns.rcode.NOERROR
) -> tuple[dns.message.Message, dns.message.Message]:
    request = dns.message.make_query(NAME, qtype)
    response = dns.message.make_response(request)
    if aa:
        response.flags |= dns.flags.AA
    response.set_rcode(rcode)
    return request, response


def test_an_authoritative_answer_gives_its_records_or_the_absence_it_states() -> None:
    request, response = _response()
    response.answer.append(dns.rrset.from_text(NAME, 60, "IN", "TXT", '"did=" "did:plc:abc"'))
    answer = authoritative_txt("ns1 (192.0.2.1)", request, response)
    assert answer.records == [[b"did=", b"did:plc:abc"]] and answer.absent is None
    assert answer.server == "ns1 (192.0.2.1)" and answer.response is response

    request, response = _response(rcode=dns.rcode.NXDOMAIN)
    assert authoritative_txt("ns1", request, response).absent == f"{NAME}: NXDOMAIN"
    request, response = _response()
    assert "NODATA" in (authoritative_txt("ns1", request, response).absent or "")


@pytest.mark.parametrize(
    ("aa", "rcode", "cname", "why"),
    [
        (False, dns.rcode.NOERROR, False, "not authoritative"),  # a resolver, a lame server
        (True, dns.rcode.SERVFAIL, False, "SERVFAIL"),
        (True, dns.rcode.REFUSED, False, "REFUSED"),
        (True, dns.rcode.NOERROR, True, "CNAME"),
    ],
)
def test_what_is_not_the_zone_speaking_is_a_failure_never_an_absence(
    aa: bool, rcode: int, cname: bool, why: str
) -> None:
    request, response = _response(aa=aa, rcode=rcode)
    if cname:
        response.answer.append(dns.rrset.from_text(NAME, 60, "IN", "CNAME", "elsewhere.example."))
    with pytest.raises(UpstreamFailure, match=why):
        authoritative_txt("ns1", request, response)


def test_the_zone_is_the_name_with_ns_records_or_the_owner_of_a_negative_answers_soa() -> None:
    asked = dns.name.from_text("alice.example.com.")
    request = dns.message.make_query(asked, "NS")
    response = dns.message.make_response(request)
    response.answer.append(
        dns.rrset.from_text(asked, 60, "IN", "NS", "b.ns.example.", "a.ns.example.")
    )
    assert zone_in(response, asked) == asked
    assert nameservers_in(response, asked) == ["a.ns.example", "b.ns.example"]

    negative = dns.message.make_response(dns.message.make_query(NAME, "NS"))
    soa = "ns.example. host.example. 1 3600 600 86400 60"
    negative.authority.append(dns.rrset.from_text("example.com.", 60, "IN", "SOA", soa))
    assert zone_in(negative, dns.name.from_text(NAME)) == dns.name.from_text("example.com.")
    # an SOA of a zone the name is not in says nothing of it
    assert zone_in(negative, dns.name.from_text("other.org.")) is None
    assert nameservers_in(negative, dns.name.from_text("example.com.")) == []


# --- with the fake world: which lookups ask the zone -------------------------------------


async def test_a_refresh_sees_past_a_resolver_holding_the_old_record() -> None:
    world = World()
    did = world.add("alice.example.com")
    world.hold_dns()
    other = world.add("bob.example.com")
    world.change_handle(other, "alice.example.com")  # its TXT names the other DID
    async with world.resolver() as resolver:
        plain = await resolver.lookup("alice.example.com")
        assert plain.did == did and plain.dns.via is None  # the resolver's answer
        assert world.asked["dns_authority"] == 0
        fresh = await resolver.refresh("alice.example.com")
    assert fresh.status == Status.VERIFIED and fresh.did == other
    assert "dns_stale_resolver" in fresh.warnings
    assert fresh.dns.via == "the zone's nameserver ns.world.example (atwhois.testing)"
    assert fresh.dns.stale_resolver == f"did={did}"
    assert world.asked["dns_authority"] == 1


async def test_a_resolver_in_agreement_is_no_warning_and_the_setting_turns_it_off() -> None:
    world = World()
    world.add("alice.example.com")
    async with world.resolver() as resolver:
        agreed = await resolver.refresh("alice.example.com")
    assert agreed.status == Status.VERIFIED and "dns_stale_resolver" not in agreed.warnings
    assert agreed.dns.via is not None and agreed.dns.stale_resolver is None

    world.hold_dns()
    world.remove_handle("alice.example.com")
    async with world.resolver(world.config(dns_authoritative=False)) as resolver:
        held = await resolver.refresh("alice.example.com")
    assert held.status == Status.VERIFIED and held.dns.via is None
    assert world.asked["dns_authority"] == 1  # the one above, none with the setting off


async def test_a_record_the_resolver_has_not_seen_yet_is_found_at_the_zone() -> None:
    """The resolver keeps an absence (a handle looked up before its owner published it),
    then records of two values: what it said is named, "no record" for none."""
    world = World()
    world.hold_dns()
    did = world.add("alice.example.com")
    async with world.resolver() as resolver:
        assert (await resolver.lookup("alice.example.com")).status == Status.HANDLE_NOT_FOUND
        found = await resolver.refresh("alice.example.com")
        assert found.status == Status.VERIFIED and found.did == did
        assert found.dns.stale_resolver == "no record"
        world.txt["_atproto.alice.example.com"].append("note=kept")  # H-DNS-2: ignored
        world.hold_dns()  # the resolver keeps both values now
        world.change_handle(world.add("bob.example.com"), "alice.example.com")
        moved = await resolver.refresh("alice.example.com")
    assert moved.did != did and moved.dns.stale_resolver == f"did={did}, note=kept"


async def test_a_record_removed_at_the_zone_is_absent_whatever_the_resolver_keeps() -> None:
    world = World()
    world.add("alice.example.com")
    world.hold_dns()
    world.remove_handle("alice.example.com")
    async with world.resolver() as resolver:
        assert (await resolver.lookup("alice.example.com")).status == Status.VERIFIED
        gone = await resolver.refresh("alice.example.com")
    assert gone.status == Status.HANDLE_NOT_FOUND
    assert gone.dns.outcome == Outcome.NOT_FOUND
    assert gone.dns.stale_resolver is not None


class _Unreachable:
    """A zone whose nameservers do not answer in time."""

    async def txt_answer(self, name: str) -> AuthoritativeTxt:
        raise UpstreamTimeout(f"{name}: no authoritative answer within 1s")

    async def aclose(self) -> None:
        pass


async def test_a_zone_that_cannot_be_asked_leaves_the_resolvers_answer_standing() -> None:
    world = World()
    did = world.add("alice.example.com")
    async with world.resolver(authority=_Unreachable()) as resolver:
        report = await resolver.refresh("alice.example.com")
    assert report.status == Status.VERIFIED and report.did == did
    assert report.dns.via is not None and "not" in report.dns.via
    assert "no authoritative answer" in report.dns.via
    assert "dns_stale_resolver" not in report.warnings


async def test_the_cache_asks_the_zone_on_refresh_only() -> None:
    world = World()
    world.add("alice.example.com")
    world.hold_dns()
    other = world.add("bob.example.com")
    world.change_handle(other, "alice.example.com")
    clock = [1000.0]
    async with world.cached(clock=lambda: clock[0]) as cached:
        await cached.lookup("alice.example.com")
        clock[0] += 10_000  # stale: served while one background refresh runs
        await cached.lookup("alice.example.com")
        await cached.settled()
        assert world.asked["dns_authority"] == 0  # no one said it changed
        report = await cached.refresh("alice.example.com")
        assert report.did == other and world.asked["dns_authority"] == 1
        assert (await cached.lookup("alice.example.com")).did == other  # and it is what is kept


# --- on the test network, behind a resolver that keeps answers an hour -------------------


def _txt_ttl(server: str, name: str) -> int:
    host, port = server.rsplit(":", 1)
    answer = dns.query.udp(dns.message.make_query(name, "TXT"), host, port=int(port), timeout=2)
    return answer.answer[0].ttl


def _two_accounts(devnet: DevnetState, tag: str) -> tuple[str, str, str]:
    """A handle whose TXT names one DID, and a second DID declaring it too (the fix)."""
    handle = new_handle(tag)
    old, new = PlcAccount(devnet.plc_url, handle).did, PlcAccount(devnet.plc_url, handle).did
    devnet.set_txt(handle, [f"did={old}"])
    return handle, old, new


async def test_refresh_and_a_claim_see_past_the_caching_resolver(devnet: DevnetState) -> None:
    """A resolver holding the old TXT (its TTL is 60 s; it keeps it an hour): a plain
    lookup through it still shows the old binding; `refresh` and a claim after an
    `#identity` event answer the new one within a second, naming the zone's nameserver."""
    handle, old, new = _two_accounts(devnet, "stale")
    config = devnet.config(dns_servers=(Nameserver.parse(devnet.dns_server_caching),))
    async with Resolver(config) as resolver:
        assert (await resolver.lookup(handle)).did == old
        devnet.set_txt(handle, [f"did={new}"])

        plain = await resolver.lookup(handle)
        assert plain.did == old, plain.dns  # the resolver really caches ...
        ttl = _txt_ttl(devnet.dns_server_caching, f"_atproto.{handle}.")
        assert 60 < ttl <= HELD_SECONDS  # ... past the zone's TTL of 60 s

        fresh = await resolver.refresh(handle)
    assert fresh.status == Status.VERIFIED and fresh.did == new, fresh.dns
    assert fresh.dns.via == "the zone's nameserver ns.test (127.0.0.1)"
    assert fresh.dns.stale_resolver == f"did={old}"
    assert "dns_stale_resolver" in fresh.warnings

    # A claim after `#identity`: an account takes a handle whose TXT named another account
    # (which the resolver keeps), and its event names the handle.
    first, other = new_handle("claim"), new_handle("claimed")
    account = PlcAccount(devnet.plc_url, first)
    earlier = PlcAccount(devnet.plc_url, other).did
    devnet.set_txts({first: [f"did={account.did}"], other: [f"did={earlier}"]})
    async with CachedResolver(Resolver(config), MemoryStore()) as cached:
        assert (await cached.lookup(account.did)).status == Status.VERIFIED
        assert (await resolver_lookup(config, other)).did == earlier  # now kept by the resolver
        account.set_handle(other)
        devnet.set_txt(other, [f"did={account.did}"])
        revalidator = Revalidator(cached)
        await revalidator.claimed(account.did, other, "#identity seq 12 from the PDS")
        await eventually(lambda: not revalidator._running, 10)
        # settled by its first re-check (the zone's answer), not by re-checks until the
        # resolver's held answer expires
        assert revalidator.revalidations == 1
        report = await cached.lookup(account.did)
        await revalidator.stop()
        assert (await resolver_lookup(config, other)).did == earlier  # still kept there
    assert report.status == Status.VERIFIED and report.declared_handle == other, report.dns
    assert report.dns.via == "the zone's nameserver ns.test (127.0.0.1)"
    assert report.dns.stale_resolver == f"did={earlier}"


async def resolver_lookup(config: Config, identifier: str) -> Identity:
    async with Resolver(config) as resolver:
        return await resolver.lookup(identifier)


async def test_the_zones_nameservers_pass_the_address_guard(devnet: DevnetState) -> None:
    """ns.test is 127.0.0.1: without a setting that allows loopback, the zone is not asked,
    and the resolver's answer stands, saying why (never an absence, never a failure)."""
    handle, old, new = _two_accounts(devnet, "guarded")
    config = devnet.config(dns_servers=(Nameserver.parse(devnet.dns_server_caching),))
    async with Resolver(config) as resolver:
        await resolver.lookup(handle)
    devnet.set_txt(handle, [f"did={new}"])
    async with Resolver(dataclasses.replace(config, allow_nets=())) as guarded:
        report = await guarded.refresh(handle)
    dns_evidence = report.dns
    assert dns_evidence.outcome == Outcome.OK and dns_evidence.did == old
    assert dns_evidence.via is not None and "forbidden addresses (127.0.0.1)" in dns_evidence.via


def test_refresh_identity_at_the_daemon(devnet: DevnetState, tmp_path: Path) -> None:
    """`refreshIdentity` through a daemon whose resolver is the caching one: the new binding
    at once, its evidence naming the zone's nameserver; a plain resolve before it still
    answered the old one."""
    handle, old, new = _two_accounts(devnet, "daemon")
    env = {**devnet.env(), "ATWHOIS_DNS_SERVER": devnet.dns_server_caching}
    args = ("--cache", "memory:", "--refresh-token", TOKEN)
    with daemon_here(env, tmp_path / "serve.log", *args) as daemon:
        resolve = daemon.url + XRPC + "resolveHandle"
        assert httpx.get(resolve, params={"handle": handle}).json()["did"] == old
        devnet.set_txt(handle, [f"did={new}"])
        refreshed = httpx.post(
            daemon.url + XRPC + "refreshIdentity",
            json={"identifier": handle},
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        )
        assert refreshed.status_code == 200, refreshed.text
        assert refreshed.json()["did"] == new, refreshed.json()
        report = httpx.get(daemon.url + f"/v1/identity/{handle}").json()
    assert report["did"] == new
    assert report["evidence"]["dns"]["via"] == "the zone's nameserver ns.test (127.0.0.1)"
    assert report["evidence"]["dns"]["stale_resolver"] == f"did={old}"
    assert "dns_stale_resolver" in report["warnings"]


async def test_a_deep_name_costs_ten_ns_questions_at_most(
    devnet: DevnetState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """H-DNS-9 (issue 66): a zone whose negative answers carry no SOA (the forging resolver
    drops it) had the walk ask an NS question a label: a refused token naming a deep handle
    cost over a hundred. Ten at most; past them the zone is not heard, and the resolver's
    answer stands, saying why (H-DNS-10)."""
    suffix = f"deep{os.urandom(4).hex()}.test"
    handle = ".".join(["a"] * 40) + "." + suffix
    alice = devnet.did("alice")
    devnet.set_txt(handle, [f"did={alice}"])
    asked: list[dns.name.Name] = []
    ask = DnsClient.ask

    async def counting(
        client: DnsClient, name: dns.name.Name, rdtype: dns.rdatatype.RdataType
    ) -> dns.message.Message:
        if rdtype == dns.rdatatype.NS:
            asked.append(name)
        return await ask(client, name, rdtype)

    monkeypatch.setattr(DnsClient, "ask", counting)
    devnet.set_forgeries({f"*.{suffix}. NS": [{"drop_soa": True}]})
    config = devnet.config(dns_servers=(Nameserver.parse(devnet.dns_server_forging),))
    try:
        async with Resolver(config) as resolver:
            report = await resolver.refresh(handle)
    finally:
        devnet.set_forgeries({})
    assert len(asked) == 10, [str(name) for name in asked]
    assert report.dns.outcome == Outcome.OK and report.dns.did == alice
    assert report.dns.via is not None and "within 10 NS questions" in report.dns.via
