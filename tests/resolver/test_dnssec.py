"""DNSSEC evidence for the TXT answer (`resolver.dnssec`, `resolver.dnssec_chain`): the rules
on zones signed here with dnspython, then the test network's island of zones under
`dnssec.test.` (Knot signs them; `devnet.dnssec`): secure, insecure by NSEC and by NSEC3,
bogus, a resolver that strips DNSSEC records, the walk kept and asked again when its TTLs
run out, a delegation that changes between audits."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import dns.dnssec
import dns.flags
import dns.message
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import dns.zone
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from atwhois.audit import Auditor, AuditStore, Watched
from atwhois.cache import CachedResolver, MemoryStore
from atwhois.cli.render import render_text
from atwhois.resolver import Config, Resolver, Status
from atwhois.resolver.config import Nameserver
from atwhois.resolver.dnssec import (
    Budget,
    Signed,
    ZoneKeys,
    closest_anchor,
    keys_named,
    parse_anchors,
    signed_rrsets,
    strips_dnssec,
    usable_ds,
    verify,
    verify_keyset,
    wildcard_source,
)
from atwhois.resolver.dnssec_chain import DnssecChain
from atwhois.resolver.dnssec_denial import (
    NO_DELEGATION,
    PROVEN,
    UNSIGNED_DELEGATION,
    covers,
    ds_denial,
    wildcard_denial,
)
from atwhois.resolver.errors import DnssecBogus, InvalidInput, UpstreamTimeout
from atwhois.resolver.identity import BOGUS, INDETERMINATE, INSECURE, SECURE
from devnet import dnssec as island
from devnet.atwhois import run
from devnet.network import DevnetState
from tests.server.test_views import disagreements

N = dns.name.from_text
ORIGIN = N("example.")
# The zones below are signed for a day starting ten days from now, and checked at NOW inside
# that day: a rule that looked at the clock instead of the time it is given would fail.
INCEPTION = int(time.time()) + 10 * 86400
NOW = INCEPTION + 3600.0


# --- the rules, on zones signed here -----------------------------------------------------


def _signed_zone(lines: list[str]) -> tuple[dns.zone.Zone, Any]:
    """`example.` with `lines`, signed with a new P-256 key, with NSEC (dnspython does not
    sign with NSEC3: Knot's NSEC3 zone on the test network stands for it, and the NSEC3
    records below are made by hand)."""
    text = "\n".join(
        ["$TTL 60", "@ SOA ns hostmaster 1 3600 600 86400 60", "@ NS ns", "ns A 127.0.0.1", *lines]
    )
    zone = dns.zone.from_text(text, origin=ORIGIN)
    key = ec.generate_private_key(ec.SECP256R1())
    dnskey = dns.dnssec.make_dnskey(
        key.public_key(), dns.dnssec.Algorithm.ECDSAP256SHA256, flags=257
    )
    with zone.writer() as txn:
        dns.dnssec.sign_zone(zone, txn, keys=[(key, dnskey)], inception=INCEPTION, lifetime=86400)
    # names in full, as in a response (the zone keeps them relative to its origin)
    whole = dns.zone.from_text(zone.to_text(relativize=False), origin=ORIGIN, relativize=False)
    return whole, (key, dnskey)


def _rrset(zone: dns.zone.Zone, name: str, rdtype: str) -> Signed:
    """An RRset of the zone and its signatures, named in full as a response names them."""
    owner = N(name, ORIGIN)
    rdtype_ = dns.rdatatype.from_text(rdtype)
    rrset = zone.find_rrset(owner, rdtype_)
    sigs = zone.get_rrset(owner, dns.rdatatype.RRSIG, rdtype_)
    whole = dns.rrset.from_rdata_list(owner, rrset.ttl, list(rrset))
    return Signed(whole, dns.rrset.from_rdata_list(owner, sigs.ttl, list(sigs)) if sigs else None)


def _keys(zone: dns.zone.Zone) -> ZoneKeys:
    return ZoneKeys.of(_rrset(zone, "@", "DNSKEY").rrset)


def _denials(zone: dns.zone.Zone, rdtype: str) -> list[Signed]:
    wanted = dns.rdatatype.from_text(rdtype)
    return [
        _rrset(zone, name.to_text(), rdtype)
        for name, node in zone.nodes.items()
        if node.get_rdataset(dns.rdataclass.IN, wanted) is not None
    ]


def test_trust_anchors_are_read_from_ds_or_dnskey_records_and_the_deepest_one_is_used() -> None:
    """S-SEC-1: the root's two DS records are the default; anchors are given as DS or DNSKEY
    records, with or without TTL and class, and anything else is refused. S-SEC-2: the
    deepest anchor at or above a name is the one used."""
    assert len(parse_anchors(Config().dnssec_anchors)[N(".")].ds) == 2
    _, (_, dnskey) = _signed_zone([])
    anchors = parse_anchors(
        [
            ". 3600 IN DS 20326 8 2 "
            "E06D44B80B8F1D39A95C0B0D7C65D08458E880409BBC683457104237C7F8EC8D",
            f"example. DNSKEY {dnskey.to_text()}",
        ]
    )
    assert anchors[N("example.")].keys == (dnskey,)
    ttl_only = parse_anchors([f"example. 3600 DNSKEY {dnskey.to_text()}"])
    assert ttl_only[N("example.")].keys == (dnskey,)
    assert closest_anchor(N("_atproto.a.example."), anchors) == N("example.")
    assert closest_anchor(N("_atproto.a.example.com."), anchors) == N(".")
    assert closest_anchor(N("a.test."), {N("example."): anchors[N("example.")]}) is None
    for bad in ("example. A 127.0.0.1", "example. DS 1 2", "not a record"):
        with pytest.raises(InvalidInput, match="trust anchor"):
            parse_anchors([bad])
    with pytest.raises(InvalidInput, match="is a DS or a DNSKEY record, not A"):
        parse_anchors(["example. A 127.0.0.1"])
    with pytest.raises(InvalidInput, match="trust anchor"):
        Config(dnssec=True, dnssec_anchors=("example. TXT hello",))
    # checked when used: without DNSSEC validation, parsing them would load dnspython for
    # nothing (a lookup the cache answers loads no network stack)
    assert Config(dnssec_anchors=("example. TXT hello",)).dnssec_anchors


def test_a_signature_holds_under_the_zone_key_only_for_its_records_and_its_period() -> None:
    """S-SEC-4: the TXT's RRSIG verifies under the zone's keys, within its validity; changed
    records, another zone's keys, an expired signature and no signature are bogus."""
    zone, _ = _signed_zone(['_atproto.a TXT "did=did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"'])
    keys = _keys(zone)
    txt = _rrset(zone, "_atproto.a", "TXT")
    now = NOW
    verify(txt, ORIGIN, keys, now, Budget())
    changed = dns.rrset.from_text(
        txt.rrset.name, 60, "IN", "TXT", '"did=did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"'
    )
    with pytest.raises(DnssecBogus, match=r"no signature by example\. holds: verify failure"):
        verify(Signed(changed, txt.sigs), ORIGIN, keys, now, Budget())
    other, _ = _signed_zone([])
    with pytest.raises(DnssecBogus, match="no key of example"):
        verify(txt, ORIGIN, _keys(other), now, Budget())
    with pytest.raises(DnssecBogus, match="expired"):
        verify(txt, ORIGIN, keys, now + 2 * 86400, Budget())
    with pytest.raises(DnssecBogus, match="not yet valid"):
        verify(txt, ORIGIN, keys, INCEPTION - 60.0, Budget())
    with pytest.raises(DnssecBogus, match="not signed"):
        verify(Signed(txt.rrset, None), ORIGIN, keys, now, Budget())
    with pytest.raises(
        DnssecBogus, match=r"_atproto\.a\.example\. TXT is signed by example\., not by other\."
    ):
        verify(txt, N("other."), keys, now, Budget())


