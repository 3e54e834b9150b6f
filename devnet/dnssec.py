"""DNSSEC on the test network: an island of signed zones under `dnssec.test.`, delegated from
the unsigned `test.`; the island's key is the test network's trust anchor.

- `dnssec.test.`: Knot signs it (NSEC). sam's TXT: secure.
- `nsec3.dnssec.test.`: Knot signs it with NSEC3; its DS is in the parent. nora: secure.
- `plain.dnssec.test.`: unsigned, delegated with no DS. ursula: insecure, proven by NSEC.
- `plain.nsec3.dnssec.test.`: unsigned, no DS in its NSEC3 parent. otto: insecure, by NSEC3.
- `broken.dnssec.test.`: signed here (dnspython), then its TXT changed without signing it
  again, as a zone edited behind its signer's back. bruno: bogus.
- `moving.dnssec.test.`: Knot signs it; tests remove or spoil its DS in the parent
  (`set_delegation`). dana: secure, then insecure, then bogus.
- `*.w.nsec3.dnssec.test.`: a wildcard TXT in the NSEC3 zone; every name under it is made
  from the wildcard, with Knot's NSEC3 proof that the name asked for is not there.
- `costly.dnssec.test.`: Knot signs it with NSEC3 of 200 iterations, more than a validator
  hashes (RFC 9276): its proofs of absence make an answer insecure, not secure.
- `_atproto.nodata.dnssec.test.`: an A record and no TXT (a proven NODATA).

And hostile zones, each under a trust anchor of its own, their owner the attacker: KeyTrap
(CVE-2023-50387). A zone's DNSKEY set, signed by its one real key, holds many more Ed25519
keys that share one key tag; the wildcard TXT under it carries RRSIGs with that tag, none of
which verifies under any key.
- `keytrap.`: 1,300 keys and 600 RRSIGs (the red team's): answers of 62 KB;
- `kt.`: 300 keys and 140 RRSIGs: answers under the size atwhois reads (H-DNS-8), so that
  only the caps on the work of a resolution (S-SEC-14) stand between it and the validator.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Mapping
from pathlib import Path

import dns.dnssec
import dns.message
import dns.name
import dns.rdataclass
import dns.rdataset
import dns.rdatatype
import dns.rdtypes.ANY.DNSKEY
import dns.rdtypes.ANY.RRSIG
import dns.rrset
import dns.zone
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from .dns import reload_zone

ISLAND = "dnssec.test."
NSEC3_ZONE = "nsec3.dnssec.test."
COSTLY = "costly.dnssec.test."
MOVING = "moving.dnssec.test."
BROKEN = "broken.dnssec.test."
PLAIN = "plain.dnssec.test."
PLAIN_NSEC3 = "plain.nsec3.dnssec.test."
# Zones Knot signs itself, with their denial of existence.
SIGNED_BY_KNOT = {ISLAND: "nsec", NSEC3_ZONE: "nsec3", MOVING: "nsec", COSTLY: "costly"}
# Each zone's handle: (the label under the zone, the world's identity).
HANDLES = {
    ISLAND: ("sam", "sam"),
    NSEC3_ZONE: ("nora", "nora"),
    PLAIN: ("ursula", "ursula"),
    PLAIN_NSEC3: ("otto", "otto"),
    BROKEN: ("bruno", "bruno"),
    MOVING: ("dana", "dana"),
}
# The KeyTrap zones: (keys sharing one tag, RRSIGs with that tag on the TXT)
KEYTRAPS = {"keytrap.": (1300, 600), "kt.": (300, 140)}
ZONES = (ISLAND, NSEC3_ZONE, MOVING, BROKEN, PLAIN, PLAIN_NSEC3, COSTLY, *KEYTRAPS)
WILDCARD = "w." + NSEC3_ZONE  # names under it are made from `*.w`
_SIGNED_CHILDREN = {ISLAND: (NSEC3_ZONE, MOVING, BROKEN, COSTLY), NSEC3_ZONE: ()}
_UNSIGNED_CHILDREN = {ISLAND: (PLAIN,), NSEC3_ZONE: (PLAIN_NSEC3,)}
_SPOILED_DIGEST = "0" * 64


# The island's delegation in the unsigned `test.` zone (no DS: an island of trust).
DELEGATION = f"{ISLAND} NS ns.test.\n"


def handle(zone: str) -> str:
    return f"{HANDLES[zone][0]}.{zone}".rstrip(".")


def knot_zones() -> str:
    """The Knot policies and zone entries of the island (appended to the `zone:` list)."""
    return "".join(
        f"  - domain: {zone}\n"
        + (
            f"    dnssec-signing: on\n    dnssec-policy: {SIGNED_BY_KNOT[zone]}\n"
            if zone in SIGNED_BY_KNOT
            else ""
        )
        for zone in ZONES
    )


KNOT_POLICIES = """policy:
  - id: nsec
    algorithm: ecdsap256sha256
    ksk-lifetime: 0
    zsk-lifetime: 0
  - id: nsec3
    algorithm: ecdsap256sha256
    nsec3: on
    nsec3-iterations: 0
    nsec3-salt-length: 0
    ksk-lifetime: 0
    zsk-lifetime: 0
  - id: costly
    algorithm: ecdsap256sha256
    nsec3: on
    nsec3-iterations: 200
    nsec3-salt-length: 0
    ksk-lifetime: 0
    zsk-lifetime: 0
