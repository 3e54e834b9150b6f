"""Proofs of absence (S-SEC-6, -7, -8, -12, -16): what the NSEC or NSEC3 records a zone sent
prove about a name: that no DS is there (an unsigned delegation, or no zone), that the name
a wildcard answer stands for does not exist, that no TXT is at a name. Plain functions over
DNS data, each record's signature verified with the zone's proven keys before anything is
read from it (S-SEC-6); records that cannot be proofs (an NSEC3 of an unknown hash
algorithm, an owner that is no hash) are set aside, never an exception.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import dns.name
import dns.rdatatype
import dns.rdtypes.ANY.NSEC
import dns.rdtypes.ANY.NSEC3

from .dnssec import (
    CNAME,
    DS,
    MAX_DENIAL_RECORDS,
    NS,
    NSEC,
    NSEC3,
    SOA,
    Budget,
    Signed,
    ZoneKeys,
    verify,
)
from .errors import DnssecBogus

# What a denial of DS proves (S-SEC-6/7)
UNSIGNED_DELEGATION, NO_DELEGATION = "unsigned_delegation", "no_delegation"
# What a proof of absence proves (S-SEC-8, S-SEC-16): the name or the type is not there; or
# the answer is insecure, by NSEC3 opt-out, or by NSEC3 too costly to check (RFC 9276 3.2)
PROVEN, OPTED_OUT, COSTLY = "proven", "opted_out", "costly"
# S-SEC-7: RFC 9276 lets a validator treat NSEC3 with more iterations as unsigned
NSEC3_MAX_ITERATIONS = 150
_BASE32HEX = frozenset(b"0123456789abcdefghijklmnopqrstuvABCDEFGHIJKLMNOPQRSTUV")


def bitmap_types(windows: Iterable[tuple[int, bytes]]) -> set[int]:
    """The types an NSEC/NSEC3 type bitmap lists."""
    types = set()
    for window, bitmap in windows:
        for index, byte in enumerate(bitmap):
            for bit in range(8):
                if byte & (0x80 >> bit):
                    types.add(window * 256 + index * 8 + bit)
    return types


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


def _one_kind(denials: list[Signed]) -> int | None:
    """S-SEC-12, S-SEC-14: the kind of a proof (NSEC or NSEC3; None when there is none);
    a proof of both kinds, or of more records than any proof needs, is refused unread."""
    kinds = {d.rrset.rdtype for d in denials}
    if len(kinds) > 1:
        raise DnssecBogus("the proof of absence mixes NSEC and NSEC3 records [S-SEC-12]")
    if len(denials) > MAX_DENIAL_RECORDS:
        raise DnssecBogus(
            f"the proof of absence holds {len(denials)} NSEC/NSEC3 records, more than the "
            f"{MAX_DENIAL_RECORDS} any proof needs [S-SEC-14]"
        )
    return kinds.pop() if kinds else None


# --- NSEC ------------------------------------------------------------------------------------


def _nsec(signed: Signed) -> dns.rdtypes.ANY.NSEC.NSEC:
    return cast(dns.rdtypes.ANY.NSEC.NSEC, signed.rrset[0])


def _at(name: dns.name.Name, nsecs: list[Signed]) -> Signed | None:
    return next((s for s in nsecs if s.rrset.name == name), None)


def _covering(name: dns.name.Name, zone: dns.name.Name, nsecs: list[Signed]) -> Signed | None:
    return next((s for s in nsecs if covers(s.rrset.name, _nsec(s).next, name, zone)), None)


def _closest_encloser(name: dns.name.Name, covering: Signed) -> dns.name.Name:
    """The deepest ancestor of `name` that an NSEC covering it shows to exist: the longest
    common ancestor of the name with the NSEC's owner or with its next name."""
    owner, following = covering.rrset.name, _nsec(covering).next
    common = max(name.fullcompare(owner)[2], name.fullcompare(following)[2])
    return name.split(common)[1]