def test_a_zone_key_is_trusted_when_a_usable_ds_names_it_and_it_signs_the_key_set() -> None:
    """S-SEC-5: the DS names the key by tag, algorithm and digest; the key set must be signed
    by it. S-SEC-3: DS records of an algorithm or digest not checked are set aside."""
    zone, (_, dnskey) = _signed_zone([])
    keyset = _rrset(zone, "@", "DNSKEY")
    ds = dns.dnssec.make_ds(ORIGIN, dnskey, "SHA256")
    assert keys_named(ORIGIN, keyset.rrset, [ds]) == [dnskey]
    wrong = dns.rdata.from_text("IN", "DS", f"{ds.key_tag} 13 2 {'00' * 32}")
    assert keys_named(ORIGIN, keyset.rrset, [wrong]) == []  # type: ignore[list-item]
    assert verify_keyset(keyset, ORIGIN, [dnskey], NOW, Budget()).by_tag == {
        (dnskey.key_id(), 13): (dnskey,)
    }
    with pytest.raises(DnssecBogus, match="matches its DS"):
        verify_keyset(keyset, ORIGIN, [], NOW, Budget())
    gost = dns.rdata.from_text("IN", "DS", f"{ds.key_tag} 12 3 {'00' * 32}")
    gost_digest = dns.rdata.from_text("IN", "DS", f"{ds.key_tag} 13 3 {'00' * 32}")
    assert usable_ds([ds, gost, gost_digest]) == [ds]  # both the algorithm and the digest
    # a key without the zone flag is no zone key, whatever names it
    not_zone = dns.rdata.from_text("IN", "DNSKEY", f"0 3 13 {dnskey.to_text().split(' ', 3)[3]}")
    made = dns.dnssec.make_ds(ORIGIN, not_zone, "SHA256")
    assert keys_named(ORIGIN, [not_zone], [made]) == []
    assert keys_named(ORIGIN, [not_zone, dnskey], [made, ds]) == [dnskey]