"""


def _zone_text(zone: str, lines: list[str], serial: int) -> str:
    return (
        "\n".join(
            [
                f"$ORIGIN {zone}",
                "$TTL 60",
                f"@ SOA ns.test. hostmaster.test. {serial} 3600 600 86400 60",
                "@ NS ns.test.",
                *lines,
            ]
        )
        + "\n"
    )


def _txt(zone: str, dids: Mapping[str, str]) -> str:
    label, name = HANDLES[zone]
    return f'_atproto.{label} TXT "did={dids[name]}"'


def _parent_lines(zone: str, dids: Mapping[str, str], ds: Mapping[str, list[str]]) -> list[str]:
    lines = [_txt(zone, dids)] if zone in HANDLES else []
    if zone == ISLAND:
        lines.append("_atproto.nodata A 127.0.0.1")
    for child in (*_SIGNED_CHILDREN.get(zone, ()), *_UNSIGNED_CHILDREN.get(zone, ())):
        label = child.removesuffix("." + zone)
        lines.append(f"{label} NS ns.test.")
        lines.extend(f"{label} DS {record}" for record in ds.get(child, []))
    return lines


def write_zones(directory: Path, dids: Mapping[str, str]) -> list[str]:
    """Every zone file of the island, before Knot starts; the broken zone signed and spoilt
    here, the KeyTrap zones made here. The DS records of the zones Knot signs come once it
    has made their keys (`link_delegations`). Returns the hostile zones' trust anchors."""
    for zone in (NSEC3_ZONE, MOVING, PLAIN, PLAIN_NSEC3, COSTLY):
        lines = _parent_lines(zone, dids, {})
        if zone == NSEC3_ZONE:
            lines.append(f'*.w TXT "did={dids[HANDLES[zone][1]]}"')
        (directory / f"{zone}zone").write_text(_zone_text(zone, lines, 1))
    hostile_anchors = []
    for zone, (keys, signatures) in KEYTRAPS.items():
        text, anchor = _keytrap(zone, keys, signatures, dids)
        (directory / f"{zone}zone").write_text(text)
        hostile_anchors.append(anchor)
    broken_text, broken_ds = _signed_then_changed(dids)
    (directory / f"{BROKEN}zone").write_text(broken_text)
    (directory / "broken.ds").write_text(broken_ds)
    (directory / f"{ISLAND}zone").write_text(
        _zone_text(ISLAND, _parent_lines(ISLAND, dids, {BROKEN: [broken_ds]}), 1)
    )
    return hostile_anchors


