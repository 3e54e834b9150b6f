"""The DNSSEC walk (S-SEC-*): from a trust anchor down to a DNS answer, or to the proof that
there is none, asking the configured resolver for the DS and DNSKEY records on the way, and
keeping what it proved (per zone, and per name where a delegation was looked for) as long as
the records' TTLs and signatures allow: the next answer under the same zone costs no query
but its own.

Its answers and its memory are a stranger's to shape, so each is bounded: a check ends
within its deadline, and a walk asks a bounded number of DS questions, at once (S-SEC-15);
a check spends a bounded number of signature checks and NSEC3 hashes (S-SEC-14); what is
kept fits a byte bound, and only what was proven is kept (S-SEC-11).

The rules are `resolver.dnssec`'s and `resolver.dnssec_denial`'s; here only the order of the
questions and the memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import cast

import dns.message
import dns.name
import dns.rdatatype
import dns.rrset

from atwhois.foundation import defaults

from .dnssec import (
    DNSKEY,
    DS,
    NSEC3,
    Anchor,
    Budget,
    OverBudget,
    RdataType,
    Signed,
    ZoneKeys,
    clipped,
    closest_anchor,
    keys_named,
    signed_rrsets,
    strips_dnssec,
    usable_ds,
    verify,
    verify_keyset,
    wildcard_source,
)
from .dnssec_denial import (
    COSTLY,
    NSEC3_MAX_ITERATIONS,
    OPTED_OUT,
    PROVEN,
    UNSIGNED_DELEGATION,
    absence,
    ds_denial,
    wildcard_denial,
)
from .dnssec_kept import (
    BOGUS_KEEP_SECONDS,
    STRIPPED,
    ZONE_STARTS,
    Ask,
    Cut,
    Indeterminate,
    Proofs,
    Zone,
    denials_in,
    signer_of,
)
from .errors import AtwhoisError, DnssecBogus, UpstreamTimeout
from .identity import BOGUS, INDETERMINATE, INSECURE, SECURE, DnssecCheck

# S-SEC-15: the DS questions one walk may ask looking for where an unsigned zone starts (a
# name 16 labels below its closest signed zone is not checked), and how many at once.
MAX_WALK_QUESTIONS = 16
WALK_BATCH = 8
_ORDER = {SECURE: 0, INSECURE: 1, INDETERMINATE: 2, BOGUS: 3}


class DnssecChain:
    """Checks DNS answers against `anchors`, asking through `ask`."""

    def __init__(
        self,
        ask: Ask,
        anchors: Mapping[dns.name.Name, Anchor],
        *,
        memory_bytes: int = defaults.DNSSEC_MEMORY_BYTES,
        deadline: float = 3.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._anchors = anchors
        self._clock = clock
        self.deadline = deadline
        self._proofs = Proofs(ask, memory_bytes, deadline, clock)
        # S-SEC-14: the work spent, in all (a check's own is bounded by its `Budget`)
        self.signature_checks = 0
        self.nsec3_hashes = 0

    @property
    def kept_bytes(self) -> int:
        """About the bytes the kept proofs hold (S-SEC-11)."""
        return self._proofs.kept_bytes

    async def warm(self, name: str) -> None:
        """Prove the keys of the anchor above `name` while its answer is being asked for:
        every walk under that anchor needs them. A hint only: what fails here fails again,
        and is said, in `check`."""
        anchor = closest_anchor(dns.name.from_text(name), self._anchors)
        if anchor is not None and self._proofs.zone(anchor) is None:
            with contextlib.suppress(AtwhoisError):
                await self._zone(anchor, anchor, Budget())

    async def check(self, response: dns.message.Message) -> DnssecCheck:
        """What DNSSEC says of a positive answer: the weakest state of its RRsets (a CNAME
        and its target are each in their own zone). Raises `UpstreamTimeout` when the
        walk does not end within the deadline (transient, like any unanswered question)."""
        rrsets = signed_rrsets(response.answer)
        if not rrsets:
            return DnssecCheck(INDETERMINATE, reason="the answer holds no records")
        checks = [
            await self._bounded(functools.partial(self._check_rrset, s, response)) for s in rrsets
        ]
        return max(checks, key=lambda check: _ORDER[check.state])

    async def check_absent(
        self, name: dns.name.Name, rdtype: RdataType, response: dns.message.Message
    ) -> DnssecCheck:
        """What DNSSEC says of an answer that there is no `rdtype` at `name` (NXDOMAIN,
        NODATA): proven by the zone's signed NSEC or NSEC3 (secure), below an unsigned
        delegation (insecure), or not at all (bogus: the absence is no evidence, S-SEC-16)."""
        return await self._bounded(functools.partial(self._check_absent, name, rdtype, response))

    async def _bounded(self, check: Callable[[Budget], Awaitable[DnssecCheck]]) -> DnssecCheck:
        budget = Budget()
        try:
            async with asyncio.timeout(self.deadline):
                return await _judged(check(budget))
        except TimeoutError:
            raise UpstreamTimeout(
                f"DNSSEC: the chain of trust was not checked within {self.deadline:g}s [S-SEC-15]"
            ) from None
        finally:
            self.signature_checks += budget.spent_signatures
            self.nsec3_hashes += budget.spent_hashes

    async def _check_rrset(
        self, signed: Signed, response: dns.message.Message, budget: Budget
    ) -> DnssecCheck:
        name = signed.rrset.name
        anchor = closest_anchor(name, self._anchors)
        if anchor is None:
            return DnssecCheck(
                INDETERMINATE, reason=f"no trust anchor at or above {name} [S-SEC-2]"
            )
        if signed.sigs is None:
            what = f"{name} {dns.rdatatype.to_text(signed.rrset.rdtype)}"
            return await self._unsigned(name, anchor, budget, _unsigned_reason(what, response))
        signer = signer_of(signed.sigs, name, anchor)
        if signer is None:
            raise DnssecBogus(
                f"{name} is signed by no zone at or above it under {anchor} [S-SEC-4]"
            )
        # The anchor's keys are needed whatever the signer: asked for at the same time.
        zone, _ = await asyncio.gather(
            self._zone(signer, anchor, budget), self._zone(anchor, anchor, budget)
        )
        if zone.keys is None:
            return zone.check
        now = self._clock()
        sig = verify(signed, signer, zone.keys, now, budget)
        closer = wildcard_source(name, sig)
        if closer is not None:
            decided = wildcard_denial(closer, signer, denials_in(response), zone.keys, now, budget)
            if decided == COSTLY:
                return _costly(signer)
        return DnssecCheck(SECURE, str(signer))

    async def _check_absent(
        self,
        name: dns.name.Name,
        rdtype: RdataType,
        response: dns.message.Message,
        budget: Budget,
    ) -> DnssecCheck:
        anchor = closest_anchor(name, self._anchors)
        if anchor is None:
            return DnssecCheck(
                INDETERMINATE, reason=f"no trust anchor at or above {name} [S-SEC-2]"
            )
        denials = denials_in(response)
        signer = signer_of((sig for d in denials for sig in d.sigs or ()), name, anchor)
        if signer is None:  # no signed proof: only below a proven unsigned delegation
            what = f"the absence of {name} {rdtype.name}"
            return await self._unsigned(name, anchor, budget, _unsigned_reason(what, response))
        zone, _ = await asyncio.gather(
            self._zone(signer, anchor, budget), self._zone(anchor, anchor, budget)
        )
        if zone.keys is None:
            return zone.check
        decided = absence(name, rdtype, signer, denials, zone.keys, self._clock(), budget)
        if decided == PROVEN:
            return DnssecCheck(SECURE, str(signer))
        if decided == COSTLY:
            return _costly(signer)
        assert decided == OPTED_OUT
        return DnssecCheck(
            INSECURE,
            str(signer),
            f"{signer} proves no {name} by NSEC3 with opt-out: an unsigned delegation may hold "
            "it [S-SEC-16]",
        )

    # --- zones ---------------------------------------------------------------------------

    async def _zone(self, zone: dns.name.Name, anchor: dns.name.Name, budget: Budget) -> Zone:
        """The zone's keys, proven from the anchor (kept); or why they cannot be."""
        kept = self._proofs.zone(zone)
        if kept is not None:
            return kept
        prove = functools.partial(self._prove_zone, zone, anchor, budget)
        return cast(Zone, await self._proofs.once(("zone", zone), prove))

    async def _prove_zone(self, zone: dns.name.Name, anchor: dns.name.Name, budget: Budget) -> Zone:
        try:
            proven, seconds = await (
                self._anchored_keys(zone, budget)
                if zone == anchor
                else self._delegated_keys(zone, anchor, budget)
            )
        except OverBudget:
            raise  # says nothing of the zone: not kept
        except DnssecBogus as err:
            check = DnssecCheck(BOGUS, reason=clipped(str(err)))
            proven, seconds = Zone(check), BOGUS_KEEP_SECONDS
        self._proofs.hold(zone, proven, seconds)
        return proven

    async def _anchored_keys(self, zone: dns.name.Name, budget: Budget) -> tuple[Zone, float]:
        anchor = self._anchors[zone]
        keyset, _ = await self._proofs.signed(zone, DNSKEY, zone)
        if keyset is None:
            raise DnssecBogus(f"trust anchor {zone} serves no signed DNSKEY record [S-SEC-5]")
        trusted = [*anchor.keys, *keys_named(zone, keyset.rrset, usable_ds(anchor.ds))]
        keys = verify_keyset(keyset, zone, trusted, self._clock(), budget)
        return Zone(DnssecCheck(SECURE, str(zone)), keys), self._proofs.seconds(keyset)

    async def _delegated_keys(
        self, zone: dns.name.Name, anchor: dns.name.Name, budget: Budget
    ) -> tuple[Zone, float]:
        # The zone's keys are asked for with its DS: one round trip, not two (wasted only
        # when the DS turns out to be absent).
        asked_ds, asked_keys = await asyncio.gather(
            self._proofs.signed(zone, DS, anchor),
            self._proofs.signed(zone, DNSKEY, anchor),
            return_exceptions=True,
        )
        if isinstance(asked_ds, BaseException):
            raise asked_ds
        ds, response = asked_ds
        if ds is None:
            return await self._no_ds(zone, anchor, response, budget)
        parent = signer_of(cast(dns.rrset.RRset, ds.sigs), zone, anchor, proper=True)
        if parent is None:
            raise DnssecBogus(f"the DS of {zone} is signed by no zone above it [S-SEC-5]")
        above = await self._zone(parent, anchor, budget)
        if above.keys is None:
            return above, BOGUS_KEEP_SECONDS
        verify(ds, parent, above.keys, self._clock(), budget)
        usable = usable_ds(ds.rrset)
        if not usable:
            reason = (
                f"the DS records of {zone} name only algorithms or digests not checked [S-SEC-3]"
            )
            return Zone(DnssecCheck(INSECURE, str(zone), reason)), self._proofs.seconds(ds)
        if isinstance(asked_keys, BaseException):
            raise asked_keys
        keyset, _ = asked_keys
        if keyset is None:
            raise DnssecBogus(f"{zone} has a DS record but serves no signed DNSKEY [S-SEC-5]")
        named = keys_named(zone, keyset.rrset, usable)
        keys = verify_keyset(keyset, zone, named, self._clock(), budget)
        return Zone(DnssecCheck(SECURE, str(zone)), keys), self._proofs.seconds(ds, keyset)

    async def _no_ds(
        self,
        zone: dns.name.Name,
        anchor: dns.name.Name,
        response: dns.message.Message,
        budget: Budget,
    ) -> tuple[Zone, float]:
        """A zone's RRSIG named it as signer, and its parent has no DS for it: unsigned if the
        parent proves a delegation without DS; if no zone starts there, the RRSIG lied."""
        denials = denials_in(response)
        parent = signer_of((s for d in denials for s in d.sigs or ()), zone, anchor, proper=True)
        if parent is None:
            raise DnssecBogus(f"no DS at {zone}, and no signed denial from its parent [S-SEC-6]")
        above = await self._zone(parent, anchor, budget)
        if above.keys is None:
            return above, BOGUS_KEEP_SECONDS
        if (
            ds_denial(zone, parent, denials, above.keys, self._clock(), budget)
            != UNSIGNED_DELEGATION
        ):
            raise DnssecBogus(
                f"{zone} signs records, but {parent} proves no zone starts there [S-SEC-6]"
            )
        return Zone(_unsigned_below(zone, parent, _proof(denials))), self._proofs.seconds(*denials)

    # --- unsigned answers ----------------------------------------------------------------

    async def _unsigned(
        self,
        name: dns.name.Name,
        anchor: dns.name.Name,
        budget: Budget,
        unsigned: Callable[[dns.name.Name], str],
    ) -> DnssecCheck:
        """S-SEC-6: an unsigned answer is insecure only below a delegation proven to have no
        DS. The walk looks for one from the anchor down, judging one label at a time, with
        the DS questions of up to `WALK_BATCH` labels asked at once; at most
        `MAX_WALK_QUESTIONS` of them (S-SEC-15). `unsigned` is the refusal's reason when
        the name turns out to be in a signed zone."""
        zone, proven = anchor, await self._zone(anchor, anchor, budget)
        below = [name.split(depth)[1] for depth in range(len(anchor) + 1, len(name) + 1)]
        answers: dict[dns.name.Name, object] = {}
        asked = 0
        for index, current in enumerate(below):
            if proven.keys is None:
                return proven.check
            cut = self._proofs.cut(current)
            if cut is None:
                if current not in answers:  # this name and the next ones, at once
                    wanted = [
                        n
                        for n in below[index : index + WALK_BATCH]
                        if n not in answers and self._proofs.cut(n) is None
                    ]
                    asked += len(wanted)
                    if asked > MAX_WALK_QUESTIONS:
                        raise DnssecBogus(
                            f"{name} lies more than {MAX_WALK_QUESTIONS} labels below {zone}, "
                            "the deepest signed zone above it the walk reached [S-SEC-15]"
                        )
                    found = await asyncio.gather(
                        *(self._ds(n, anchor) for n in wanted), return_exceptions=True
                    )
                    answers.update(zip(wanted, found, strict=True))
                cut = self._judge_cut(current, zone, proven, answers[current], budget)
            if cut.kind == UNSIGNED_DELEGATION:
                return _unsigned_below(current, zone, cut.proof)
            if cut.kind == ZONE_STARTS:  # the names below are judged with this zone's keys
                zone, proven = current, await self._zone(current, anchor, budget)
        if proven.keys is None:
            return proven.check
        raise DnssecBogus(unsigned(zone))

    async def _ds(self, name: dns.name.Name, anchor: dns.name.Name) -> object:
        """The DS question at `name` (one at a time per name, whoever asks)."""
        return await self._proofs.once(
            ("ds", name), functools.partial(self._proofs.signed, name, DS, anchor)
        )

    def _judge_cut(
        self,
        name: dns.name.Name,
        zone: dns.name.Name,
        proven: Zone,
        answer: object,
        budget: Budget,
    ) -> Cut:
        """What the DS question at `name` proved, with `zone`'s keys; kept once proven."""
        if isinstance(answer, BaseException):
            raise answer
        ds, response = cast(tuple[Signed | None, dns.message.Message], answer)
        keys = cast(ZoneKeys, proven.keys)
        now = self._clock()
        if ds is not None:
            verify(ds, zone, keys, now, budget)  # the parent's record: signed by `zone`
            cut, seconds = Cut(ZONE_STARTS), self._proofs.seconds(ds)
        else:
            denials = denials_in(response)
            kind = ds_denial(name, zone, denials, keys, now, budget)
            cut, seconds = Cut(kind, _proof(denials)), self._proofs.seconds(*denials)
        self._proofs.hold(name, cut, seconds)
        return cut

    # --- asking --------------------------------------------------------------------------