def test_a_denial_of_ds_proves_an_unsigned_delegation_or_no_zone() -> None:
    """S-SEC-6: NS without DS at the name is an unsigned delegation; a name with other
    records, an empty non-terminal, or no name at all, no zone; a denial that is missing or
    lists the DS, bogus."""
    zone, (key, dnskey) = _signed_zone(
        ["child NS ns.elsewhere.", 'host TXT "x"', '_atproto.deep.er TXT "x"']
    )
    keys = _keys(zone)
    denials = _denials(zone, "NSEC")
    now = NOW
    assert (
        ds_denial(N("child.example."), ORIGIN, denials, keys, now, Budget()) == UNSIGNED_DELEGATION
    )
    assert ds_denial(N("host.example."), ORIGIN, denials, keys, now, Budget()) == NO_DELEGATION
    assert ds_denial(N("er.example."), ORIGIN, denials, keys, now, Budget()) == NO_DELEGATION  # ENT
    with pytest.raises(DnssecBogus, match="no DS at"):
        ds_denial(N("child.example."), ORIGIN, [], keys, now, Budget())
    assert ds_denial(N("nothing.example."), ORIGIN, denials, keys, now, Budget()) == NO_DELEGATION
    listed = dns.rrset.from_text(
        "child.example.", 60, "IN", "NSEC", "host.example. NS DS RRSIG NSEC"
    )
    forged = [Signed(listed, d.sigs) if d.rrset.name == listed.name else d for d in denials]
    with pytest.raises(DnssecBogus, match="holds: verify failure"):  # signed: other types
        ds_denial(N("child.example."), ORIGIN, forged, keys, now, Budget())
    listed_sigs = dns.dnssec.sign(listed, key, ORIGIN, dnskey, inception=INCEPTION, lifetime=86400)
    resigned = [
        Signed(listed, dns.rrset.from_rdata(listed.name, 60, listed_sigs))
        if d.rrset.name == listed.name
        else d
        for d in denials
    ]
    with pytest.raises(DnssecBogus, match="says it has one"):
        ds_denial(N("child.example."), ORIGIN, resigned, keys, now, Budget())
    # the NSEC chain's ends: its last NSEC wraps to the apex; names of other zones
    last = max(denials, key=lambda d: d.rrset.name)
    following = last.rrset[0].next  # type: ignore[attr-defined]
    assert following == ORIGIN
    assert covers(last.rrset.name, following, N("zzz.example."), ORIGIN)
    assert not covers(last.rrset.name, following, N("zzz.other."), ORIGIN)
    assert not covers(N("a.example."), N("c.example."), N("c.example."), ORIGIN)
    assert covers(N("a.example."), N("c.example."), N("b.example."), ORIGIN)