def _signed_then_changed(dids: Mapping[str, str]) -> tuple[str, str]:
    """The broken zone, signed with a key of its own, then its TXT record changed (another
    DID's signature over a record that now names bruno); and its DS record."""
    origin = dns.name.from_text(BROKEN)
    label, _ = HANDLES[BROKEN]
    signed_value = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
    zone = dns.zone.from_text(
        _zone_text(BROKEN, [f'_atproto.{label} TXT "did={signed_value}"'], 1), origin=origin
    )
    private = ec.generate_private_key(ec.SECP256R1())
    dnskey = dns.dnssec.make_dnskey(
        private.public_key(), dns.dnssec.Algorithm.ECDSAP256SHA256, flags=257
    )
    with zone.writer() as txn:
        dns.dnssec.sign_zone(zone, txn, keys=[(private, dnskey)], lifetime=30 * 86400)
    text = zone.to_text(relativize=False)
    text = text.replace(f'"did={signed_value}"', f'"did={dids[HANDLES[BROKEN][1]]}"')
    ds = dns.dnssec.make_ds(origin, dnskey, "SHA256")
    return text, ds.to_text()


# Ed25519 (RFC 8032): a public key is a point's y (255 bits) and the sign of its x.
_P = 2**255 - 19
_D = -121665 * pow(121666, _P - 2, _P) % _P


