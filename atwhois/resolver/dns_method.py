"""The DNS method of handle resolution (H-DNS-*): the TXT records at `_atproto.<handle>`
through the configured resolvers, with --dnssec what DNSSEC says of them (S-SEC-*), and
after a change the zone's own answer beside the resolver's (H-DNS-9/10)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Protocol

from .errors import DnssecBogus, NotFound, ResolutionError, UpstreamFailure
from .handle import did_from_txt, dids_in_txt, txt_name
from .identity import (
    BOGUS,
    INDETERMINATE,
    INSECURE,
    SECURE,
    DnssecCheck,
    Evidence,
    timed_evidence,
)
from .response import AuthoritativeTxt, TxtAuthority, TxtRecords

if TYPE_CHECKING:
    from dns.message import Message

    from .config import Config
    from .dns import DnsClient
    from .dnssec_chain import DnssecChain


class Edges(Protocol):
    """What the DNS method asks: a `Resolver`'s edges, each built when first used."""

    @property
    def config(self) -> Config: ...

    @property
    def txt(self) -> TxtRecords: ...

    @property
    def dns(self) -> DnsClient: ...

    @property
    def dnssec(self) -> DnssecChain: ...

    @property
    def authority(self) -> TxtAuthority | None: ...


class DnsMethod:
    """The DNS method of one resolver, over its edges."""

    def __init__(self, resolver: Edges) -> None:
        self._resolver = resolver
        self._dnssec = resolver.config.dnssec

    async def evidence(self, handle: str, *, recheck: bool = False) -> Evidence:
        """What the DNS method found for `handle`; with `recheck` (something says it
        changed), the zone's nameservers asked too (H-DNS-9)."""
        name = txt_name(handle)
        if name is None:
            return Evidence.skipped("_atproto name is over 253 characters [H-DNS-5]")
        seen: list[str] = []
        checked: list[DnssecCheck] = []
        authority = self._resolver.authority if recheck else None
        asked: dict[str, str] = {}  # what a re-check at the zone's nameservers found

        async def run() -> str:
            if authority is None:
                records = await self._records(name, checked)
            else:
                records = await self._recheck(name, authority, checked, asked)
            seen.extend(dids_in_txt(records))
            if checked and checked[0].state == BOGUS:
                raise DnssecBogus(f"DNSSEC: the answer is bogus: {checked[0].reason}")
            return did_from_txt(records)

        evidence = await timed_evidence(run, source=name, seen=seen)
        if checked:
            evidence = dataclasses.replace(evidence, dnssec=checked[0])
        if asked:
            evidence = dataclasses.replace(evidence, via=asked["via"])
            evidence = evidence.overruling(asked.get("stale"))
        return evidence

    async def _records(self, name: str, checked: list[DnssecCheck]) -> list[list[bytes]]:
        """The TXT records at `name` through the configured resolvers; with --dnssec, what
        DNSSEC says of them goes into `checked`."""
        if not self._dnssec:
            return await self._resolver.txt.txt(name)
        chain = self._resolver.dnssec
        warming = asyncio.ensure_future(chain.warm(name))
        try:
            records, response, absent = await self._resolver.dns.txt_answer(name)
            return await self._checked(name, records, response, absent, checked)
        finally:
            warming.cancel()  # the walk it started goes on, kept for the next lookup

    async def _recheck(
        self,
        name: str,
        authority: TxtAuthority,
        checked: list[DnssecCheck],
        asked: dict[str, str],
    ) -> list[list[bytes]]:
        """H-DNS-9/10: the TXT records at `name` asked of the recursive resolver and of the
        zone's own nameservers at once. The zone's answer counts (with --dnssec, checked as
        the resolver's would be); `asked` says who answered, and what the resolver said
        when it disagreed. When no nameserver of the zone answers, the resolver's does."""
        recursive_checked: list[DnssecCheck] = []
        recursive, zone = await asyncio.gather(
            self._records(name, recursive_checked),
            authority.txt_answer(name),
            return_exceptions=True,
        )
        for outcome in (recursive, zone):
            if isinstance(outcome, BaseException) and not isinstance(outcome, ResolutionError):
                raise outcome

        def resolvers_answer(why: str) -> list[list[bytes]]:
            asked["via"] = f"the recursive resolver; {why}"
            checked.extend(recursive_checked)
            if isinstance(recursive, BaseException):
                raise recursive
            return recursive

        if isinstance(zone, AuthoritativeTxt) and self._dnssec and zone.response is None:
            zone = UpstreamFailure("the zone's answer carries no DNSSEC records to check")
        if not isinstance(zone, AuthoritativeTxt):
            return resolvers_answer(f"the zone's nameservers not: {zone}")
        zone_checked: list[DnssecCheck] = []
        zone_answer: list[list[bytes]] | ResolutionError
        if self._dnssec:
            assert zone.response is not None
            try:
                zone_answer = await self._checked(
                    name, zone.records, zone.response, zone.absent, zone_checked
                )
            except (NotFound, DnssecBogus) as err:
                zone_answer = err
            zone_trust, recursive_trust = _trust(zone_checked), _trust(recursive_checked)
            if zone_trust[0] < recursive_trust[0]:
                # H-DNS-10: a secure answer stands against one that validates less well
                # (one spoofed answer to the direct question is all it takes)
                return resolvers_answer(
                    f"the zone's nameserver {zone.server} answered, but {zone_trust[1]}: its "
                    "answer counts only when it validates at least as well as the resolver's "
                    f"({recursive_trust[1]})"
                )
        elif zone.absent is not None:
            zone_answer = NotFound(zone.absent)
        else:
            zone_answer = zone.records
        asked["via"] = f"the zone's nameserver {zone.server}"
        said = _values(recursive) if not isinstance(recursive, BaseException) else None
        if isinstance(recursive, NotFound):
            said = []
        if said is not None and said != _values(zone.records):
            asked["stale"] = ", ".join(said) or "no record"
        checked.extend(zone_checked)
        if isinstance(zone_answer, ResolutionError):
            raise zone_answer
        return zone_answer

    async def _checked(
        self,
        name: str,
        records: list[list[bytes]],
        response: Message,
        absent: str | None,
        checked: list[DnssecCheck],
    ) -> list[list[bytes]]:
        """What DNSSEC says of a TXT answer (into `checked`); an absence is checked too
        (S-SEC-16): a bogus one is no evidence of absence."""
        chain = self._resolver.dnssec
        if absent is None:
            checked.append(await chain.check(response))
            return records
        import dns.name
        import dns.rdatatype

        check = await chain.check_absent(dns.name.from_text(name), dns.rdatatype.TXT, response)
        checked.append(check)
        if check.state == BOGUS:
            raise DnssecBogus(f"DNSSEC: the absence is bogus: {check.reason}")
        raise NotFound(absent)


# How well each DNSSEC state vouches for an answer (RFC 4033's terms), for H-DNS-10
_TRUST = {SECURE: 3, INSECURE: 2, INDETERMINATE: 1, BOGUS: 0}


def _trust(checked: list[DnssecCheck]) -> tuple[int, str]:
    """How well the first check vouches for its answer, and its state (-1: no answer was
    checked)."""
    return (_TRUST[checked[0].state], checked[0].state) if checked else (-1, "unchecked")


def _values(records: list[list[bytes]]) -> list[str]:
    """TXT records as the values they state (H-DNS-4), in order, for comparing answers."""
    return sorted(b"".join(strings).decode(errors="replace") for strings in records)
