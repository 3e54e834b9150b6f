"""The hardened HTTP edge. Handles and did:web hosts are chosen by strangers, so every fetch:

- resolves the host through the resolver's own DNS and refuses private, loopback,
  link-local, multicast and reserved addresses unless the allow-list permits them;
- connects to *that* checked address (the host name still goes into SNI and Host), so a
  second, rebinding DNS answer is never asked for;
- speaks HTTPS only (plain http only for localhost in development);
- has one overall deadline (a body trickled byte by byte cannot outlive it), a size cap
  enforced while streaming, and a redirect cap with every hop checked again;
- keeps to the pace of the host each request goes to, every hop of a redirect at its own
  host's (POL-PACE-1): a stranger's well-known that redirects to the PLC directory is a
  request to the directory, at its rate, and its 429 parks it as any other would.

It is built on aiohttp's client, whose connector takes a resolver of our own (its public
hook for the connection step). Connections are pooled by host name, so a connection
opened with one host's SNI never serves another host.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from atwhois.foundation.bounded import BoundedBody
from atwhois.foundation.pace import REVERIFY, SERVICE_AUTH, HostPace, shared_buckets, work

from .addresses import embedded_ipv4
from .config import Config
from .dns import DnsClient
from .errors import (
    ForbiddenAddress,
    InvalidData,
    ResponseTooLarge,
    UpstreamFailure,
    UpstreamTimeout,
    WrongEventLoop,
)
from .response import MIRROR_HEADER, Response
from .tls import tls_context
from .untrusted import retry_after

_REDIRECTS = {301, 302, 303, 307, 308}
_STRANGER_KEEPALIVE = 0.25  # seconds an idle connection to a guarded host is kept
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressGuard:
    """Which addresses a fetch may connect to (the SSRF guard)."""

    def __init__(self, config: Config, dns: DnsClient) -> None:
        self._allow = config.allow_nets
        self._nat64 = config.nat64_prefixes
        self._dev = config.dev
        self._dns = dns

    def permits(self, address: IpAddress) -> bool:
        if any(address in net for net in self._allow):
            return True
        # H-WK-9: an address that carries IPv4 reaches that IPv4 through a gateway
        if isinstance(address, ipaddress.IPv6Address) and (
            carried := embedded_ipv4(address, self._nat64)
        ):
            return all(self.permits(inner) for inner in carried)
        return address.is_global and not address.is_multicast

    async def addresses(self, host: str) -> list[str]:
        """The addresses of `host` that may be connected to, in the order DNS gave them."""
        literal = _ip_literal(host)
        if literal is not None:
            candidates = [literal]
        elif host == "localhost" and self._dev:  # D-WEB-3: development only, still guarded
            candidates = [ipaddress.ip_address("127.0.0.1")]
        else:
            candidates = [ipaddress.ip_address(a) for a in await self._dns.addresses(host)]
        allowed = [str(a) for a in candidates if self.permits(a)]
        if not allowed:
            listed = ", ".join(str(a) for a in candidates)
            raise ForbiddenAddress(f"{host} resolves only to forbidden addresses ({listed})")
        return allowed


def _ip_literal(host: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


class HostGates:
    """At most `limit` requests at once per host. A host's semaphore lives only while some
    request uses it, so an audit of a million hosts does not keep a million of them."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._gates: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @contextlib.asynccontextmanager
    async def turn(self, host: str) -> AsyncIterator[None]:
        gate, users = self._gates.get(host, (asyncio.Semaphore(self._limit), 0))
        self._gates[host] = (gate, users + 1)
        try:
            async with gate:
                yield
        finally:
            gate, users = self._gates[host]
            if users == 1:
                del self._gates[host]
            else:
                self._gates[host] = (gate, users - 1)

    def __len__(self) -> int:
        return len(self._gates)


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver hook: only the guard's checked addresses, and :443 mapped to the
    test network's port when configured."""

    def __init__(self, guard: AddressGuard, https_port: int | None) -> None:
        self._guard = guard
        self._https_port = https_port

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if port == 443 and self._https_port is not None:
            port = self._https_port
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in await self._guard.addresses(host)
        ]

    async def close(self) -> None:
        return None