def test_nsec3_denials_match_cover_with_opt_out_and_refuse_costly_iterations() -> None:
    """S-SEC-7 on NSEC3 records made here: the NSEC3 matching the name's hash decides as an
    NSEC would; without one, the closest encloser's NSEC3 and one covering the next closer
    name: with opt-out an unsigned delegation may be there, without it nothing is; more than
    150 iterations is treated as unsigned; an unproven encloser is bogus."""
    zone, (key, dnskey) = _signed_zone([])
    keys = _keys(zone)

    def nsec3(owner_hash: str, following: str, types: str, flags: int = 0, it: int = 0) -> Signed:
        owner = N(f"{owner_hash}.example.")
        text = f"1 {flags} {it} - {following} {types}"
        rrset = dns.rrset.from_text(owner, 60, "IN", "NSEC3", text)
        sig = dns.dnssec.sign(rrset, key, ORIGIN, dnskey, inception=INCEPTION, lifetime=86400)
        return Signed(rrset, dns.rrset.from_rdata(owner, 60, sig))

    def hashed(name: str) -> str:
        return dns.dnssec.nsec3_hash(N(name), b"", 0, 1).lower()

    def near(hash_: str, step: int) -> str:  # base32hex is base 32 with digits 0-9a-v
        value, digits = int(hash_, 32) + step, "0123456789abcdefghijklmnopqrstuv"
        return "".join(digits[(value >> (5 * i)) & 31] for i in reversed(range(32)))

    child, apex = hashed("child.example."), hashed("example.")
    low, high = near(child, -1), near(child, 1)

    def ring(flags: int, it: int = 0) -> list[Signed]:
        """A consistent chain: apex, then the two hashes around the child's (opt-out or not)."""
        points = sorted([apex, low, high])
        return [
            nsec3(
                owner,
                points[(i + 1) % 3],
                "SOA NS DNSKEY RRSIG" if owner == apex else "A",
                flags=flags if owner == low else 0,
                it=it,
            )
            for i, owner in enumerate(points)
        ]

    now = NOW
    delegation = nsec3(child, apex, "NS")
    assert (
        ds_denial(N("child.example."), ORIGIN, [delegation], keys, now, Budget())
        == UNSIGNED_DELEGATION
    )
    names = nsec3(child, apex, "TXT RRSIG")
    assert ds_denial(N("child.example."), ORIGIN, [names], keys, now, Budget()) == NO_DELEGATION
    opted = ds_denial(N("child.example."), ORIGIN, ring(flags=1), keys, now, Budget())
    assert opted == UNSIGNED_DELEGATION
    assert (
        ds_denial(N("child.example."), ORIGIN, ring(flags=0), keys, now, Budget()) == NO_DELEGATION
    )
    costly = ds_denial(N("child.example."), ORIGIN, ring(flags=0, it=151), keys, now, Budget())
    assert costly == UNSIGNED_DELEGATION
    # S-SEC-8 over NSEC3: the hash of a name between two hashes of the chain is proven
    # absent; the hash of a name the chain holds is not, nor one of NSEC3 of another zone
    child_name = N("child.example.")
    assert wildcard_denial(child_name, ORIGIN, ring(flags=0), keys, now, Budget()) == PROVEN
    with pytest.raises(DnssecBogus, match=r"no proof that child\.example\. does not exist"):
        wildcard_denial(child_name, ORIGIN, [delegation], keys, now, Budget())
    elsewhere = [
        Signed(dns.rrset.from_rdata_list(N(f"{low}.other."), 60, list(r.rrset)), r.sigs)
        for r in ring(flags=0)
    ]
    with pytest.raises(DnssecBogus, match=r"no NSEC3 of example\. that can be read"):
        wildcard_denial(child_name, ORIGIN, elsewhere, keys, now, Budget())
    plain = [r for r in ring(flags=0) if r.rrset.name.labels[0].decode() != apex]
    with pytest.raises(DnssecBogus, match="closest encloser"):
        ds_denial(N("child.example."), ORIGIN, plain, keys, now, Budget())