# --- NSEC3 -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Chain:
    """The usable NSEC3 records of one proof, by owner hash, and their one set of parameters."""

    by_hash: dict[str, Signed]
    salt: bytes
    iterations: int

    def record(self, owner_hash: str) -> dns.rdtypes.ANY.NSEC3.NSEC3:
        return cast(dns.rdtypes.ANY.NSEC3.NSEC3, self.by_hash[owner_hash].rrset[0])

    def covering(self, wanted: str) -> tuple[str, Signed] | None:
        for owner_hash, signed in self.by_hash.items():
            following = _next_hash(cast(dns.rdtypes.ANY.NSEC3.NSEC3, signed.rrset[0]))
            if _hash_covers(owner_hash, following, wanted):
                return owner_hash, signed
        return None


def _owner_hash(name: dns.name.Name, zone: dns.name.Name) -> str | None:
    """An NSEC3 owner's hash label, when it is one: 32 base32hex characters right under the
    zone (anything else in that place is no proof of anything)."""
    if name.parent() != zone:
        return None
    label = name.labels[0]
    if len(label) != 32 or not set(label) <= _BASE32HEX:
        return None
    return label.decode("ascii").lower()


def _next_hash(record: dns.rdtypes.ANY.NSEC3.NSEC3) -> str:
    return base64.b32hexencode(record.next).decode().rstrip("=").lower()


def _hash_covers(owner: str, following: str, wanted: str) -> bool:
    if owner < following:
        return owner < wanted < following
    return wanted > owner or wanted < following


def _chain(zone: dns.name.Name, nsec3s: list[Signed]) -> _Chain:
    """S-SEC-7: the NSEC3 records that can be read as proofs: SHA-1 (others are ignored,
    RFC 5155 8.1), flags 0 or 1 (8.2), an owner that is a hash under the zone; all of one
    salt and iteration count."""
    by_hash: dict[str, Signed] = {}
    params: set[tuple[bytes, int]] = set()
    for signed in nsec3s:
        record = cast(dns.rdtypes.ANY.NSEC3.NSEC3, signed.rrset[0])
        owner_hash = _owner_hash(signed.rrset.name, zone)
        if owner_hash is None or record.algorithm != 1 or record.flags > 1:
            continue
        if len(record.next) != 20:
            continue
        by_hash[owner_hash] = signed
        params.add((record.salt, record.iterations))
    if not by_hash:
        raise DnssecBogus(
            f"no NSEC3 of {zone} that can be read (SHA-1, an owner that is a hash) [S-SEC-7]"
        )
    if len(params) > 1:
        raise DnssecBogus(f"the NSEC3 records of {zone} disagree on their parameters [S-SEC-7]")
    salt, iterations = params.pop()
    return _Chain(by_hash, salt, iterations)


def _costly(chain: _Chain, zone: dns.name.Name, keys: ZoneKeys, now: float, budget: Budget) -> bool:
    """RFC 9276 3.2: NSEC3 of more iterations than a validator hashes make the answer
    insecure, once one of them is shown to be the zone's own (signed)."""
    if chain.iterations <= NSEC3_MAX_ITERATIONS:
        return False
    verify(next(iter(chain.by_hash.values())), zone, keys, now, budget)
    return True


def _ancestors(name: dns.name.Name, zone: dns.name.Name) -> Iterable[dns.name.Name]:
    """The names above `name`, nearest first, down to and with the zone's apex."""
    while name != zone and name.is_subdomain(zone) and len(name) > 1:
        name = name.parent()
        yield name


def _encloser_proof(
    name: dns.name.Name,
    zone: dns.name.Name,
    chain: _Chain,
    keys: ZoneKeys,
    now: float,
    budget: Budget,
) -> tuple[dns.name.Name, Signed] | None:
    """RFC 5155 8.3: the closest encloser (an ancestor whose hash an NSEC3 matches, its
    record verified) and the NSEC3 covering the next closer name (verified); None when the
    records prove neither."""
    closer = name
    for encloser in _ancestors(name, zone):
        owner = budget.nsec3_hash(encloser, chain.salt, chain.iterations)
        if owner not in chain.by_hash:
            closer = encloser
            continue
        found = chain.covering(budget.nsec3_hash(closer, chain.salt, chain.iterations))
        if found is None:
            return None
        verify(chain.by_hash[owner], zone, keys, now, budget)
        verify(found[1], zone, keys, now, budget)
        return encloser, found[1]
    return None