def _on_curve(key: bytes) -> bool:
    y = int.from_bytes(key, "little") & ((1 << 255) - 1)
    if y >= _P:
        return False
    x2 = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    return x2 != 0 and pow(x2, (_P - 1) // 2, _P) == 1


def _key_with_tag(rng: random.Random, tag: int) -> dns.rdtypes.ANY.DNSKEY.DNSKEY:
    """An Ed25519 zone key of the given key tag (RFC 4034 appendix B): random, then its last
    two bytes set so that the tag's sum comes out right; a point on the curve, so that a
    validator that tries it pays a whole verification."""
    while True:
        key = bytearray(rng.randbytes(32))
        head = bytes([1, 0, 3, 15]) + bytes(key[:30])  # flags 256, protocol 3, algorithm 15
        partial = sum(b << 8 if i % 2 == 0 else b for i, b in enumerate(head))
        for carry in range(64):
            tail = (tag - partial - carry) % 65536
            total = partial + tail
            if (total + (total >> 16)) & 0xFFFF == tag:
                key[30:] = tail.to_bytes(2, "big")
                break
        if _on_curve(bytes(key)):
            rdata = dns.rdtypes.ANY.DNSKEY.DNSKEY(
                dns.rdataclass.IN, dns.rdatatype.DNSKEY, 256, 3, 15, bytes(key)
            )
            if rdata.key_id() == tag:
                return rdata


def _keytrap(
    zone_name: str, keys: int, signatures: int, dids: Mapping[str, str]
) -> tuple[str, str]:
    """A KeyTrap zone's text (signed here: its DNSKEY set by its one real key; its TXT by
    none), and the trust anchor naming that key."""
    origin = dns.name.from_text(zone_name)
    rng = random.Random(50387)
    private = ed25519.Ed25519PrivateKey.generate()
    real = dns.dnssec.make_dnskey(private.public_key(), dns.dnssec.Algorithm.ED25519, flags=257)
    tag = (real.key_id() + 1) % 65536
    junk = [_key_with_tag(rng, tag) for _ in range(keys)]
    lines = [f"@ DNSKEY {key.to_text()}" for key in junk]
    lines.append(f'* TXT "did={dids["alice"]}"')
    zone = dns.zone.from_text(_zone_text(zone_name, lines, 1), origin=origin)
    with zone.writer() as txn:
        dns.dnssec.sign_zone(zone, txn, keys=[(private, real)], lifetime=30 * 86400)
    wildcard = dns.name.from_text("*", origin)
    real_sig = _rrsig(next(iter(zone.find_rdataset(wildcard, "RRSIG", "TXT"))))
    forged = dns.rdataset.Rdataset(dns.rdataclass.IN, dns.rdatatype.RRSIG, dns.rdatatype.TXT)
    for _ in range(signatures):
        # S below the group order, so that a verifier cannot refuse the signature early
        signature = rng.randbytes(32) + rng.randbytes(31) + bytes([rng.randrange(16)])
        forged.add(real_sig.replace(key_tag=tag, signature=signature), 60)
    with zone.writer() as txn:
        txn.replace(wildcard, forged)
    anchor = f"{zone_name} DS {dns.dnssec.make_ds(origin, real, 'SHA256').to_text()}"
    return zone.to_text(relativize=False), anchor


def _rrsig(rdata: dns.rdata.Rdata) -> dns.rdtypes.ANY.RRSIG.RRSIG:
    assert isinstance(rdata, dns.rdtypes.ANY.RRSIG.RRSIG)
    return rdata


def link_delegations(directory: Path, port: int, dids: Mapping[str, str]) -> str:
    """Once Knot has signed the zones: their DS records into their parents, the DS of the
    island's own key (the test network's trust anchor) returned."""
    ds = {child: [_ds_of(child, port)] for child in (NSEC3_ZONE, MOVING, COSTLY)}
    ds[BROKEN] = [(directory / "broken.ds").read_text().strip()]
    for child, records in ds.items():
        (directory / f"{child}ds").write_text(records[0])
    _reload(directory, port, ISLAND, _parent_lines(ISLAND, dids, ds))
    return f"{ISLAND} DS {_ds_of(ISLAND, port)}"


def set_delegation(
    directory: Path, port: int, dids: Mapping[str, str], child: str, mode: str
) -> None:
    """The parent's DS for `child`: "signed" (right), "unsigned" (none: the child becomes
    insecure), "spoiled" (a digest of no key: bogus)."""
    ds = {
        zone: [(directory / f"{zone}ds").read_text().strip()]
        for zone in (NSEC3_ZONE, MOVING, BROKEN, COSTLY)
    }
    if mode == "unsigned":
        ds.pop(child)
    elif mode == "spoiled":
        tag, algorithm, digest_type, _ = ds[child][0].split()
        ds[child] = [f"{tag} {algorithm} {digest_type} {_SPOILED_DIGEST}"]
    elif mode != "signed":
        raise ValueError(f"no such delegation mode {mode!r}")
    _reload(directory, port, ISLAND, _parent_lines(ISLAND, dids, ds))


def _reload(directory: Path, port: int, zone: str, lines: list[str]) -> None:
    serial = _serial(zone, port) + 1
    (directory / f"{zone}zone").write_text(_zone_text(zone, lines, serial))
    reload_zone(directory, zone)
    for _ in range(200):  # the reload is done when the new serial is served
        if _serial(zone, port) >= serial:
            return
        time.sleep(0.05)
    raise TimeoutError(f"knotd did not load {zone} serial {serial}")


def _serial(zone: str, port: int) -> int:
    soa = _ask(zone, "SOA", port)
    if soa is None:
        raise RuntimeError(f"knotd serves no SOA for {zone}")
    return int(soa[0].serial)


def _ds_of(zone: str, port: int) -> str:
    deadline = time.monotonic() + 20
    while (keys := _ask(zone, "DNSKEY", port)) is None:  # Knot signs the zone just after start
        if time.monotonic() > deadline:
            raise TimeoutError(f"knotd serves no DNSKEY for {zone}")
        time.sleep(0.05)
    ksk = next(k for k in keys if k.flags & 1)  # the secure entry point
    return dns.dnssec.make_ds(zone, ksk, "SHA256").to_text()


def _ask(name: str, rdtype: str, port: int) -> dns.rrset.RRset | None:
    query = dns.message.make_query(name, rdtype)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        sock.sendto(query.to_wire(), ("127.0.0.1", port))
        response = dns.message.from_wire(sock.recv(65535))
    return response.get_rrset(
        response.answer,
        dns.name.from_text(name),
        dns.rdataclass.IN,
        dns.rdatatype.from_text(rdtype),
    )