class Fetcher:
    """GETs with caps and deadlines. `guarded` fetchers are for hosts strangers choose;
    an unguarded one is for URLs the operator configured (the PLC directory)."""

    def __init__(self, config: Config, dns: DnsClient, *, guarded: bool = True) -> None:
        self._config = config
        self._guard = AddressGuard(config, dns) if guarded else None
        self._ssl = tls_context(config.ca_bundle)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the session's
        self._headers = {"User-Agent": config.user_agent, **dict(config.extra_headers)}
        if guarded:
            # Strangers' bodies are taken as sent: a few KiB of gzip can inflate to
            # gigabytes before a size cap sees them, so compression is neither asked for
            # nor undone (a compressed well-known file is then simply not a DID).
            self._headers["Accept-Encoding"] = "identity"
        self._gates = HostGates(config.per_host_limit) if config.per_host_limit else None
        self.pace = shared_pace(config)
        self._waiting: dict[
            tuple[str, str], asyncio.Lock
        ] = {}  # (host, kind of work)  # hosts with requests waiting a turn

    def _client(self) -> aiohttp.ClientSession:
        """The session, made on first use (aiohttp binds it to the running loop: used from
        another loop, it would fail deep inside aiohttp, or hang)."""
        if self._session is not None and asyncio.get_running_loop() is not self._loop:
            raise WrongEventLoop(
                "this resolver's connections were opened on another event loop: use it "
                "with the async calls (await atwhois.alookup) in the loop that opened it, "
                "or with the sync calls only"
            )
        if self._session is None:
            self._loop = asyncio.get_running_loop()
            resolver = (
                GuardedResolver(self._guard, self._config.https_port) if self._guard else None
            )
            # A lookup asks a stranger's host for its well-known file and then its did.json:
            # kept open a quarter of a second, the first fetch's connection serves the second
            # (one TLS handshake, not two). Not longer: an idle TLS connection holds its
            # buffers (256 KiB each on asyncio's loop), and under load hundreds of one-time
            # hosts pass each second. The PLC directory's connections stay 5 s.
            connector = aiohttp.TCPConnector(
                resolver=resolver,
                use_dns_cache=False,
                ssl=self._ssl,
                limit=256,
                keepalive_timeout=_STRANGER_KEEPALIVE if self._guard is not None else 5.0,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=None),
                auto_decompress=self._guard is None,
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = self._loop = None  # opened again on the next use

    async def get(
        self,
        url: str,
        *,
        max_bytes: int,
        timeout: float,
        max_redirects: int = 0,
        accept: str = "*/*",
    ) -> Response:
        """Fetch `url`; any status comes back, transport trouble raises a classified error.
        Each request's host's pace comes first: a host that asked for a pause gets nothing
        meanwhile (a transient failure, never an absence), and a turn past the rate is
        waited for within the deadline."""
        try:
            async with asyncio.timeout(timeout):
                async with self._polite(url):
                    return await self._follow(url, max_bytes, max_redirects, accept)
        except TimeoutError:
            raise UpstreamTimeout(f"{_origin(url)}: no complete answer within {timeout}s") from None

    async def _turn(self, host: str, url: str) -> None:
        """A turn at the host's pace: at once, or when one is free (the waiters of a host
        queue on its lock, each taking its turn when it goes; a kind of work that waits
        for its own share waits in a room of its own, so that lookups never queue behind
        it: F-CUR-6)."""
        wait = self.pace.admit(host)
        if wait is None:
            raise refused(self.pace, host, _origin(url))
        if not wait:
            return
        if len(self._waiting) > _WAITING_HOSTS:  # the hosts nobody waits at any more
            self._waiting = {h: lock for h, lock in self._waiting.items() if lock.locked()}
        async with self._waiting.setdefault((host, work()), asyncio.Lock()):
            while wait:
                await asyncio.sleep(wait)
                wait = self.pace.admit(host, again=True)
                if wait is None:
                    raise refused(self.pace, host, _origin(url))

    def _polite(self, url: str) -> contextlib.AbstractAsyncContextManager[object]:
        """Waits for a turn at the host (the first hop's: redirects stay in that turn)."""
        if self._gates is None:
            return contextlib.nullcontext()
        return self._gates.turn(urlsplit(url).hostname or "")

    async def _follow(self, url: str, max_bytes: int, max_redirects: int, accept: str) -> Response:
        for hop in range(max_redirects + 1):
            self._check_url(url)
            status, headers, body = await self._paced(url, max_bytes, accept)
            location = headers.get("Location")
            if status not in _REDIRECTS or location is None:
                content_type = headers.get("Content-Type")
                return Response(url, status, body, headers.get(MIRROR_HEADER), content_type)
            if hop == max_redirects:
                break
            url = urljoin(url, location)
        limit = (
            "redirects are not followed here"
            if max_redirects == 0
            else f"more than {max_redirects} redirects"
        )
        raise InvalidData(f"{_origin(url)}: {limit} [H-WK-6]")

    async def _paced(
        self, url: str, max_bytes: int, accept: str
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One request, at its host's pace: a turn first, then what the host answered told
        to the pace (a pause asked, a probe answered or not)."""
        host = host_of(url)
        await self._turn(host, url)
        try:
            status, headers, body = await self._get_once(url, max_bytes, accept)
        except BaseException:  # a deadline's cancellation too: a probe out is over
            self.pace.unanswered(host)
            raise
        busy = status in (429, 503)
        pause = retry_after(headers.get("Retry-After"), cap=self.pace.max_park) if busy else None
        self.pace.answered(host, refused=busy, pause=pause)
        return status, headers, body

    def _check_url(self, url: str) -> None:
        """Scheme and, for an address written in the URL (a redirect may carry one), the
        guard: aiohttp does not ask the resolver about IP literals."""
        if self._guard is None:
            return
        parts = urlsplit(url)
        host = parts.hostname or ""
        literal = _ip_literal(host)
        if literal is not None and not self._guard.permits(literal):
            raise ForbiddenAddress(f"{url[:80]}: address {literal} is forbidden")
        if parts.scheme == "https":
            return
        loopback = host == "localhost" or (literal is not None and literal.is_loopback)
        if parts.scheme == "http" and self._config.dev and loopback:
            return
        raise InvalidData(f"{url[:80]}: only https:// URLs are fetched [H-WK-5]")

    async def _get_once(
        self, url: str, max_bytes: int, accept: str
    ) -> tuple[int, Mapping[str, str], bytes]:
        try:
            async with self._client().get(
                url, headers={"Accept": accept}, allow_redirects=False
            ) as response:
                body = BoundedBody(
                    max_bytes,
                    lambda size: ResponseTooLarge(
                        f"{_origin(url)}: body of {size} bytes or more, over {max_bytes} bytes"
                    ),
                )
                body.announced(response.content_length)
                async for chunk in response.content.iter_any():
                    body.add(chunk)
                return response.status, response.headers, body.value()
        except aiohttp.InvalidURL:
            raise InvalidData(f"{url[:80]}: not a valid URL") from None
        except aiohttp.ClientError as err:
            raise UpstreamFailure(f"{_origin(url)}: {_describe(err)}") from None


_PACES: dict[tuple[str, float, float, float, float, float, int], HostPace] = {}


def shared_pace(config: Config) -> HostPace:
    """One pace per host for every fetcher of this process with these settings (a daemon's
    lookups and its audits ask the same directory: together they keep to its rate), and of
    the daemon's other processes when they share its buckets (`foundation.pace`). The PLC
    directory's host is counted by its name; every other host as `web`. A fleet of
    `fleet_daemons` splits each rate evenly: each daemon keeps to its part."""
    plc_host = host_of(config.plc_url)
    shares = {SERVICE_AUTH: config.service_auth_share, REVERIFY: config.reverify_share}
    key = (
        plc_host,
        config.plc_rate,
        config.host_rate,
        config.max_park,
        config.service_auth_share,
        config.reverify_share,
        config.fleet_daemons,
    )
    pace = _PACES.get(key)
    if pace is None:
        plc_rate = config.plc_rate / config.fleet_daemons
        host_rate = config.host_rate / config.fleet_daemons
        pace = _PACES[key] = HostPace(
            lambda host: plc_rate if host == plc_host else host_rate,
            max_park=config.max_park,
            shares=shares,
            patient=frozenset({REVERIFY}),
            kind_of=lambda host: host if host == plc_host else "web",
            shared=shared_buckets(),
        )
    return pace


_WAITING_HOSTS = 1024  # hosts with a waiting room kept before the empty ones are dropped


def refused(pace: HostPace, host: str, where: str) -> UpstreamFailure:
    """The failure of a request not sent (the PLC mirror's upstream says the same): `host`
    asked for a pause (Retry-After) that has not ended, or this work's share of its rate
    is spent. Transient: never an absence."""
    return UpstreamFailure(f"{where}: {pace.refusal(host)}")


_DEFAULT_PORTS = {"http": 80, "https": 443}


def host_of(url: str) -> str:
    """What a pace is kept for: the host in lower case, and its port unless the scheme's
    own (POL-PACE-1): `https://PLC.directory:443/` and `https://plc.directory` are one host,
    for the lookups, a redirect's hop and the PLC mirror's upstream alike."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # a port that is not one: the URL fails when asked, paced as written
        return parts.netloc.rpartition("@")[2].lower()
    name = parts.hostname or ""
    name = f"[{name}]" if ":" in name else name
    return name if port in (None, _DEFAULT_PORTS.get(parts.scheme.lower())) else f"{name}:{port}"


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _describe(err: Exception) -> str:
    if isinstance(err, aiohttp.ClientConnectorCertificateError):
        reason = getattr(err.certificate_error, "verify_message", None) or err.certificate_error
        return f"TLS certificate not trusted: {reason}"
    if isinstance(err, aiohttp.ClientConnectorError):
        cause = err.os_error
        text = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
        return f"cannot connect: {text}"
    text = re.sub(r"\s*\(_ssl\.c:\d+\)", "", str(err))
    return text or type(err).__name__