# --- what a proof proves -----------------------------------------------------------------


def _delegation(name: dns.name.Name, types: set[int]) -> str:
    if DS in types:
        raise DnssecBogus(f"the denial of a DS at {name} says it has one [S-SEC-6]")
    return UNSIGNED_DELEGATION if NS in types and SOA not in types else NO_DELEGATION


def ds_denial(
    name: dns.name.Name,
    zone: dns.name.Name,
    denials: list[Signed],
    keys: ZoneKeys,
    now: float,
    budget: Budget,
) -> str:
    """S-SEC-6/7: what a denial of a DS record at `name`, from `zone`, proves:
    UNSIGNED_DELEGATION (a delegation with no DS: the child is unsigned), or NO_DELEGATION
    (no zone starts at `name`). Raises `DnssecBogus` when it proves neither."""
    kind = _one_kind(denials)
    if kind == NSEC:
        if (at := _at(name, denials)) is not None:
            verify(at, zone, keys, now, budget)
            return _delegation(name, bitmap_types(_nsec(at).windows))
        if (covering := _covering(name, zone, denials)) is not None:
            # Nothing is at `name` (or only names below it: an empty non-terminal); either
            # way no NS record, so no zone starts there.
            verify(covering, zone, keys, now, budget)
            return NO_DELEGATION
        raise DnssecBogus(f"no NSEC matches or covers {name} [S-SEC-6]")
    if kind == NSEC3:
        chain = _chain(zone, denials)
        if _costly(chain, zone, keys, now, budget):
            return UNSIGNED_DELEGATION
        owner = budget.nsec3_hash(name, chain.salt, chain.iterations)
        if owner in chain.by_hash:
            verify(chain.by_hash[owner], zone, keys, now, budget)
            return _delegation(name, bitmap_types(chain.record(owner).windows))
        # No NSEC3 for the name itself: with opt-out on the one covering the next closer
        # name, an unsigned delegation may be there (RFC 5155 8.6); without, no name at all.
        proof = _encloser_proof(name, zone, chain, keys, now, budget)
        if proof is None:
            raise DnssecBogus(f"no NSEC3 matches {name} or proves its closest encloser [S-SEC-7]")
        opted_out = cast(dns.rdtypes.ANY.NSEC3.NSEC3, proof[1].rrset[0]).flags & 1
        return UNSIGNED_DELEGATION if opted_out else NO_DELEGATION
    raise DnssecBogus(f"no DS at {name}, and no NSEC or NSEC3 proving it [S-SEC-6]")


def wildcard_denial(
    closer: dns.name.Name,
    zone: dns.name.Name,
    denials: list[Signed],
    keys: ZoneKeys,
    now: float,
    budget: Budget,
) -> str:
    """S-SEC-8: an answer made from a wildcard holds when the next closer name is proven
    absent: a verified NSEC covering it, or a verified NSEC3 covering its hash (PROVEN);
    COSTLY when the zone's NSEC3 are too costly to hash (insecure). Raises `DnssecBogus`."""
    kind = _one_kind(denials)
    if kind == NSEC:
        if (covering := _covering(closer, zone, denials)) is not None:
            verify(covering, zone, keys, now, budget)
            return PROVEN
    elif kind == NSEC3:
        chain = _chain(zone, denials)
        if _costly(chain, zone, keys, now, budget):
            return COSTLY
        found = chain.covering(budget.nsec3_hash(closer, chain.salt, chain.iterations))
        if found is not None:
            verify(found[1], zone, keys, now, budget)
            return PROVEN
    raise DnssecBogus(
        f"an answer made from a wildcard, with no proof that {closer} does not exist [S-SEC-8]"
    )


def absence(
    name: dns.name.Name,
    rdtype: dns.rdatatype.RdataType,
    zone: dns.name.Name,
    denials: list[Signed],
    keys: ZoneKeys,
    now: float,
    budget: Budget,
) -> str:
    """S-SEC-16: that no `rdtype` record is at `name` (NODATA), or no such name (NXDOMAIN),
    from `zone`'s signed NSEC or NSEC3: PROVEN; OPTED_OUT or COSTLY when NSEC3 leave the
    answer insecure. Raises `DnssecBogus` when the records prove nothing."""
    kind = _one_kind(denials)
    if kind == NSEC:
        return _nsec_absence(name, rdtype, zone, denials, keys, now, budget)
    if kind == NSEC3:
        return _nsec3_absence(name, rdtype, zone, _chain(zone, denials), keys, now, budget)
    raise DnssecBogus(f"no {rdtype.name} at {name}, and no NSEC or NSEC3 proving it [S-SEC-16]")


