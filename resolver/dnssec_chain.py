"""The DNSSEC walk (S-SEC-*): from a trust anchor down to a DNS answer, asking the configured
resolver for the DS and DNSKEY records on the way, and keeping what it proved (per zone,
and per name where a delegation was looked for) as long as the records' TTLs and
signatures allow: the next answer under the same zone costs no query but its own.

The rules are `resolver.dnssec`'s; here only the order of the questions and the memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar, cast

import dns.message
import dns.name
import dns.rdtypes.ANY.RRSIG
import dns.rrset

from .dnssec import (
    DNSKEY,
    DS,
    NSEC,
    NSEC3,
    UNSIGNED_DELEGATION,
    Anchor,
    RdataType,
    Signed,
    closest_anchor,
    ds_denial,
    keys_named,
    proves_absent,
    signed_rrsets,
    strips_dnssec,
    usable_ds,
    verify,
    verify_keyset,
    wildcard_source,
)
from .errors import AtwhoisError, DnssecBogus
from .identity import BOGUS, INDETERMINATE, INSECURE, SECURE, DnssecCheck

# Asks the resolver one question with DNSSEC records wanted (DO) and checking left to us
# (CD); the whole response, also for NODATA and NXDOMAIN. Transient failures raise.
Ask = Callable[[dns.name.Name, RdataType], Awaitable[dns.message.Message]]

# S-SEC-11: a proof is kept at most this long, whatever the TTLs say; a failed one briefly
# (RFC 4035 4.7): it may be an attack, or a zone being repaired.
MAX_KEEP_SECONDS = 3600.0
BOGUS_KEEP_SECONDS = 30.0
_ZONE_STARTS = "zone"  # a DS record exists at the name: a signed zone starts there
_STRIPPED = "the resolver returns no DNSSEC records (it strips them) [S-SEC-9]"
_ORDER = {SECURE: 0, INSECURE: 1, INDETERMINATE: 2, BOGUS: 3}

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Indeterminate(AtwhoisError):
    """The walk cannot say: the resolver strips DNSSEC records."""


@dataclass(frozen=True, slots=True)
class _Zone:
    check: DnssecCheck  # SECURE with its keys; else what the chain above it says
    keys: dns.rrset.RRset | None = None


class _Cut(NamedTuple):
    """What a DS question at a name proved: a signed zone starts there (`_ZONE_STARTS`), an
    unsigned one does (`UNSIGNED_DELEGATION`, with the denial that proved it), or none."""

    kind: str
    proof: str = ""  # NSEC or NSEC3


class _Kept(Generic[K, V]):
    """At most `limit` values, each until its own deadline; the least recently used go."""

    def __init__(self, limit: int, clock: Callable[[], float]) -> None:
        self._items: OrderedDict[K, tuple[V, float]] = OrderedDict()
        self._limit = limit
        self._clock = clock

    def get(self, key: K) -> V | None:
        found = self._items.get(key)
        if found is None or found[1] <= self._clock():
            return None
        self._items.move_to_end(key)
        return found[0]

    def put(self, key: K, value: V, seconds: float) -> None:
        self._items[key] = (value, self._clock() + seconds)
        self._items.move_to_end(key)
        while len(self._items) > self._limit:
            self._items.popitem(last=False)


class DnssecChain:
    """Checks DNS answers against `anchors`, asking through `ask`."""

    def __init__(
        self,
        ask: Ask,
        anchors: Mapping[dns.name.Name, Anchor],
        max_zones: int = 4096,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ask = ask
        self._anchors = anchors
        self._clock = clock
        self._zones: _Kept[dns.name.Name, _Zone] = _Kept(max_zones, clock)
        self._cuts: _Kept[dns.name.Name, _Cut] = _Kept(max_zones * 4, clock)
        self._asking: dict[tuple[str, dns.name.Name], asyncio.Future[object]] = {}

    async def warm(self, name: str) -> None:
        """Prove the keys of the anchor above `name` while its answer is being asked for:
        every walk under that anchor needs them. A hint only: what fails here fails again,
        and is said, in `check`."""
        anchor = closest_anchor(dns.name.from_text(name), self._anchors)
        if anchor is not None and self._zones.get(anchor) is None:
            with contextlib.suppress(AtwhoisError):
                await self._zone(anchor, anchor)

    async def check(self, response: dns.message.Message) -> DnssecCheck:
        """What DNSSEC says of a positive answer: the weakest state of its RRsets (a CNAME
        and its target are each in their own zone)."""
        checks = [await self._check_rrset(s, response) for s in signed_rrsets(response.answer)]
        if not checks:
            return DnssecCheck(INDETERMINATE, reason="the answer holds no records")
        return max(checks, key=lambda check: _ORDER[check.state])

    async def _check_rrset(self, signed: Signed, response: dns.message.Message) -> DnssecCheck:
        name = signed.rrset.name
        anchor = closest_anchor(name, self._anchors)
        if anchor is None:
            return DnssecCheck(
                INDETERMINATE, reason=f"no trust anchor at or above {name} [S-SEC-2]"
            )
        try:
            if signed.sigs is None:
                if strips_dnssec(response):
                    raise _Indeterminate(_STRIPPED)
                return await self._unsigned(name, anchor)
            signer = cast(dns.rdtypes.ANY.RRSIG.RRSIG, signed.sigs[0]).signer
            if not name.is_subdomain(signer) or not signer.is_subdomain(anchor):
                raise DnssecBogus(f"{name} is signed by {signer}, not by a zone above it [S-SEC-4]")
            # The anchor's keys are needed whatever the signer: asked for at the same time.
            zone, _ = await asyncio.gather(self._zone(signer, anchor), self._zone(anchor, anchor))
            if zone.keys is None:
                return zone.check
            now = self._clock()
            verify(signed, signer, zone.keys, now)
            closer = wildcard_source(signed)
            if closer is not None and not proves_absent(
                closer, signer, _denials(response), zone.keys, now
            ):
                raise DnssecBogus(
                    f"{name} was made from a wildcard, with no proof that {closer} does not "
                    "exist [S-SEC-8]"
                )
            return DnssecCheck(SECURE, str(signer))
        except DnssecBogus as err:
            return DnssecCheck(BOGUS, reason=str(err))
        except _Indeterminate as err:
            return DnssecCheck(INDETERMINATE, reason=str(err))

    # --- zones ---------------------------------------------------------------------------

    async def _zone(self, zone: dns.name.Name, anchor: dns.name.Name) -> _Zone:
        """The zone's keys, proven from the anchor (kept); or why they cannot be."""
        kept = self._zones.get(zone)
        if kept is not None:
            return kept
        return cast(
            _Zone,
            await self._once(("zone", zone), functools.partial(self._prove_zone, zone, anchor)),
        )

    async def _prove_zone(self, zone: dns.name.Name, anchor: dns.name.Name) -> _Zone:
        try:
            proven, seconds = await (
                self._anchored_keys(zone) if zone == anchor else self._delegated_keys(zone, anchor)
            )
        except DnssecBogus as err:
            proven, seconds = _Zone(DnssecCheck(BOGUS, reason=str(err))), BOGUS_KEEP_SECONDS
        self._zones.put(zone, proven, seconds)
        return proven

    async def _anchored_keys(self, zone: dns.name.Name) -> tuple[_Zone, float]:
        anchor = self._anchors[zone]
        keyset, _ = await self._signed(zone, DNSKEY)
        if keyset is None:
            raise DnssecBogus(f"trust anchor {zone} serves no signed DNSKEY record [S-SEC-5]")
        trusted = [*anchor.keys, *keys_named(zone, keyset.rrset, usable_ds(anchor.ds))]
        verify_keyset(keyset, zone, trusted, self._clock())
        return _Zone(DnssecCheck(SECURE, str(zone)), keyset.rrset), self._keep(keyset)

    async def _delegated_keys(
        self, zone: dns.name.Name, anchor: dns.name.Name
    ) -> tuple[_Zone, float]:
        # The zone's keys are asked for with its DS: one round trip, not two (wasted only
        # when the DS turns out to be absent).
        asked_ds, asked_keys = await asyncio.gather(
            self._signed(zone, DS), self._signed(zone, DNSKEY), return_exceptions=True
        )
        if isinstance(asked_ds, BaseException):
            raise asked_ds
        ds, response = asked_ds
        if ds is None:
            return await self._no_ds(zone, anchor, response)
        parent = cast(dns.rdtypes.ANY.RRSIG.RRSIG, cast(dns.rrset.RRset, ds.sigs)[0]).signer
        if parent == zone or not zone.is_subdomain(parent) or not parent.is_subdomain(anchor):
            raise DnssecBogus(
                f"the DS of {zone} is signed by {parent}, not by its parent [S-SEC-5]"
            )
        above = await self._zone(parent, anchor)
        if above.keys is None:
            return above, BOGUS_KEEP_SECONDS
        verify(ds, parent, above.keys, self._clock())
        usable = usable_ds(ds.rrset)
        if not usable:
            reason = (
                f"the DS records of {zone} name only algorithms or digests not checked [S-SEC-3]"
            )
            return _Zone(DnssecCheck(INSECURE, str(zone), reason)), self._keep(ds)
        if isinstance(asked_keys, BaseException):
            raise asked_keys
        keyset, _ = asked_keys
        if keyset is None:
            raise DnssecBogus(f"{zone} has a DS record but serves no signed DNSKEY [S-SEC-5]")
        verify_keyset(keyset, zone, keys_named(zone, keyset.rrset, usable), self._clock())
        return _Zone(DnssecCheck(SECURE, str(zone)), keyset.rrset), self._keep(ds, keyset)

    async def _no_ds(
        self, zone: dns.name.Name, anchor: dns.name.Name, response: dns.message.Message
    ) -> tuple[_Zone, float]:
        """A zone's RRSIG named it as signer, and its parent has no DS for it: unsigned if the
        parent proves a delegation without DS; if no zone starts there, the RRSIG lied."""
        denials = _denials(response)
        parent = _signer(denials)
        if parent is None or parent == zone or not zone.is_subdomain(parent):
            raise DnssecBogus(f"no DS at {zone}, and no signed denial from its parent [S-SEC-6]")
        above = await self._zone(parent, anchor)
        if above.keys is None:
            return above, BOGUS_KEEP_SECONDS
        if ds_denial(zone, parent, denials, above.keys, self._clock()) != UNSIGNED_DELEGATION:
            raise DnssecBogus(
                f"{zone} signs records, but {parent} proves no zone starts there [S-SEC-6]"
            )
        return _Zone(_unsigned_below(zone, parent, _proof(denials))), self._keep(*denials)

    # --- unsigned answers ----------------------------------------------------------------

    async def _unsigned(self, name: dns.name.Name, anchor: dns.name.Name) -> DnssecCheck:
        """S-SEC-6: an unsigned answer is insecure only below a delegation proven to have no
        DS; the walk looks for one from the anchor down, one label at a time."""
        zone = anchor
        proven = await self._zone(zone, anchor)
        for depth in range(len(anchor) + 1, len(name) + 1):
            if proven.keys is None:
                return proven.check
            below = name.split(depth)[1]
            cut = self._cuts.get(below)
            if cut is None:
                cut = cast(
                    _Cut,
                    await self._once(
                        ("cut", below), functools.partial(self._find_cut, below, zone, proven)
                    ),
                )
            if cut.kind == UNSIGNED_DELEGATION:
                return _unsigned_below(below, zone, cut.proof)
            if cut.kind == _ZONE_STARTS:
                zone, proven = below, await self._zone(below, anchor)
        if proven.keys is None:
            return proven.check
        raise DnssecBogus(f"{name} is not signed, in signed zone {zone} [S-SEC-4]")

    async def _find_cut(self, name: dns.name.Name, zone: dns.name.Name, proven: _Zone) -> _Cut:
        ds, response = await self._signed(name, DS)
        if ds is not None:
            cut, seconds = _Cut(_ZONE_STARTS), self._keep(ds)
        else:
            denials = _denials(response)
            keys = cast(dns.rrset.RRset, proven.keys)
            kind = ds_denial(name, zone, denials, keys, self._clock())
            cut, seconds = _Cut(kind, _proof(denials)), self._keep(*denials)
        self._cuts.put(name, cut, seconds)
        return cut

    # --- asking --------------------------------------------------------------------------

    async def _signed(
        self, name: dns.name.Name, rdtype: RdataType
    ) -> tuple[Signed | None, dns.message.Message]:
        """The RRset at `name` and its signatures, or None when there is none. Raises
        `_Indeterminate` when the resolver strips signatures, `DnssecBogus` when a record
        comes unsigned from a resolver that does pass them on."""
        response = await self._ask(name, rdtype)
        for signed in signed_rrsets(response.answer):
            if signed.rrset.name == name and signed.rrset.rdtype == rdtype:
                if signed.sigs is not None:
                    return signed, response
                if strips_dnssec(response):
                    raise _Indeterminate(_STRIPPED)
                raise DnssecBogus(f"{name} {rdtype.name} comes without a signature [S-SEC-4]")
        if strips_dnssec(response):
            raise _Indeterminate(_STRIPPED)
        return None, response

    async def _once(
        self, key: tuple[str, dns.name.Name], prove: Callable[[], Awaitable[object]]
    ) -> object:
        """One walk per zone or name at a time: lookups arriving meanwhile wait for it."""
        asking = self._asking.get(key)
        if asking is None:
            asking = asyncio.ensure_future(prove())
            self._asking[key] = asking
            asking.add_done_callback(lambda _: self._asking.pop(key, None))
        return await asyncio.shield(asking)

    def _keep(self, *proofs: Signed) -> float:
        """How long a proof built on these records holds: their TTLs and signatures."""
        now = self._clock()
        seconds = MAX_KEEP_SECONDS
        for proof in proofs:
            seconds = min(seconds, proof.rrset.ttl)
            for sig in proof.sigs or ():
                seconds = min(seconds, cast(dns.rdtypes.ANY.RRSIG.RRSIG, sig).expiration - now)
        return max(seconds, 0.0)


def _proof(denials: list[Signed]) -> str:
    return "NSEC3" if any(d.rrset.rdtype == NSEC3 for d in denials) else "NSEC"


def _unsigned_below(cut: dns.name.Name, parent: dns.name.Name, proof: str) -> DnssecCheck:
    return DnssecCheck(
        INSECURE,
        str(cut),
        f"{parent} delegates {cut} with no DS record, proven by {proof} [S-SEC-6]",
    )


def _denials(response: dns.message.Message) -> list[Signed]:
    return [s for s in signed_rrsets(response.authority) if s.rrset.rdtype in (NSEC, NSEC3)]


def _signer(denials: list[Signed]) -> dns.name.Name | None:
    for signed in denials:
        if signed.sigs is not None:
            return cast(dns.rdtypes.ANY.RRSIG.RRSIG, signed.sigs[0]).signer
    return None
