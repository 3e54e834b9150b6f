"""The DNS edge: TXT lookups for handles and address lookups for the fetcher, through the
configured nameservers (never the system's stub when some are configured), with every
failure classified as absent, transient or invalid.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import dns.asyncresolver
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.nameserver
import dns.rdatatype
import dns.resolver
from dns.message import Truncated

from .config import Config, Nameserver
from .dns_wire import AnswerTooLarge, BoundedNameserver
from .errors import (
    AtwhoisError,
    DnsAnswerTooLarge,
    DnsRefused,
    NotFound,
    UpstreamFailure,
    UpstreamTimeout,
)

_PER_SERVER_TIMEOUT = 2.0
_SHARED_SECONDS = 1.0  # how long a host's addresses answer other fetches (at most its TTL)
_SWEEP_FLOOR = 256  # hosts remembered before the first sweep of expired ones


@dataclass(slots=True)
class _Shared:
    task: asyncio.Future[tuple[list[str], int]]
    until: float = math.inf  # set once answered


class DnsClient:
    """Asks the primary nameservers, then the fallbacks when the primaries fail."""

    def __init__(self, config: Config) -> None:
        self.timeout = config.dns_timeout
        servers = [_nameserver(s, config) for s in config.dns_servers + config.dns_fallback_servers]
        self._resolver = _resolver(config, servers, dnssec=False)
        # With DNSSEC validation on, TXT answers and the walk's questions ask for DNSSEC
        # records (DO) and for answers a validating resolver would refuse (CD): atwhois checks
        # them itself, and says which ones failed instead of seeing only SERVFAIL (S-SEC-11).
        # Both ask the same servers (a DoH server's one pool of connections).
        self._dnssec = _resolver(config, servers, dnssec=True) if config.dnssec else None
        self._recent: dict[str, _Shared] = {}
        self._swept_at = _SWEEP_FLOOR
        # Politeness: the configured servers are one upstream; cap the queries in flight.
        limit = config.per_host_limit
        self._gate = asyncio.Semaphore(limit) if limit is not None else None

    async def aclose(self) -> None:
        """Close the DoH servers' connection pools (Do53 keeps nothing open)."""
        servers = self._resolver.nameservers
        # duck-typed: importing `.doh` here would load httpx into every lookup
        await asyncio.gather(*(n.aclose() for n in servers if hasattr(n, "aclose")))

    async def txt(self, name: str) -> list[list[bytes]]:
        """Every TXT record at `name`, each as its list of character-strings."""
        return (await self.txt_answer(name))[0]

    async def txt_answer(
        self, name: str
    ) -> tuple[list[list[bytes]], dns.message.Message, str | None]:
        """`txt` with DNSSEC records wanted: the records, the response that carried them
        (with their signatures), and, when there is none, why (NXDOMAIN, NODATA), with the
        response that said so: its proof is what DNSSEC validation reads (S-SEC-16)."""
        try:
            answer = await self._query(
                name, dns.rdatatype.TXT, self._dnssec, raise_on_no_answer=False
            )
        except _NoSuchName as err:
            return [], err.response, f"{name}: NXDOMAIN"
        assert answer.response is not None
        if answer.rrset is None:
            return [], answer.response, f"{name}: no TXT record (NODATA)"
        return [list(rdata.strings) for rdata in answer], answer.response, None

    async def ask(
        self, name: dns.name.Name, rdtype: dns.rdatatype.RdataType
    ) -> dns.message.Message:
        """One question of the DNSSEC walk: the whole response, also when it holds no answer
        (NODATA, NXDOMAIN: their denials are what the walk reads)."""
        try:
            answer = await self._query(
                name.to_text(), rdtype, self._dnssec, raise_on_no_answer=False
            )
        except _NoSuchName as err:
            return err.response
        assert answer.response is not None
        return answer.response

    async def addresses(self, host: str) -> list[str]:
        """A and AAAA records of `host` (A first). NotFound only if both are absent.

        One lookup asks a stranger's host for its well-known file and its did.json within
        milliseconds: the addresses asked for (or still being asked for) in the last
        second, within their TTL, answer both, so the host's A and AAAA are asked once.
        A failure is shared only by those who waited for it, never kept."""
        now = time.monotonic()
        shared = self._recent.get(host)
        if (
            shared is not None
            and (not shared.task.done() or now < shared.until)
            and shared.task.get_loop() is asyncio.get_running_loop()
        ):
            return (await asyncio.shield(shared.task))[0]
        task = asyncio.ensure_future(self._addresses(host))
        self._recent[host] = _Shared(task)
        task.add_done_callback(functools.partial(self._answered, host))
        if len(self._recent) > self._swept_at * 2:
            self._sweep(now)
        return (await asyncio.shield(task))[0]

    def _answered(self, host: str, task: asyncio.Future[tuple[list[str], int]]) -> None:
        shared = self._recent.get(host)
        if shared is None or shared.task is not task:
            return
        if task.cancelled() or task.exception() is not None:  # retrieved: never kept
            del self._recent[host]
        else:
            shared.until = time.monotonic() + min(task.result()[1], _SHARED_SECONDS)

    def _sweep(self, now: float) -> None:
        self._recent = {
            host: shared
            for host, shared in self._recent.items()
            if not shared.task.done() or now < shared.until
        }
        self._swept_at = max(len(self._recent), _SWEEP_FLOOR)

    async def _addresses(self, host: str) -> tuple[list[str], int]:
        """The addresses and the shortest TTL of the records that gave them."""
        results = await asyncio.gather(
            self._query(host, dns.rdatatype.A),
            self._query(host, dns.rdatatype.AAAA),
            return_exceptions=True,
        )
        answers = [r for r in results if not isinstance(r, BaseException)]
        found = [rdata.address for answer in answers for rdata in answer]
        if found:
            return found, min(answer.rrset.ttl for answer in answers if answer.rrset)
        errors = [r for r in results if isinstance(r, BaseException)]
        transient = [e for e in errors if not isinstance(e, NotFound)]
        raise transient[0] if transient else errors[0]

    async def _query(
        self,
        name: str,
        rdtype: dns.rdatatype.RdataType,
        resolver: dns.asyncresolver.Resolver | None = None,
        raise_on_no_answer: bool = True,
    ) -> dns.resolver.Answer:
        resolver = resolver or self._resolver
        try:
            if self._gate is None:
                return await resolver.resolve(
                    name, rdtype, search=False, raise_on_no_answer=raise_on_no_answer
                )
            async with self._gate:
                return await resolver.resolve(
                    name, rdtype, search=False, raise_on_no_answer=raise_on_no_answer
                )
        except dns.resolver.NXDOMAIN as err:
            if raise_on_no_answer:
                raise NotFound(f"{name}: NXDOMAIN") from None
            raise _NoSuchName(next(iter(err.kwargs["responses"].values()))) from None
        except dns.resolver.NoAnswer:
            raise NotFound(f"{name}: no {rdtype.name} record (NODATA)") from None
        except dns.resolver.LifetimeTimeout:
            raise UpstreamTimeout(f"{name}: no DNS answer within {self.timeout}s") from None
        except dns.resolver.NoNameservers as err:
            if _every(err, lambda e: isinstance(e, AnswerTooLarge)):
                raise DnsAnswerTooLarge(
                    f"{name} {rdtype.name}: {_reasons(err)} [H-DNS-8]"
                ) from None
            if _every(err, lambda e: e in ("REFUSED", "NOTIMP")):
                raise DnsRefused(f"{name} {rdtype.name}: {_reasons(err)}") from None
            raise UpstreamFailure(f"{name}: every nameserver failed ({_reasons(err)})") from None
        except dns.exception.DNSException as err:
            raise UpstreamFailure(f"{name}: DNS error: {err}") from None