def test_a_wildcard_answer_holds_only_with_proof_that_the_name_asked_is_not_there() -> None:
    """S-SEC-8: an RRSIG counting fewer labels than the name marks a wildcard expansion; the
    next closer name must be proven absent by a verified NSEC."""
    zone, _ = _signed_zone(['*.w TXT "did=did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"', 'z TXT "x"'])
    keys = _keys(zone)
    wild = _rrset(zone, "*.w", "TXT")
    asked = N("_atproto.x.w.example.")
    expanded = Signed(
        dns.rrset.from_rdata_list(asked, 60, list(wild.rrset)),
        dns.rrset.from_rdata_list(asked, 60, list(wild.sigs or ())),
    )
    sig = verify(expanded, ORIGIN, keys, NOW, Budget())  # the signature is the wildcard's
    assert wildcard_source(asked, sig) == N("x.w.example.")
    assert wildcard_source(N("x.w.example."), sig) == N("x.w.example.")
    assert wildcard_source(wild.rrset.name, sig) is None
    denials = _denials(zone, "NSEC")
    assert wildcard_denial(N("x.w.example."), ORIGIN, denials, keys, NOW, Budget()) == PROVEN
    with pytest.raises(DnssecBogus, match="S-SEC-8"):
        wildcard_denial(N("z.example."), ORIGIN, denials, keys, NOW, Budget())


def test_a_response_without_do_or_signatures_is_from_a_resolver_that_strips_them() -> None:
    """S-SEC-9: no DO bit echoed and no RRSIG: the resolver strips DNSSEC records."""
    query = dns.message.make_query("_atproto.a.example.", "TXT", want_dnssec=True)
    response = dns.message.make_response(query)
    response.use_edns(0, dns.flags.DO)  # a server that knows DNSSEC echoes DO
    assert not strips_dnssec(response)
    response.ednsflags &= ~dns.flags.DO
    assert strips_dnssec(response)
    zone, _ = _signed_zone(['_atproto.a TXT "x"'])
    txt = _rrset(zone, "_atproto.a", "TXT")
    response.answer = [txt.rrset]  # records, but no signature: still stripped
    assert strips_dnssec(response)
    response.answer = [txt.rrset, txt.sigs]
    assert not strips_dnssec(response)
    (found,) = signed_rrsets(response.answer)
    assert found.rrset.rdtype == dns.rdatatype.TXT and found.sigs == txt.sigs


# --- the test network's signed zones -------------------------------------------------------


def _config(devnet: DevnetState, server: str | None = None, **changes: Any) -> Config:
    servers = (Nameserver.parse(server or devnet.dns_server),)
    return devnet.config(dnssec=True, dns_servers=servers, **changes)


EXPECTED = {
    island.ISLAND: (SECURE, "dnssec.test."),
    island.NSEC3_ZONE: (SECURE, "nsec3.dnssec.test."),
    island.MOVING: (SECURE, "moving.dnssec.test."),
    island.PLAIN: (INSECURE, "plain.dnssec.test."),
    island.PLAIN_NSEC3: (INSECURE, "plain.nsec3.dnssec.test."),
    island.BROKEN: (BOGUS, None),
}