async def _judged(check: Awaitable[DnssecCheck]) -> DnssecCheck:
    """A check's refusal or inability as its state, with its reason (S-SEC-10, S-SEC-13)."""
    try:
        return await check
    except DnssecBogus as err:
        return DnssecCheck(BOGUS, reason=clipped(str(err)))
    except Indeterminate as err:
        return DnssecCheck(INDETERMINATE, reason=str(err))


def _unsigned_reason(what: str, response: dns.message.Message) -> Callable[[dns.name.Name], str]:
    """Why an unsigned answer in a signed zone (given when the walk finds it) is bogus:
    stripped of its DNSSEC records, or merely unsigned."""
    if strips_dnssec(response):
        return lambda zone: STRIPPED.format(what=what, anchor=zone)
    rule = "S-SEC-16" if what.startswith("the absence") else "S-SEC-4"
    return lambda zone: f"{what} is not signed, in signed zone {zone} [{rule}]"


def _costly(zone: dns.name.Name) -> DnssecCheck:
    return DnssecCheck(
        INSECURE,
        str(zone),
        f"{zone} proves with NSEC3 of more than {NSEC3_MAX_ITERATIONS} iterations, which are "
        "not hashed: treated as unsigned (RFC 9276) [S-SEC-7]",
    )


def _proof(denials: list[Signed]) -> str:
    return "NSEC3" if any(d.rrset.rdtype == NSEC3 for d in denials) else "NSEC"


def _unsigned_below(cut: dns.name.Name, parent: dns.name.Name, proof: str) -> DnssecCheck:
    return DnssecCheck(
        INSECURE,
        str(cut),
        f"{parent} delegates {cut} with no DS record, proven by {proof} [S-SEC-6]",
    )
