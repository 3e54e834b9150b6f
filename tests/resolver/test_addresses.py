"""H-WK-9: an IPv6 address that carries an IPv4 one is judged by the IPv4 it carries, in
every form a gateway translates (NAT64 at each RFC 6052 length, IPv4-mapped, -compatible,
-translated, 6to4, Teredo's server and client), for every consumer of the guard: the
fetcher (well-known, did:web, documents), the PDS check and the zone's nameservers."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

import dns.message
import dns.name
import dns.rdatatype
import dns.rrset
import pytest

from atwhois.resolver import Config
from atwhois.resolver.addresses import embedded_ipv4, nat64_prefix
from atwhois.resolver.dns import DnsClient
from atwhois.resolver.dns_authority import Authority
from atwhois.resolver.errors import ForbiddenAddress, InvalidInput
from atwhois.resolver.fetch import AddressGuard, Fetcher
from atwhois.resolver.identity import INVALID
from atwhois.resolver.pds import check_pds

IPv4, IPv6 = ipaddress.IPv4Address, ipaddress.IPv6Address
# RFC 6052 section 2.4's prefixes, one of each length (they nest: each test takes one)
RFC_PREFIXES = {
    32: "2001:db8::/32",
    40: "2001:db8:100::/40",
    48: "2001:db8:122::/48",
    56: "2001:db8:122:300::/56",
    64: "2001:db8:122:344::/64",
    96: "2001:db8:122:344::/96",
}
# an operator's prefixes, apart from each other (RFC 9637's documentation range)
OPERATOR = {
    length: nat64_prefix(
        str(ipaddress.IPv6Network((f"3fff:{length:x}00:1:2:3:4::", length), strict=False))
    )
    for length in (32, 40, 48, 56, 64, 96)
}
TEREDO_SERVER = IPv4("65.54.227.120")  # RFC 4380's example server: public


def placed(prefix: ipaddress.IPv6Network, v4: IPv4) -> IPv6:
    """`v4` inside `prefix` bit by bit as RFC 6052 section 2.2 draws it (bits 64-71, the
    u octet, stay zero): written apart from the code's own arithmetic."""
    bits = int(prefix.network_address)
    for i in range(32):
        at = prefix.prefixlen + i
        if prefix.prefixlen < 96 and at >= 64:
            at += 8
        if int(v4) >> (31 - i) & 1:
            bits |= 1 << (127 - at)
    return IPv6(bits)


def teredo(server: IPv4, client: IPv4) -> IPv6:
    """A Teredo address (RFC 4380): the prefix, the server, flags and port, the client
    inverted."""
    return IPv6((0x20010000 << 96) | (int(server) << 64) | (0xFFFF_FFFF ^ int(client)))


FORMS: dict[str, Callable[[IPv4], IPv6]] = {
    "mapped": lambda v4: IPv6(f"::ffff:{v4}"),
    "compatible": lambda v4: IPv6(f"::{v4}"),
    "translated (SIIT)": lambda v4: IPv6(f"::ffff:0:{v4}"),
    "NAT64 64:ff9b::/96": lambda v4: IPv6(f"64:ff9b::{v4}"),
    "NAT64 64:ff9b:1::/48": lambda v4: placed(ipaddress.IPv6Network("64:ff9b:1::/48"), v4),
    **{
        f"operator NAT64 /{length}": (lambda p: lambda v4: placed(p, v4))(prefix)
        for length, prefix in OPERATOR.items()
    },
    "6to4": lambda v4: IPv6((0x2002 << 112) | (int(v4) << 80) | 1),
    "Teredo server": lambda v4: teredo(v4, IPv4("8.8.4.4")),
    "Teredo client": lambda v4: teredo(TEREDO_SERVER, v4),
}
# what may not be reached, by the range it is in
REFUSED = {
    "metadata": IPv4("169.254.169.254"),
    "private": IPv4("10.0.0.1"),
    "loopback": IPv4("127.0.0.1"),
    "link-local": IPv4("169.254.10.20"),
}
CASES = [(form, kind) for form in FORMS for kind in REFUSED]


def config() -> Config:
    return Config(nat64_prefixes=tuple(OPERATOR.values()))


@pytest.mark.parametrize(
    ("length", "address"),
    [  # RFC 6052 section 2.4's table: 192.0.2.33 at each length
        (32, "2001:db8:c000:221::"),
        (40, "2001:db8:1c0:2:21::"),
        (48, "2001:db8:122:c000:2:2100::"),
        (56, "2001:db8:122:3c0:0:221::"),
        (64, "2001:db8:122:344:c0:2:2100:0"),
        (96, "2001:db8:122:344::c000:221"),
    ],
)
def test_rfc_6052s_own_examples(length: int, address: str) -> None:
    prefix = nat64_prefix(RFC_PREFIXES[length])
    assert embedded_ipv4(IPv6(address), (prefix,)) == (IPv4("192.0.2.33"),)
    assert placed(prefix, IPv4("192.0.2.33")) == IPv6(address)


