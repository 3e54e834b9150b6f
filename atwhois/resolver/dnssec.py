"""DNSSEC rules (docs/spec.md: S-SEC-*), as plain functions over DNS data: trust anchors, a
zone's proven keys, which signatures hold, and the work one resolution may spend on them.
The proofs of absence (NSEC, NSEC3) are `resolver.dnssec_denial`; the walk that asks for
keys and proofs, and keeps them, is `resolver.dnssec_chain`; dnspython's `dns.dnssec` (over
`cryptography`) does the signature math.

Every value here comes from a stranger (the zone's owner, or whoever answers for the
resolver): what is tried is capped before it is computed (S-SEC-14, after KeyTrap), and a
record that cannot be read is a reason to refuse, never an exception.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, cast

import dns.dnssec
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdataset
import dns.rdatatype
import dns.rdtypes.ANY.DNSKEY
import dns.rdtypes.ANY.DS
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
NS, SOA, CNAME = RdataType.NS, RdataType.SOA, RdataType.CNAME
Key = dns.rdtypes.ANY.DNSKEY.DNSKEY
Sig = dns.rdtypes.ANY.RRSIG.RRSIG

# S-SEC-3: RFC 8624's algorithms a validator must or should check; a zone whose every DS
# names another is treated as unsigned, not as broken.
SUPPORTED_ALGORITHMS = frozenset({8, 10, 13, 14, 15, 16})
SUPPORTED_DIGESTS = frozenset({1, 2, 4})

# S-SEC-14: the work one resolution may do, whatever the zones hold (the limits validating
# resolvers adopted after KeyTrap, CVE-2023-50387, and the NSEC3 hashing attacks). Past a
# limit nothing more is computed: the answer is bogus by that rule.
MAX_KEYS_PER_TAG = 2  # keys of one key tag and algorithm tried for a signature
MAX_SIGS_PER_RRSET = 4  # RRSIGs of one RRset tried (a rollover has two or three)
MAX_SIGNATURE_CHECKS = 32  # signature verifications in one resolution
MAX_NSEC3_HASHES = 32  # names hashed for NSEC3 in one resolution
MAX_DENIAL_RECORDS = 8  # NSEC or NSEC3 records one proof of absence may hold
MAX_REASON = 300  # characters of a refusal's reason (it is stored in reports)


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
    """S-SEC-9: the answer of a resolver that does not pass DNSSEC records on (or of one who
    removed them): it does not echo the DO bit it was asked with, and carries no signature."""
    signed = any(r.rdtype == RRSIG for section in _sections(response) for r in section)
    return not signed and not response.ednsflags & dns.flags.DO


def _sections(response: dns.message.Message) -> tuple[list[dns.rrset.RRset], ...]:
    return (response.answer, response.authority)


def clipped(reason: str) -> str:
    """A reason short enough to store, keeping its rule tag (at the end) when cut."""
    if len(reason) <= MAX_REASON:
        return reason
    tag = reason[reason.rfind(" [") :] if reason.endswith("]") else ""
    return reason[: MAX_REASON - len(tag) - 1] + "…" + tag


# --- the work of one resolution --------------------------------------------------------


@dataclass
class Budget:
    """What one resolution may still spend (S-SEC-14), and what it spent. NSEC3 hashes are
    kept for the resolution: the same name under the same parameters is hashed once."""

    signatures: int = MAX_SIGNATURE_CHECKS
    hashes: int = MAX_NSEC3_HASHES
    spent_signatures: int = 0
    spent_hashes: int = 0
    _hashed: dict[tuple[dns.name.Name, bytes, int], str] = field(default_factory=dict)

    def signature(self) -> None:
        """One signature verification, or `OverBudget` when none is left."""
        if self.spent_signatures >= self.signatures:
            raise OverBudget(
                f"more than {self.signatures} signature checks in one resolution [S-SEC-14]"
            )
        self.spent_signatures += 1

    def nsec3_hash(self, name: dns.name.Name, salt: bytes, iterations: int) -> str:
        """RFC 5155's SHA-1 hash of `name`, in lower-case base32hex; the caller has checked
        the iterations against the cap (S-SEC-7)."""
        key = (name, salt, iterations)
        found = self._hashed.get(key)
        if found is None:
            if self.spent_hashes >= self.hashes:
                raise OverBudget(
                    f"more than {self.hashes} NSEC3 hashes in one resolution [S-SEC-14]"
                )
            self.spent_hashes += 1
            found = dns.dnssec.nsec3_hash(name, salt, iterations, 1).lower()
            self._hashed[key] = found
        return found


class OverBudget(DnssecBogus):
    """A resolution ran out of the work it may do (S-SEC-14): bogus, and, as it says nothing
    of the zone itself, never kept."""


# --- trust anchors ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Anchor:
    """A zone trusted without a parent: its key-signing keys, named by DS or given whole."""

    zone: dns.name.Name
    ds: tuple[dns.rdtypes.ANY.DS.DS, ...] = ()
    keys: tuple[Key, ...] = ()


def parse_anchors(lines: Iterable[str]) -> dict[dns.name.Name, Anchor]:
    """Trust anchors from presentation lines, `ZONE [TTL] [IN] DS|DNSKEY RDATA` (what
    `dig DS` or `keymgr ds` prints). Raises `InvalidInput` naming the line."""
    found: dict[dns.name.Name, tuple[list[dns.rdtypes.ANY.DS.DS], list[Key]]] = {}
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
            keys.append(cast(Key, rdata))
    return {zone: Anchor(zone, tuple(ds), tuple(keys)) for zone, (ds, keys) in found.items()}


def closest_anchor(name: dns.name.Name, anchors: Iterable[dns.name.Name]) -> dns.name.Name | None:
    """The deepest anchored zone at or above `name` (S-SEC-2)."""
    above = [zone for zone in anchors if name.is_subdomain(zone)]
    return max(above, key=len) if above else None


# --- keys ----------------------------------------------------------------------------------


def _is_zone_key(key: Key) -> bool:
    return bool(key.flags & dns.rdtypes.dnskeybase.Flag.ZONE) and key.protocol == 3


@dataclass(frozen=True, slots=True)
class ZoneKeys:
    """A zone's keys by key tag and algorithm, as a signature names them: at most
    `MAX_KEYS_PER_TAG` of each (S-SEC-14), so that a set of keys sharing one tag (KeyTrap)
    costs two verifications per signature, not thousands. `colliding` counts the keys set
    aside that way, for the reason a refusal gives."""

    by_tag: Mapping[tuple[int, int], tuple[Key, ...]]
    colliding: int = 0

    @classmethod
    def of(cls, keys: Iterable[dns.rdata.Rdata]) -> ZoneKeys:
        by_tag: dict[tuple[int, int], list[Key]] = {}
        colliding = 0
        for rdata in keys:
            key = cast(Key, rdata)
            if not _is_zone_key(key):
                continue
            kept = by_tag.setdefault((key.key_id(), key.algorithm), [])
            if len(kept) < MAX_KEYS_PER_TAG:
                kept.append(key)
            else:
                colliding += 1
        return cls({tag: tuple(keys) for tag, keys in by_tag.items()}, colliding)

    @property
    def size(self) -> int:
        """About the bytes these keys hold in memory, for the walk's byte bound (S-SEC-11):
        each key's material, and what a key object and its index cost beside it."""
        return 512 + sum(len(k.key) + 240 for keys in self.by_tag.values() for k in keys)


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
) -> list[Key]:
    """S-SEC-5: the zone keys a DS record names (same tag, algorithm and digest); at most
    `MAX_KEYS_PER_TAG` candidates hashed for each DS (S-SEC-14)."""
    named = []
    for ds in ds_set:
        tried = 0
        for rdata in keys:
            key = cast(Key, rdata)
            if not _is_zone_key(key) or key.algorithm != ds.algorithm:
                continue
            if key.key_id() != ds.key_tag or tried >= MAX_KEYS_PER_TAG:
                continue
            tried += 1
            try:
                made = dns.dnssec.make_ds(zone, key, ds.digest_type, validating=True)
            except (dns.exception.UnsupportedAlgorithm, ValueError):
                continue
            if made.digest == ds.digest and key not in named:
                named.append(key)
    return named