async def test_each_zone_of_the_island_gives_its_dnssec_state(devnet: DevnetState) -> None:
    """S-SEC-4..7, S-SEC-10 on the real Knot: secure under NSEC and NSEC3 zones, insecure
    below a delegation without DS (proven by NSEC and by NSEC3), bogus where the TXT was
    changed after signing: that DNS-only handle is not verified, with the reason, and the
    text says all of it. A handle outside the island has no anchor: indeterminate."""
    async with Resolver(_config(devnet)) as resolver:
        for zone, (state, signer) in EXPECTED.items():
            identity = await resolver.lookup(island.handle(zone))
            check = identity.dns.dnssec
            assert check is not None and (check.state, check.zone) == (state, signer), zone
            report = identity.to_json()
            assert report["evidence"]["dns"]["dnssec"]["state"] == state
            assert disagreements(report, render_text(report)) == []
            if state == INSECURE:  # what proved the delegation unsigned, named
                proof = "NSEC3" if zone == island.PLAIN_NSEC3 else "NSEC"
                assert f"proven by {proof} [S-SEC-6]" in (check.reason or "")
            if state == BOGUS:
                assert identity.status is Status.HANDLE_NOT_FOUND
                assert identity.dns.error_kind == "DnssecBogus"
                assert "bogus" in (identity.error or "") + (identity.dns.error or "")
                assert identity.dns.dids == (devnet.did("bruno"),)  # what DNS said, shown
            else:
                assert identity.status is Status.VERIFIED, (zone, identity.error)
        outside = await resolver.lookup("alice.test")
    assert outside.verified and outside.dns.dnssec is not None
    assert outside.dns.dnssec.state == INDETERMINATE and "no trust anchor" in (
        outside.dns.dnssec.reason or ""
    )


async def test_a_refresh_validates_the_zones_own_answer_as_the_resolvers(
    devnet: DevnetState,
) -> None:
    """H-DNS-10 with --dnssec: a refresh takes the TXT answer of the zone's nameserver
    (H-DNS-9) and validates it as a lookup validates the resolver's: each zone of the
    island gives the same state, and the TXT changed after signing stays bogus however it
    is asked (the zone's own answer launders nothing)."""
    async with Resolver(_config(devnet)) as resolver:
        for zone, (state, signer) in EXPECTED.items():
            identity = await resolver.refresh(island.handle(zone))
            check = identity.dns.dnssec
            assert check is not None and (check.state, check.zone) == (state, signer), zone
            assert identity.dns.via == "the zone's nameserver ns.test (127.0.0.1)", zone
            assert identity.verified == (state != BOGUS), zone


async def test_a_spoofed_answer_from_the_zone_does_not_unseat_a_secure_one(
    devnet: DevnetState,
) -> None:
    """H-DNS-10 with --dnssec: the zone's own answer replaces the resolver's only when it
    validates at least as well. The direct question to the zone's nameserver goes through
    the forging proxy, which changes the TXT in flight and leaves its signature (one spoofed
    UDP answer does as much): bogus, so the resolver's secure answer stands, the refresh
    stays verified and says why; it is no stale resolver. Honest again, the zone's secure
    answer counts as before."""
    handle = island.handle(island.ISLAND)
    forging_port = int(devnet.dns_server_forging.rsplit(":", 1)[1])
    config = _config(devnet, dns_authoritative_port=forging_port)
    attacker = "did=did:plc:" + "a" * 24
    devnet.set_forgeries({f"_atproto.{handle}. TXT": [{"txt": attacker}]})
    try:
        async with Resolver(config) as resolver:
            spoofed = await resolver.refresh(handle)
        devnet.set_forgeries({})
        async with Resolver(config) as resolver:
            honest = await resolver.refresh(handle)
    finally:
        devnet.set_forgeries({})
    assert spoofed.verified and spoofed.did == devnet.did("sam"), spoofed.error
    check = spoofed.dns.dnssec
    assert check is not None and check.state == SECURE
    via = spoofed.dns.via or ""
    assert via.startswith("the recursive resolver; the zone's nameserver ns.test"), via
    assert "but bogus" in via and "(secure)" in via
    assert spoofed.dns.stale_resolver is None and "dns_stale_resolver" not in spoofed.warnings
    assert honest.verified and honest.dns.via == "the zone's nameserver ns.test (127.0.0.1)"
    assert honest.dns.dnssec is not None and honest.dns.dnssec.state == SECURE


