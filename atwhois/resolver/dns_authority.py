"""The DNS edge asked after a change (H-DNS-9): a zone's own authoritative nameservers.

A recursive resolver keeps an answer for its TTL, so a handle re-checked because something
says it changed would see the old TXT record through it until then. Here the zone is found
by asking the configured resolver (the closest enclosing name with NS records, or the owner
of the SOA record a negative answer carries), its nameservers' addresses pass the fetcher's
address guard, and the TXT question goes to them directly: no recursion asked, UDP then
TCP when truncated, answers over 16 KiB refused unread (H-DNS-8), all within `dns_timeout`.
Only an answer with the AA bit counts: anything else is not the zone speaking.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype

from .config import Config
from .dns import DnsClient
from .dns_wire import BoundedNameserver
from .errors import ForbiddenAddress, ResolutionError, UpstreamFailure, UpstreamTimeout
from .fetch import AddressGuard
from .response import AuthoritativeTxt

_NAMESERVERS_ASKED = 4  # of a zone's nameservers, in name order: enough to get past a dead one
# NS questions one re-check asks at most (H-DNS-9): a zone is found within a label or two of
# a name (a negative answer's SOA names it), but a zone whose negative answers carry no SOA
# would have the walk ask once per label, over 120 times for a name of 253 characters.
NS_QUESTIONS = 10
_PER_SERVER_TIMEOUT = 1.0


def zone_in(response: dns.message.Message, asked: dns.name.Name) -> dns.name.Name | None:
    """The zone an NS question's response places `asked` in: `asked` itself when it has NS
    records, else the owner of the SOA record a negative answer carries (None: neither)."""
    for rrset in response.answer:
        if rrset.rdtype == dns.rdatatype.NS and rrset.name == asked:
            return asked
    for rrset in response.authority:
        if rrset.rdtype == dns.rdatatype.SOA and asked.is_subdomain(rrset.name):
            return rrset.name
    return None


def nameservers_in(response: dns.message.Message, zone: dns.name.Name) -> list[str]:
    """The names of `zone`'s nameservers in an NS question's response, sorted."""
    hosts = {
        rdata.target.to_text(omit_final_dot=True)
        for rrset in response.answer
        if rrset.rdtype == dns.rdatatype.NS and rrset.name == zone
        for rdata in rrset
    }
    return sorted(hosts)


def authoritative_txt(
    server: str, request: dns.message.Message, response: dns.message.Message
) -> AuthoritativeTxt:
    """What an authoritative server's response says of the TXT records asked (H-DNS-9): the
    records, or the absence it states. Raises `UpstreamFailure` for an answer that is not
    the zone speaking: no AA bit (a lame delegation, a resolver), another rcode, or a CNAME
    (followed by the recursive resolver, not here)."""
    rcode = response.rcode()
    if not response.flags & dns.flags.AA:
        raise UpstreamFailure(f"{server} is not authoritative for the name (no AA bit)")
    name = request.question[0].name
    if rcode == dns.rcode.NXDOMAIN:
        return AuthoritativeTxt(server, [], f"{name}: NXDOMAIN", response)
    if rcode != dns.rcode.NOERROR:
        raise UpstreamFailure(f"{server} answered {dns.rcode.to_text(rcode)}")
    for rrset in response.answer:
        if rrset.name == name and rrset.rdtype == dns.rdatatype.TXT:
            return AuthoritativeTxt(server, [list(r.strings) for r in rrset], None, response)
        if rrset.name == name and rrset.rdtype == dns.rdatatype.CNAME:
            raise UpstreamFailure(f"{server} answers with a CNAME (not followed here)")
    return AuthoritativeTxt(server, [], f"{name}: no TXT record (NODATA)", response)


@dataclass(frozen=True, slots=True)
class _Server:
    host: str
    address: str

    def __str__(self) -> str:
        return f"{self.host} ({self.address})"


class Authority:
    """The TXT records at a name, as the zone's authoritative nameservers answer them."""

    def __init__(self, config: Config, dns_client: DnsClient, guard: AddressGuard) -> None:
        self._dns = dns_client
        self._guard = guard
        self._port = config.dns_authoritative_port
        self._deadline = config.dns_timeout
        self._dnssec = config.dnssec

    async def aclose(self) -> None:
        """Nothing is kept open (the resolver closes the DNS client it shares)."""

    async def txt_answer(self, name: str) -> AuthoritativeTxt:
        """The first authoritative answer among the zone's nameservers. Raises a
        `ResolutionError`: `UpstreamTimeout` past the deadline, `UpstreamFailure` when no
        nameserver answered as the zone, `ForbiddenAddress` when every address was refused."""
        asked = dns.name.from_text(name)
        try:
            async with asyncio.timeout(self._deadline):
                return await self._ask_zone(asked)
        except TimeoutError:
            raise UpstreamTimeout(
                f"{name}: no authoritative answer within {self._deadline}s"
            ) from None

    async def _ask_zone(self, asked: dns.name.Name) -> AuthoritativeTxt:
        hosts = await self._nameservers(asked)
        why: list[str] = []
        forbidden = 0  # nameservers whose every address the guard refused
        for host in hosts[:_NAMESERVERS_ASKED]:
            try:
                addresses = await self._guard.addresses(host)
            except ResolutionError as err:
                forbidden += isinstance(err, ForbiddenAddress)
                why.append(str(err))
                continue
            for address in addresses:
                server = _Server(host, address)
                try:
                    return await self._ask(server, asked)
                except (ResolutionError, dns.exception.DNSException, OSError, EOFError) as err:
                    why.append(f"{server}: {err or type(err).__name__}")
        reasons = "; ".join(why)
        if forbidden == len(why) > 0:
            raise ForbiddenAddress(f"{asked}: the zone's nameservers: {reasons}")
        raise UpstreamFailure(f"{asked}: no nameserver of the zone answered ({reasons})")

    async def _nameservers(self, asked: dns.name.Name) -> list[str]:
        """The zone's nameservers, found through the configured resolver in at most
        `NS_QUESTIONS` questions."""
        candidate, questions = asked, 0
        while questions < NS_QUESTIONS:
            response = await self._dns.ask(candidate, dns.rdatatype.NS)
            questions += 1
            zone = zone_in(response, candidate)
            if zone is not None and (zone == candidate or questions < NS_QUESTIONS):
                if zone != candidate:
                    response = await self._dns.ask(zone, dns.rdatatype.NS)
                hosts = nameservers_in(response, zone)
                if hosts:
                    return hosts
                raise UpstreamFailure(f"{asked}: the zone {zone} names no nameserver")
            if candidate == dns.name.root:
                raise UpstreamFailure(f"{asked}: no zone found above it")
            candidate = candidate.parent()
        raise UpstreamFailure(f"{asked}: no zone found within {NS_QUESTIONS} NS questions")

    async def _ask(self, server: _Server, asked: dns.name.Name) -> AuthoritativeTxt:
        request = dns.message.make_query(asked, dns.rdatatype.TXT, want_dnssec=self._dnssec)
        request.flags &= ~dns.flags.RD  # the zone's own answer, no recursion
        nameserver = BoundedNameserver(server.address, self._port)
        timeout = min(_PER_SERVER_TIMEOUT, self._deadline)
        try:
            response = await nameserver.async_query(request, timeout, None, 0, False, None)
        except dns.message.Truncated:
            response = await nameserver.async_query(request, timeout, None, 0, True, None)
        return authoritative_txt(str(server), request, response)