# --- signatures ----------------------------------------------------------------------------


def verify(signed: Signed, zone: dns.name.Name, keys: ZoneKeys, now: float, budget: Budget) -> Sig:
    """S-SEC-4: an RRset holds when one of its RRSIGs by `zone` verifies under the zone's
    keys and is within its validity period; returns that RRSIG. RRSIGs naming no key of
    the zone are set aside unverified; of the rest, at most `MAX_SIGS_PER_RRSET` are tried
    (S-SEC-14). Raises `DnssecBogus` saying what failed, once per reason."""
    what = f"{signed.rrset.name} {dns.rdatatype.to_text(signed.rrset.rdtype)}"
    if signed.sigs is None:
        raise DnssecBogus(f"{what} is not signed, in signed zone {zone} [S-SEC-4]")
    sigs = [cast(Sig, s) for s in signed.sigs]
    by_zone = [s for s in sigs if s.signer == zone]
    if not by_zone:
        signers = sorted({str(s.signer) for s in sigs})[:3]
        raise DnssecBogus(f"{what} is signed by {', '.join(signers)}, not by {zone} [S-SEC-4]")
    named = [s for s in by_zone if (s.key_tag, s.algorithm) in keys.by_tag]
    if not named:
        tags = sorted({s.key_tag for s in by_zone})[:3]
        raise DnssecBogus(
            f"{what}: its RRSIGs name key tag(s) {', '.join(map(str, tags))}, no key of "
            f"{zone} [S-SEC-4]"
        )
    reasons: Counter[str] = Counter()
    for sig in named[:MAX_SIGS_PER_RRSET]:
        if sig.expiration < now:
            reasons["expired"] += 1
            continue
        if sig.inception > now:
            reasons["not yet valid"] += 1
            continue
        candidates = keys.by_tag[(sig.key_tag, sig.algorithm)]
        for _ in candidates:
            budget.signature()
        rdataset = dns.rdataset.from_rdata_list(0, candidates)
        try:
            dns.dnssec.validate_rrsig(signed.rrset, sig, {zone: rdataset}, now=now)
            return sig
        except dns.exception.ValidationFailure as err:
            reasons[str(err)] += 1
        except dns.exception.UnsupportedAlgorithm as err:
            reasons[f"{err} [S-SEC-3]"] += 1
    said = "; ".join(f"{r} (x{n})" if n > 1 else r for r, n in reasons.items())
    capped = len(named) > MAX_SIGS_PER_RRSET or keys.colliding
    if capped:
        said += (
            f"; {min(len(named), MAX_SIGS_PER_RRSET)} of its {len(sigs)} RRSIGs tried, with at "
            f"most {MAX_KEYS_PER_TAG} keys of a tag ({keys.colliding} more keys share tags)"
        )
    rule = "S-SEC-14" if capped else "S-SEC-4"
    raise DnssecBogus(clipped(f"{what}: no signature by {zone} holds: {said} [{rule}]"))


def verify_keyset(
    signed: Signed, zone: dns.name.Name, trusted: Iterable[Key], now: float, budget: Budget
) -> ZoneKeys:
    """S-SEC-5: a zone's DNSKEY RRset holds when a key the parent (or the anchor) vouches
    for is in it and signs it; returns the zone's keys, indexed (`ZoneKeys`)."""
    vouched = [key for key in trusted if key in signed.rrset]
    if not vouched:
        raise DnssecBogus(f"no DNSKEY of {zone} matches its DS or trust anchor [S-SEC-5]")
    verify(signed, zone, ZoneKeys.of(vouched), now, budget)
    return ZoneKeys.of(signed.rrset)


def wildcard_source(name: dns.name.Name, sig: Sig) -> dns.name.Name | None:
    """S-SEC-8: for an RRset at `name` made from a wildcard (the RRSIG that verified counts
    fewer labels than the name), the next closer name, whose absence must be proven; None
    otherwise."""
    labels = len(name) - 1 - (1 if name.labels[0] == b"*" else 0)
    if sig.labels >= labels:
        return None
    return name.split(sig.labels + 2)[1]
