"""What the DNSSEC walk keeps, and how it asks (S-SEC-9, S-SEC-11, S-SEC-13): the proofs of
zones' keys and of where zones start, each while the records it rests on hold, within a
byte bound; one question, and one proof, at a time per name, within a deadline; the answers
read as a validator must (a refusal is not an answer, a record without its signatures is
not evidence). The walk itself is `resolver.dnssec_chain`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple, cast

import dns.message
import dns.name

from atwhois.foundation.lru import Lru

from .dns_wire import MAX_ANSWER_BYTES
from .dnssec import NSEC, NSEC3, RdataType, Sig, Signed, ZoneKeys, signed_rrsets, strips_dnssec
from .errors import AtwhoisError, DnsAnswerTooLarge, DnsRefused, DnssecBogus
from .identity import DnssecCheck

# Asks the resolver one question with DNSSEC records wanted (DO) and checking left to us
# (CD); the whole response, also for NODATA and NXDOMAIN. Transient failures raise, and
# `DnsRefused` when the server refuses the question (REFUSED, NOTIMP).
Ask = Callable[[dns.name.Name, RdataType], Awaitable[dns.message.Message]]

# S-SEC-11: a proof is kept at most this long, whatever the TTLs say; a failed one briefly
# (RFC 4035 4.7): it may be an attack, or a zone being repaired.
MAX_KEEP_SECONDS = 3600.0
BOGUS_KEEP_SECONDS = 30.0
CUT_BYTES = 200  # about what a kept cut costs in memory
ZONE_STARTS = "zone"  # a DS record exists at the name: a signed zone starts there
STRIPPED = (
    "{what} comes without DNSSEC records (no signature, no DO bit): a resolver that strips "
    "them, or someone who removed them; the chain of trust from {anchor} says they must be "
    "there [S-SEC-9]"
)


class Indeterminate(AtwhoisError):
    """The walk cannot say: the server will not answer its questions (S-SEC-13)."""


@dataclass(frozen=True, slots=True)
class Zone:
    check: DnssecCheck  # SECURE with its keys; else what the chain above it says
    keys: ZoneKeys | None = None

    @property
    def size(self) -> int:
        return self.keys.size if self.keys is not None else CUT_BYTES


class Cut(NamedTuple):
    """What a DS question at a name proved: a signed zone starts there (`ZONE_STARTS`), an
    unsigned one does (`UNSIGNED_DELEGATION`, with the denial that proved it), or none."""

    kind: str
    proof: str = ""  # NSEC or NSEC3


@dataclass(frozen=True, slots=True)
class _Held:
    proof: Zone | Cut
    until: float
    size: int


class Proofs:
    """The kept proofs and the questions in flight of one walk."""

    def __init__(
        self, ask: Ask, memory_bytes: int, deadline: float, clock: Callable[[], float]
    ) -> None:
        self._ask = ask
        self._clock = clock
        self.deadline = deadline
        # zones and cuts share the bound: a walk that keeps many cuts keeps fewer zones
        self._kept: Lru[tuple[str, dns.name.Name], _Held] = Lru(memory_bytes, _held_size)
        self._asking: dict[tuple[str, dns.name.Name], asyncio.Future[object]] = {}

    @property
    def kept_bytes(self) -> int:
        """About the bytes the kept proofs hold (S-SEC-11)."""
        return self._kept.bytes

    def zone(self, zone: dns.name.Name) -> Zone | None:
        return cast(Zone | None, self._held("zone", zone))

    def cut(self, name: dns.name.Name) -> Cut | None:
        return cast(Cut | None, self._held("cut", name))

    def _held(self, kind: str, name: dns.name.Name) -> Zone | Cut | None:
        held = self._kept.get((kind, name))
        if held is None:
            return None
        if held.until <= self._clock():
            self._kept.pop((kind, name))
            return None
        return held.proof

    def hold(self, name: dns.name.Name, proof: Zone | Cut, seconds: float) -> None:
        """Keep `proof` about `name` for `seconds`; one larger than the whole bound, or
        already stale, is not kept (it is proven again each time)."""
        kind, size = ("zone", proof.size) if isinstance(proof, Zone) else ("cut", CUT_BYTES)
        if seconds > 0 and size <= self._kept.max_bytes:
            self._kept.put((kind, name), _Held(proof, self._clock() + seconds, size))
        else:
            self._kept.pop((kind, name))

    def seconds(self, *proofs: Signed) -> float:
        """How long a proof built on these records holds: their TTLs and signatures."""
        now = self._clock()
        seconds = MAX_KEEP_SECONDS
        for proof in proofs:
            seconds = min(seconds, proof.rrset.ttl)
            for sig in proof.sigs or ():
                seconds = min(seconds, cast(Sig, sig).expiration - now)
        return max(seconds, 0.0)

    async def signed(
        self, name: dns.name.Name, rdtype: RdataType, anchor: dns.name.Name
    ) -> tuple[Signed | None, dns.message.Message]:
        """The RRset at `name` and its signatures, or None when there is none. Raises
        `DnssecBogus` when the record, or every DNSSEC record, comes unsigned (S-SEC-4,
        S-SEC-9), `Indeterminate` when the server refuses the question (S-SEC-13)."""
        try:
            response = await self._ask(name, rdtype)
        except DnsRefused as err:
            raise Indeterminate(
                f"the DNS server refuses the walk's questions ({err}): the chain from {anchor} "
                "cannot be checked through it [S-SEC-13]"
            ) from None
        except DnsAnswerTooLarge:
            raise DnssecBogus(
                f"the answer for {name} {rdtype.name} is over {MAX_ANSWER_BYTES:,} bytes, "
                "refused unread [S-SEC-14]"
            ) from None
        what = f"{name} {rdtype.name}"
        if strips_dnssec(response):
            raise DnssecBogus(STRIPPED.format(what=what, anchor=anchor))
        for signed in signed_rrsets(response.answer):
            if signed.rrset.name == name and signed.rrset.rdtype == rdtype:
                if signed.sigs is None:
                    raise DnssecBogus(f"{what} comes without a signature [S-SEC-4]")
                return signed, response
        return None, response

    async def once(
        self, key: tuple[str, dns.name.Name], prove: Callable[[], Awaitable[object]]
    ) -> object:
        """One walk per zone or name at a time: lookups arriving meanwhile wait for it. The
        walk has the deadline of a check (it outlives the check that started it only to be
        kept), and its outcome is always retrieved, so a walk nobody waits for any more
        fails quietly."""
        asking = self._asking.get(key)
        if asking is None:
            asking = asyncio.ensure_future(_within(self.deadline, prove()))
            self._asking[key] = asking
            asking.add_done_callback(functools.partial(self._asked, key))
        return await asyncio.shield(asking)

    def _asked(self, key: tuple[str, dns.name.Name], asking: asyncio.Future[object]) -> None:
        self._asking.pop(key, None)
        if not asking.cancelled():
            asking.exception()  # retrieved: a waiter that left does not leave it unread


async def _within(seconds: float, work: Awaitable[object]) -> object:
    async with asyncio.timeout(seconds):
        return await work


def _held_size(_: object, held: _Held) -> int:
    return held.size


def signer_of(
    sigs: Iterable[object], name: dns.name.Name, anchor: dns.name.Name, *, proper: bool = False
) -> dns.name.Name | None:
    """The zone that signed records at `name`: the deepest signer of their RRSIGs that is at
    or above the name (strictly above, `proper`: a DS or a denial of one is the parent's)
    and under the anchor. Signers elsewhere are someone else's, and set aside."""
    found = [
        cast(Sig, sig).signer
        for sig in sigs
        if name.is_subdomain(cast(Sig, sig).signer)
        and cast(Sig, sig).signer.is_subdomain(anchor)
        and not (proper and cast(Sig, sig).signer == name)
    ]
    return max(found, key=len) if found else None


def denials_in(response: dns.message.Message) -> list[Signed]:
    """The NSEC and NSEC3 records of a response's authority section, with their RRSIGs."""
    return [s for s in signed_rrsets(response.authority) if s.rrset.rdtype in (NSEC, NSEC3)]