def test_nested_prefixes_each_say_what_an_address_carries() -> None:
    """An address inside two of the operator's prefixes is judged by both readings."""
    nested = tuple(nat64_prefix(p) for p in RFC_PREFIXES.values())
    address = placed(nested[1], REFUSED["private"])  # made with the /40
    carried = embedded_ipv4(address, nested)
    assert REFUSED["private"] in carried and len(carried) == 2  # the /32 reads it too


def test_an_operators_prefix_has_one_of_rfc_6052s_lengths() -> None:
    for bad in ("2001:db8::/33", "2001:db8::/128", "10.0.0.0/8", "nonsense"):
        with pytest.raises(InvalidInput, match="NAT64 prefix"):
            nat64_prefix(bad)
    # without the setting, an operator's prefix is an ordinary address
    assert embedded_ipv4(placed(OPERATOR[64], REFUSED["private"])) == ()


@pytest.mark.parametrize(("form", "kind"), CASES)
def test_the_guard_judges_an_address_by_the_ipv4_it_carries(form: str, kind: str) -> None:
    address = FORMS[form](REFUSED[kind])
    assert REFUSED[kind] in embedded_ipv4(address, config().nat64_prefixes)
    guard = AddressGuard(config(), DnsClient(config()))
    assert not guard.permits(address), f"{form} of the {kind} address {address}"
    public = FORMS[form](IPv4("8.8.8.8"))  # the same form of a public address reaches it
    assert guard.permits(public), f"{form} of 8.8.8.8: {public}"


def test_an_allowed_range_is_allowed_in_every_form() -> None:
    """`allow_net` names IPv4 ranges; they are reached through a gateway as well."""
    allowing = Config(
        nat64_prefixes=tuple(OPERATOR.values()),
        allow_nets=(ipaddress.ip_network("10.0.0.0/8"),),
    )
    guard = AddressGuard(allowing, DnsClient(allowing))
    for form in FORMS.values():
        assert guard.permits(form(REFUSED["private"]))
        assert not guard.permits(form(REFUSED["loopback"]))


class Answers(DnsClient):
    """DNS that gives every host one address, and makes `zone.example` a zone whose
    nameserver is `ns.zone.example`."""

    def __init__(self, config: Config, address: IPv6) -> None:
        super().__init__(config)
        self.address = address
        self.asked_addresses: list[str] = []

    async def addresses(self, host: str) -> list[str]:
        self.asked_addresses.append(host)
        return [str(self.address)]

    async def ask(
        self, name: dns.name.Name, rdtype: dns.rdatatype.RdataType
    ) -> dns.message.Message:
        response = dns.message.make_response(dns.message.make_query(name, rdtype))
        zone = dns.name.from_text("zone.example")
        if name == zone and rdtype == dns.rdatatype.NS:
            response.answer.append(dns.rrset.from_text(zone, 300, "IN", "NS", "ns.zone.example."))
        else:
            soa = "ns.zone.example. admin.zone.example. 1 3600 600 86400 300"
            response.authority.append(dns.rrset.from_text(zone, 300, "IN", "SOA", soa))
        return response


def _host(form: str, kind: str) -> str:
    """A host of the case's own: the process's pace of one host, shared by every case,
    would hold each case's request a turn behind the last one's."""
    return re.sub(r"[^a-z0-9]+", "-", f"{form} {kind}".lower()).strip("-") + ".example"


@pytest.mark.parametrize(("form", "kind"), CASES)
async def test_the_fetcher_never_connects_to_a_carried_private_address(
    form: str, kind: str
) -> None:
    address = FORMS[form](REFUSED[kind])
    fetcher = Fetcher(config(), Answers(config(), address))
    try:
        for url in (
            f"https://{_host(form, kind)}/.well-known/atproto-did",
            f"https://[{address}]/",
        ):
            with pytest.raises(ForbiddenAddress, match="forbidden"):
                await fetcher.get(url, max_bytes=1024, timeout=2)
    finally:
        await fetcher.aclose()


@pytest.mark.parametrize(("form", "kind"), CASES)
async def test_the_pds_check_never_reaches_a_carried_private_address(form: str, kind: str) -> None:
    address = FORMS[form](REFUSED[kind])
    fetcher = Fetcher(config(), Answers(config(), address))

    async def no_earlier_keys() -> tuple[str, ...]:
        return ()

    try:
        check = await check_pds(
            fetcher, f"https://{_host(form, kind)}", "did:plc:x", None, no_earlier_keys, timeout=2
        )
    finally:
        await fetcher.aclose()
    assert check.outcome == INVALID and "forbidden addresses" in (check.error or "")


@pytest.mark.parametrize(("form", "kind"), CASES)
async def test_the_zones_nameservers_are_not_asked_at_a_carried_private_address(
    form: str, kind: str
) -> None:
    address = FORMS[form](REFUSED[kind])
    answers = Answers(config(), address)
    authority = Authority(config(), answers, AddressGuard(config(), answers))
    with pytest.raises(ForbiddenAddress, match=f"forbidden addresses \\({address}\\)"):
        await authority.txt_answer("_atproto.alice.zone.example")
    assert answers.asked_addresses == ["ns.zone.example"]  # found, judged, never asked
