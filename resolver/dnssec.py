"""DNSSEC rules (docs/spec.md: S-SEC-*), as plain functions over DNS data: which signatures
hold, which keys a DS record names, what a denial proves. The walk that asks for keys and
proofs, and keeps them, is `resolver.dnssec_chain`; dnspython's `dns.dnssec` (over
`cryptography`) does the signature math.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple, cast

import dns.dnssec
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.DNSKEY
import dns.rdtypes.ANY.DS
import dns.rdtypes.ANY.NSEC
import dns.rdtypes.ANY.NSEC3
import dns.rdtypes.ANY.RRSIG
import dns.rdtypes.dnskeybase
import dns.rrset

from .errors import DnssecBogus, InvalidInput

RdataType = dns.rdatatype.RdataType
DNSKEY, DS, NSEC, NSEC3, RRSIG = (
    RdataType.DNSKEY,
    RdataType.DS,
    RdataType.NSEC,
    RdataType.NSEC3,
    RdataType.RRSIG,
)
NS, SOA = RdataType.NS, RdataType.SOA

# S-SEC-3: RFC 8624's algorithms a validator must or should check; a zone whose every DS
# names another is treated as unsigned, not as broken.
SUPPORTED_ALGORITHMS = frozenset({8, 10, 13, 14, 15, 16})
SUPPORTED_DIGESTS = frozenset({1, 2, 4})
# S-SEC-7: RFC 9276 lets a validator treat NSEC3 with more iterations as unsigned.
NSEC3_MAX_ITERATIONS = 150


class Signed(NamedTuple):
    """An RRset as a response carried it, with the RRSIGs that cover it (None: none did)."""

    rrset: dns.rrset.RRset
    sigs: dns.rrset.RRset | None


def signed_rrsets(section: Iterable[dns.rrset.RRset]) -> list[Signed]:
    """Each RRset of a response section, with its signatures."""
    rrsets = list(section)
    sigs = {(r.name, r.covers): r for r in rrsets if r.rdtype == RRSIG}
    return [Signed(r, sigs.get((r.name, r.rdtype))) for r in rrsets if r.rdtype != RRSIG]


def strips_dnssec(response: dns.message.Message) -> bool:
    """S-SEC-9: the answer of a resolver that does not pass DNSSEC records on: it does not
    echo the DO bit it was asked with, and carries no signature."""
    signed = any(r.rdtype == RRSIG for section in _sections(response) for r in section)
    return not signed and not response.ednsflags & dns.flags.DO


def _sections(response: dns.message.Message) -> tuple[list[dns.rrset.RRset], ...]:
    return (response.answer, response.authority)


# --- trust anchors ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Anchor:
    """A zone trusted without a parent: its key-signing keys, named by DS or given whole."""

    zone: dns.name.Name
    ds: tuple[dns.rdtypes.ANY.DS.DS, ...] = ()
    keys: tuple[dns.rdtypes.ANY.DNSKEY.DNSKEY, ...] = ()


def parse_anchors(lines: Iterable[str]) -> dict[dns.name.Name, Anchor]:
    """Trust anchors from presentation lines, `ZONE [TTL] [IN] DS|DNSKEY RDATA` (what
    `dig DS` or `keymgr ds` prints). Raises `InvalidInput` naming the line."""
    found: dict[
        dns.name.Name, tuple[list[dns.rdtypes.ANY.DS.DS], list[dns.rdtypes.ANY.DNSKEY.DNSKEY]]
    ] = {}
    for line in lines:
        words = line.split()
        try:
            zone = dns.name.from_text(words[0])
            rest = words[1:]
            while rest and (rest[0].isdigit() or rest[0].upper() == "IN"):
                rest = rest[1:]
            rdtype = dns.rdatatype.from_text(rest[0])
            if rdtype not in (DS, DNSKEY):
                raise ValueError(f"a trust anchor is a DS or a DNSKEY record, not {rest[0]}")
            rdata = dns.rdata.from_text(dns.rdataclass.IN, rdtype, " ".join(rest[1:]))
        except (IndexError, ValueError, dns.exception.DNSException) as err:
            raise InvalidInput(
                f"trust anchor {line!r} is not a DS or DNSKEY record: {err}", "config"
            ) from None
        ds, keys = found.setdefault(zone, ([], []))
        if rdtype == DS:
            ds.append(cast(dns.rdtypes.ANY.DS.DS, rdata))
        else:
            keys.append(cast(dns.rdtypes.ANY.DNSKEY.DNSKEY, rdata))
    return {zone: Anchor(zone, tuple(ds), tuple(keys)) for zone, (ds, keys) in found.items()}


def closest_anchor(name: dns.name.Name, anchors: Iterable[dns.name.Name]) -> dns.name.Name | None:
    """The deepest anchored zone at or above `name` (S-SEC-2)."""
    above = [zone for zone in anchors if name.is_subdomain(zone)]
    return max(above, key=len) if above else None


# --- keys and signatures -----------------------------------------------------------------


def verify(signed: Signed, zone: dns.name.Name, keys: dns.rrset.RRset, now: float) -> None:
    """S-SEC-4: an RRset holds when one of its RRSIGs by `zone` verifies under `keys` and is
    within its validity period. Raises `DnssecBogus` saying what failed."""
    what = f"{signed.rrset.name} {dns.rdatatype.to_text(signed.rrset.rdtype)}"
    if signed.sigs is None:
        raise DnssecBogus(f"{what} is not signed, in signed zone {zone} [S-SEC-4]")
    by_zone = [s for s in signed.sigs if cast(dns.rdtypes.ANY.RRSIG.RRSIG, s).signer == zone]
    if not by_zone:
        signers = sorted({str(cast(dns.rdtypes.ANY.RRSIG.RRSIG, s).signer) for s in signed.sigs})
        raise DnssecBogus(f"{what} is signed by {', '.join(signers)}, not by {zone} [S-SEC-4]")
    reasons = []
    for sig in by_zone:  # one holds, or each says why not (expired, another key, …)
        try:
            dns.dnssec.validate_rrsig(signed.rrset, sig, {zone: keys}, now=now)
            return
        except dns.exception.ValidationFailure as err:
            reasons.append(str(err))
        except dns.exception.UnsupportedAlgorithm as err:
            reasons.append(f"{err} [S-SEC-3]")
    raise DnssecBogus(f"{what}: signature by {zone} fails: {'; '.join(reasons)} [S-SEC-4]")


def usable_ds(ds_set: Iterable[dns.rdata.Rdata]) -> list[dns.rdtypes.ANY.DS.DS]:
    """S-SEC-3: the DS records of an algorithm and a digest this validator checks."""
    usable = []
    for rdata in ds_set:
        ds = cast(dns.rdtypes.ANY.DS.DS, rdata)
        if ds.algorithm in SUPPORTED_ALGORITHMS and ds.digest_type in SUPPORTED_DIGESTS:
            usable.append(ds)
    return usable


def keys_named(
    zone: dns.name.Name,
    keys: Iterable[dns.rdata.Rdata],
    ds_set: Iterable[dns.rdtypes.ANY.DS.DS],
) -> list[dns.rdtypes.ANY.DNSKEY.DNSKEY]:
    """S-SEC-5: the zone keys a DS record names (same tag, algorithm and digest)."""
    wanted = list(ds_set)
    named = []
    for rdata in keys:
        key = cast(dns.rdtypes.ANY.DNSKEY.DNSKEY, rdata)
        if not key.flags & dns.rdtypes.dnskeybase.Flag.ZONE:
            continue
        for ds in wanted:
            if ds.key_tag != dns.dnssec.key_id(key) or ds.algorithm != key.algorithm:
                continue
            try:
                made = dns.dnssec.make_ds(zone, key, ds.digest_type, validating=True)
            except (dns.exception.UnsupportedAlgorithm, ValueError):
                continue
            if made.digest == ds.digest:
                named.append(key)
                break
    return named


def verify_keyset(
    signed: Signed,
    zone: dns.name.Name,
    trusted: Iterable[dns.rdtypes.ANY.DNSKEY.DNSKEY],
    now: float,
) -> None:
    """S-SEC-5: a zone's DNSKEY RRset holds when a key the parent (or the anchor) vouches
    for is in it and signs it."""
    trusted = [key for key in trusted if key in signed.rrset]
    if not trusted:
        raise DnssecBogus(f"no DNSKEY of {zone} matches its DS or trust anchor [S-SEC-5]")
    verify(signed, zone, dns.rrset.from_rdata_list(zone, signed.rrset.ttl, trusted), now)


# --- denials -----------------------------------------------------------------------------

UNSIGNED_DELEGATION, NO_DELEGATION = "unsigned_delegation", "no_delegation"


def ds_denial(
    name: dns.name.Name,
    zone: dns.name.Name,
    denials: list[Signed],
    keys: dns.rrset.RRset,
    now: float,
) -> str:
    """S-SEC-6/7: what a signed denial of a DS record at `name`, from `zone`, proves:
    UNSIGNED_DELEGATION (a delegation with no DS: the child is unsigned), or NO_DELEGATION
    (no zone starts at `name`). Every NSEC/NSEC3 used is verified with `keys`. Raises
    `DnssecBogus` when the denial proves neither."""
    nsec = [d for d in denials if d.rrset.rdtype == NSEC]
    nsec3 = [d for d in denials if d.rrset.rdtype == NSEC3]
    if nsec:
        return _nsec_ds_denial(name, zone, nsec, keys, now)
    if nsec3:
        return _nsec3_ds_denial(name, zone, nsec3, keys, now)
    raise DnssecBogus(f"no DS at {name}, and no NSEC or NSEC3 proving it [S-SEC-6]")


def _delegation(name: dns.name.Name, types: set[int]) -> str:
    if DS in types:
        raise DnssecBogus(f"the denial of a DS at {name} says it has one [S-SEC-6]")
    return UNSIGNED_DELEGATION if NS in types and SOA not in types else NO_DELEGATION


def _nsec_ds_denial(
    name: dns.name.Name, zone: dns.name.Name, nsecs: list[Signed], keys: dns.rrset.RRset, now: float
) -> str:
    for signed in nsecs:
        owner = signed.rrset.name
        record = cast(dns.rdtypes.ANY.NSEC.NSEC, signed.rrset[0])
        if owner == name:
            verify(signed, zone, keys, now)
            return _delegation(name, bitmap_types(record.windows))
        if covers(owner, record.next, name, zone):
            # Nothing is at `name` (or only names below it: an empty non-terminal); either
            # way no NS record, so no zone starts there.
            verify(signed, zone, keys, now)
            return NO_DELEGATION
    raise DnssecBogus(f"no NSEC matches or covers {name} [S-SEC-6]")


def covers(
    owner: dns.name.Name, following: dns.name.Name, name: dns.name.Name, zone: dns.name.Name
) -> bool:
    """Whether an NSEC from `owner` to `following` (canonical order; the last wraps to the
    zone's apex) says that `name` lies between them."""
    if not name.is_subdomain(zone):
        return False
    if owner < following:
        return bool(owner < name < following)
    return bool(name > owner or name < following)  # the last NSEC of the zone


def bitmap_types(windows: Iterable[tuple[int, bytes]]) -> set[int]:
    """The types an NSEC/NSEC3 type bitmap lists."""
    types = set()
    for window, bitmap in windows:
        for index, byte in enumerate(bitmap):
            for bit in range(8):
                if byte & (0x80 >> bit):
                    types.add(window * 256 + index * 8 + bit)
    return types


def _nsec3_hash(name: dns.name.Name, record: dns.rdtypes.ANY.NSEC3.NSEC3) -> str:
    return dns.dnssec.nsec3_hash(name, record.salt, record.iterations, record.algorithm).lower()


def _nsec3_next(record: dns.rdtypes.ANY.NSEC3.NSEC3) -> str:
    return base64.b32hexencode(record.next).decode().rstrip("=").lower()


def _nsec3_ds_denial(
    name: dns.name.Name,
    zone: dns.name.Name,
    nsec3s: list[Signed],
    keys: dns.rrset.RRset,
    now: float,
) -> str:
    first = cast(dns.rdtypes.ANY.NSEC3.NSEC3, nsec3s[0].rrset[0])
    if first.algorithm != 1:
        raise DnssecBogus(f"NSEC3 hash algorithm {first.algorithm} is not SHA-1 [S-SEC-7]")
    if first.iterations > NSEC3_MAX_ITERATIONS:
        return UNSIGNED_DELEGATION  # RFC 9276 3.2: too costly to check; treated as unsigned
    hashed = {
        d.rrset.name.labels[0].decode().lower(): d for d in nsec3s if d.rrset.name.parent() == zone
    }

    def matching(candidate: dns.name.Name) -> Signed | None:
        return hashed.get(_nsec3_hash(candidate, first))

    if (match := matching(name)) is not None:
        verify(match, zone, keys, now)
        return _delegation(
            name, bitmap_types(cast(dns.rdtypes.ANY.NSEC3.NSEC3, match.rrset[0]).windows)
        )
    # No NSEC3 for the name itself: the closest encloser proof (RFC 5155 8.3), whose next
    # closer name is covered by an NSEC3; with opt-out set, that may be an unsigned
    # delegation (RFC 5155 8.6), without it, no name at all.
    closer = name
    for encloser in _ancestors(name, zone):
        if (proof := matching(encloser)) is None:
            closer = encloser
            continue
        wanted = _nsec3_hash(closer, first)
        for owner_hash, signed in hashed.items():
            record = cast(dns.rdtypes.ANY.NSEC3.NSEC3, signed.rrset[0])
            if _hash_covers(owner_hash, _nsec3_next(record), wanted):
                verify(proof, zone, keys, now)
                verify(signed, zone, keys, now)
                opt_out = record.flags & 1
                return UNSIGNED_DELEGATION if opt_out else NO_DELEGATION
        break
    raise DnssecBogus(f"no NSEC3 matches {name} or proves its closest encloser [S-SEC-7]")


def _ancestors(name: dns.name.Name, zone: dns.name.Name) -> Iterable[dns.name.Name]:
    """The names above `name`, nearest first, down to and with the zone's apex."""
    while name != zone:
        name = name.parent()
        yield name


def _hash_covers(owner: str, following: str, wanted: str) -> bool:
    if owner < following:
        return owner < wanted < following
    return wanted > owner or wanted < following


def wildcard_source(signed: Signed) -> dns.name.Name | None:
    """S-SEC-8: for an RRset made from a wildcard (its RRSIG counts fewer labels than its
    name), the next closer name, whose absence must be proven; None otherwise."""
    if signed.sigs is None:
        return None
    name = signed.rrset.name
    labels = len(name) - 1 - (1 if name.labels[0] == b"*" else 0)
    counted = min(cast(dns.rdtypes.ANY.RRSIG.RRSIG, s).labels for s in signed.sigs)
    if counted >= labels:
        return None
    return name.split(counted + 2)[1]


def proves_absent(
    name: dns.name.Name,
    zone: dns.name.Name,
    denials: list[Signed],
    keys: dns.rrset.RRset,
    now: float,
) -> bool:
    """S-SEC-8: whether a verified NSEC covers `name`, or an NSEC3 covers its hash."""
    for signed in denials:
        record = signed.rrset[0]
        if signed.rrset.rdtype == NSEC:
            nsec = cast(dns.rdtypes.ANY.NSEC.NSEC, record)
            hit = covers(signed.rrset.name, nsec.next, name, zone)
        elif signed.rrset.rdtype == NSEC3 and signed.rrset.name.parent() == zone:
            nsec3 = cast(dns.rdtypes.ANY.NSEC3.NSEC3, record)
            owner = signed.rrset.name.labels[0].decode().lower()
            hit = _hash_covers(owner, _nsec3_next(nsec3), _nsec3_hash(name, nsec3))
        else:
            continue
        if hit:
            verify(signed, zone, keys, now)
            return True
    return False