async def test_a_resolver_that_strips_dnssec_records_makes_every_answer_under_an_anchor_bogus(
    devnet: DevnetState,
) -> None:
    """S-SEC-9: through the proxy that strips DNSSEC records, every answer under the island's
    trust anchor lacks the signatures the anchor says must be there: bogus, saying why (a
    stripping resolver and a forger look the same from here), so none of those handles
    verifies by DNS. A name under no anchor stays indeterminate and verifies."""
    async with Resolver(_config(devnet, devnet.dns_server_stripping)) as resolver:
        for zone in EXPECTED:
            identity = await resolver.lookup(island.handle(zone))
            assert not identity.verified, zone
            check = identity.dns.dnssec
            assert check is not None and check.state == BOGUS
            assert "strips" in (check.reason or "") and "[S-SEC-9]" in (check.reason or "")
        outside = await resolver.lookup("alice.test")
    assert outside.verified and outside.dns.dnssec is not None
    assert outside.dns.dnssec.state == INDETERMINATE


async def test_the_walk_is_kept_a_second_lookup_under_a_zone_asks_only_for_its_txt(
    devnet: DevnetState,
) -> None:
    """S-SEC-11: the island's keys are asked for once; a handle under an unsigned child then
    costs the DS questions of its labels, asked at once (the parent's keys are kept), and the
    same again costs none. Past the records' TTL (60 s, on a clock moved forward) the walk
    asks again."""
    now = [time.time()]
    config = _config(devnet)
    async with Resolver(config) as resolver:
        chain = DnssecChain(
            resolver.dns.ask, parse_anchors(config.dnssec_anchors), clock=lambda: now[0]
        )
        resolver._dnssec = chain
        asked: list[tuple[str, str]] = []
        ask = resolver.dns.ask

        async def counted(
            name: dns.name.Name, rdtype: dns.rdatatype.RdataType
        ) -> dns.message.Message:
            asked.append((name.to_text(), rdtype.name))
            return await ask(name, rdtype)

        chain._proofs._ask = counted
        sam = await resolver.lookup(island.handle(island.ISLAND))
        assert asked == [("dnssec.test.", "DNSKEY")] and sam.dns.dnssec.state == SECURE  # type: ignore[union-attr]
        asked.clear()
        first = await resolver.lookup(island.handle(island.PLAIN))
        # the DS questions of the name's labels at once (S-SEC-15); the first proves the cut
        assert sorted(asked) == [
            ("_atproto.ursula.plain.dnssec.test.", "DS"),
            ("plain.dnssec.test.", "DS"),
            ("ursula.plain.dnssec.test.", "DS"),
        ]
        assert first.dns.dnssec.state == INSECURE  # type: ignore[union-attr]
        asked.clear()
        for zone in (island.ISLAND, island.PLAIN):
            again = await resolver.lookup(island.handle(zone))
            assert again.dns.dnssec == (sam if zone == island.ISLAND else first).dns.dnssec
        assert asked == []
        now[0] += 61
        await resolver.lookup(island.handle(island.ISLAND))
        assert asked == [("dnssec.test.", "DNSKEY")]