class _NoSuchName(AtwhoisError):
    """NXDOMAIN, for a question whose response is wanted whatever it says."""

    def __init__(self, response: dns.message.Message) -> None:
        self.response = response


def _nameserver(server: Nameserver, config: Config) -> dns.nameserver.Nameserver:
    if server.url is None:
        return BoundedNameserver(server.host, server.port)
    from .doh import DohNameserver  # here: most configurations ask over port 53

    return DohNameserver(server.url, config.ca_bundle, config.user_agent)


def _resolver(
    config: Config, servers: list[dns.nameserver.Nameserver], *, dnssec: bool
) -> dns.asyncresolver.Resolver:
    """A dnspython resolver asking `servers` (the configured ones, primaries first), or the
    system's when none is configured."""
    resolver = dns.asyncresolver.Resolver(configure=not servers)
    if servers:
        resolver.nameservers = list(servers)
    resolver.rotate = False  # fallbacks are asked in order, after the primaries
    # Leave every server a share of the deadline, so a dead primary cannot use it all.
    share = config.dns_timeout / max(1, len(resolver.nameservers))
    resolver.timeout = min(_PER_SERVER_TIMEOUT, share)
    resolver.lifetime = config.dns_timeout
    resolver.cache = None
    if dnssec:
        resolver.use_edns(0, dns.flags.DO, 1232)
        resolver.flags = dns.flags.RD | dns.flags.CD
    return resolver


def _every(err: dns.resolver.NoNameservers, said: Callable[[object], bool]) -> bool:
    """Every server answered, and what each said (an rcode, or what its answer raised) is
    of one kind: the question is refused, or its answer too large, wherever it is asked."""
    errors = [e for e in err.kwargs.get("errors") or [] if not isinstance(e[3], Truncated)]
    return bool(errors) and all(said(e[3]) for e in errors)


def _reasons(err: dns.resolver.NoNameservers) -> str:
    errors = [e for e in err.kwargs.get("errors") or [] if not isinstance(e[3], Truncated)]
    return "; ".join(f"{e[0]}: {e[3]}" for e in errors[:3]) or "no answer"