def _lacks(types: set[int], rdtype: dns.rdatatype.RdataType) -> bool:
    return rdtype not in types and CNAME not in types


def _nsec_absence(
    name: dns.name.Name,
    rdtype: dns.rdatatype.RdataType,
    zone: dns.name.Name,
    nsecs: list[Signed],
    keys: ZoneKeys,
    now: float,
    budget: Budget,
) -> str:
    if (at := _at(name, nsecs)) is not None:  # NODATA: the name has other types only
        verify(at, zone, keys, now, budget)
        if _lacks(bitmap_types(_nsec(at).windows), rdtype):
            return PROVEN
        raise DnssecBogus(f"the NSEC at {name} lists {rdtype.name} [S-SEC-16]")
    covering = _covering(name, zone, nsecs)
    if covering is None:
        raise DnssecBogus(f"no NSEC matches or covers {name} [S-SEC-16]")
    verify(covering, zone, keys, now, budget)
    if _nsec(covering).next.is_subdomain(name):
        return PROVEN  # an empty non-terminal: names below it, no records at it
    wildcard = dns.name.Name([b"*", *_closest_encloser(name, covering).labels])
    if (at_wildcard := _at(wildcard, nsecs)) is not None:  # the wildcard has other types only
        verify(at_wildcard, zone, keys, now, budget)
        if _lacks(bitmap_types(_nsec(at_wildcard).windows), rdtype):
            return PROVEN
    elif (no_wildcard := _covering(wildcard, zone, nsecs)) is not None:
        verify(no_wildcard, zone, keys, now, budget)
        return PROVEN
    raise DnssecBogus(f"{name} is not there, but {wildcard} is not proven absent [S-SEC-16]")


def _nsec3_absence(
    name: dns.name.Name,
    rdtype: dns.rdatatype.RdataType,
    zone: dns.name.Name,
    chain: _Chain,
    keys: ZoneKeys,
    now: float,
    budget: Budget,
) -> str:
    if _costly(chain, zone, keys, now, budget):
        return COSTLY
    owner = budget.nsec3_hash(name, chain.salt, chain.iterations)
    if owner in chain.by_hash:  # NODATA (RFC 5155 8.5)
        verify(chain.by_hash[owner], zone, keys, now, budget)
        if _lacks(bitmap_types(chain.record(owner).windows), rdtype):
            return PROVEN
        raise DnssecBogus(f"the NSEC3 of {name} lists {rdtype.name} [S-SEC-16]")
    proof = _encloser_proof(name, zone, chain, keys, now, budget)  # NXDOMAIN (RFC 5155 8.4)
    if proof is None:
        raise DnssecBogus(f"no NSEC3 matches {name} or proves its closest encloser [S-SEC-16]")
    encloser, next_closer = proof
    if cast(dns.rdtypes.ANY.NSEC3.NSEC3, next_closer.rrset[0]).flags & 1:
        return OPTED_OUT  # an unsigned delegation may hold the name (RFC 5155 8.4)
    wildcard = dns.name.Name([b"*", *encloser.labels])
    wildcard_hash = budget.nsec3_hash(wildcard, chain.salt, chain.iterations)
    if wildcard_hash in chain.by_hash:  # wildcard NODATA (RFC 5155 8.7)
        verify(chain.by_hash[wildcard_hash], zone, keys, now, budget)
        if _lacks(bitmap_types(chain.record(wildcard_hash).windows), rdtype):
            return PROVEN
    elif (no_wildcard := chain.covering(wildcard_hash)) is not None:
        verify(no_wildcard[1], zone, keys, now, budget)
        return PROVEN
    raise DnssecBogus(f"{name} is not there, but {wildcard} is not proven absent [S-SEC-16]")