async def test_a_delegation_that_changes_between_audits_is_reported_each_time(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """The world changes: the DS of moving.dnssec.test. is removed from its parent (Knot signs
    the parent again at once), then replaced by one naming no key, then put back. Each audit
    run (a resolver of its own, as a scheduled run is) reports the change as a finding with
    the table's severity: dnssec_lost, dnssec_bogus (with the handle no longer verified),
    dnssec_secure_again."""
    handle = island.handle(island.MOVING)
    store = AuditStore(tmp_path / "audit.db")

    async def audit() -> tuple[set[tuple[str, str]], Any]:
        async with CachedResolver(Resolver(_config(devnet)), MemoryStore()) as cached:
            summary = await Auditor(cached, store, concurrency=1).run([Watched(handle)])
        findings = {(f.kind, str(f.severity)) for f in store.run_findings(summary.run_id)}
        (check,) = store.run_checks(summary.run_id)
        return findings, check

    try:
        findings, check = await audit()
        assert (check.dnssec, findings) == (SECURE, set())
        devnet.set_delegation(island.MOVING, "unsigned")
        findings, check = await audit()
        assert (check.dnssec, check.status) == (INSECURE, "verified")
        assert findings == {("dnssec_lost", "warning")}
        assert "moving.dnssec.test. with no DS" in (check.dnssec_detail or "")
        devnet.set_delegation(island.MOVING, "spoiled")
        findings, check = await audit()
        assert (check.dnssec, check.status) == (BOGUS, "handle_not_found")
        assert findings == {("dnssec_bogus", "critical"), ("became_unverified", "warning")}
        devnet.set_delegation(island.MOVING, "signed")
        findings, check = await audit()
        assert (check.dnssec, check.status) == (SECURE, "verified")
        assert findings == {("dnssec_secure_again", "info"), ("recovered", "info")}
    finally:
        devnet.set_delegation(island.MOVING, "signed")


def test_the_command_line_validates_with_the_anchor_from_the_environment(
    devnet: DevnetState, devnet_env: dict[str, str]
) -> None:
    """`atwhois lookup --dnssec`: the devnet's anchor comes from $ATWHOIS_DNSSEC_ANCHOR; the
    bogus handle exits 1 with the reason in text and JSON; `--dnssec-anchor` with a record
    that is not one is refused before any lookup."""
    code, out, err = run(["lookup", "--dnssec", island.handle(island.ISLAND)], env=devnet_env)
    assert code == 0 and "dnssec  secure" in out and "zone dnssec.test." in out, err
    code, out, err = run(
        ["lookup", "--dnssec", "--json", island.handle(island.BROKEN)], env=devnet_env
    )
    report = json.loads(out)
    assert code == 1 and report["evidence"]["dns"]["dnssec"]["state"] == BOGUS
    assert report["evidence"]["dns"]["outcome"] == "invalid"
    code, out, err = run(
        ["lookup", "--dnssec", "--dnssec-anchor", "dnssec.test. A 127.0.0.1", "alice.test"],
        env=devnet_env,
    )
    assert code == 2 and "trust anchor" in err and not out


async def test_a_walk_answered_by_nothing_is_a_transient_failure_and_not_kept(
    devnet: DevnetState,
) -> None:
    """The three outcomes apart: when the walk's questions get no answer, the DNS method
    failed (transient), no DNSSEC state is claimed, and nothing of it is kept: the same
    walk, answered again, proves the zone secure."""
    config = _config(devnet)
    async with Resolver(config) as resolver:
        silent = [True]
        ask = resolver.dns.ask

        async def flaky(
            name: dns.name.Name, rdtype: dns.rdatatype.RdataType
        ) -> dns.message.Message:
            if silent[0]:
                raise UpstreamTimeout(f"{name}: no DNS answer")
            return await ask(name, rdtype)

        resolver._dnssec = DnssecChain(flaky, parse_anchors(config.dnssec_anchors))
        identity = await resolver.lookup(island.handle(island.ISLAND))
        assert identity.dns.outcome.value == "failed" and identity.dns.dnssec is None
        assert identity.status is Status.UNAVAILABLE
        silent[0] = False
        again = await resolver.lookup(island.handle(island.ISLAND))
        assert again.verified and again.dns.dnssec is not None
        assert again.dns.dnssec.state == SECURE


def test_the_devnet_configuration_leaves_dnssec_off_and_names_its_anchor(
    devnet: DevnetState,
) -> None:
    config = devnet.config()
    assert not config.dnssec and config.dnssec_anchors == (devnet.dnssec_anchor,)
    assert dataclasses.replace(config, dnssec=True).dnssec
