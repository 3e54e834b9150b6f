"""The hardened HTTP edge. Handles and did:web hosts are chosen by strangers, so every fetch:

- resolves the host through the resolver's own DNS and refuses private, loopback,
  link-local, multicast and reserved addresses unless the allow-list permits them;
- connects to *that* checked address (the host name still goes into SNI and Host), so a
  second, rebinding DNS answer is never asked for;
- speaks HTTPS only (plain http only for localhost in development);
- has one overall deadline (a body trickled byte by byte cannot outlive it), a size cap
  enforced while streaming, and a redirect cap with every hop checked again.

httpx's public API has no hook for the connection step, so this module drives httpcore
(the engine under httpx) with a network backend of its own. Connections are pooled by
host name, so a connection opened with one host's SNI never serves another host.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpcore

from .config import Config
from .dns import DnsClient
from .errors import (
    ForbiddenAddress,
    InvalidData,
    ResponseTooLarge,
    UpstreamFailure,
    UpstreamTimeout,
)

_REDIRECTS = {301, 302, 303, 307, 308}
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class Response:
    url: str  # after redirects
    status: int
    body: bytes
    redirects: int


class AddressGuard:
    """Which addresses a fetch may connect to (the SSRF guard)."""

    def __init__(self, config: Config, dns: DnsClient) -> None:
        self._allow = config.allow_nets
        self._dev = config.dev
        self._dns = dns

    def permits(self, address: IpAddress) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped
        if any(address in net for net in self._allow):
            return True
        return address.is_global and not address.is_multicast

    async def addresses(self, host: str) -> list[str]:
        """The addresses of `host` that may be connected to, in the order DNS gave them."""
        literal = _ip_literal(host)
        if literal is not None:
            candidates = [literal]
        elif host == "localhost" and self._dev:  # D-WEB-3: development only
            return ["127.0.0.1"]
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


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """Connects to the guard's checked addresses; maps :443 to a test port if configured."""

    def __init__(self, guard: AddressGuard, https_port: int | None) -> None:
        self._guard = guard
        self._https_port = https_port
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if port == 443 and self._https_port is not None:
            port = self._https_port
        failure: Exception | None = None
        for address in await self._guard.addresses(host):
            try:
                return await self._inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as err:
                failure = err
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise ForbiddenAddress("unix sockets are never fetched")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class Fetcher:
    """GETs with caps and deadlines. `guarded` fetchers are for hosts strangers choose;
    an unguarded one is for URLs the operator configured (the PLC directory)."""

    def __init__(self, config: Config, dns: DnsClient, *, guarded: bool = True) -> None:
        self._config = config
        self._guarded = guarded
        context = ssl.create_default_context(cafile=config.ca_bundle)
        backend = _GuardedBackend(AddressGuard(config, dns), config.https_port) if guarded else None
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context,
            max_connections=256,
            max_keepalive_connections=64,
            keepalive_expiry=5.0,
            network_backend=backend,
        )
        self._headers = [
            (b"User-Agent", config.user_agent.encode()),
            *((k.encode(), v.encode()) for k, v in config.extra_headers),
        ]

    async def aclose(self) -> None:
        await self._pool.aclose()

    async def get(
        self,
        url: str,
        *,
        max_bytes: int,
        timeout: float,
        max_redirects: int = 0,
        accept: str = "*/*",
    ) -> Response:
        """Fetch `url`; any status comes back, transport trouble raises a classified error."""
        try:
            async with asyncio.timeout(timeout):
                return await self._follow(url, max_bytes, max_redirects, accept, timeout)
        except TimeoutError:
            raise UpstreamTimeout(f"{_origin(url)}: no complete answer within {timeout}s") from None

    async def _follow(
        self, url: str, max_bytes: int, max_redirects: int, accept: str, timeout: float
    ) -> Response:
        for hop in range(max_redirects + 1):
            self._check_url(url)
            status, headers, body = await self._get_once(url, max_bytes, accept, timeout)
            location = headers.get("location")
            if status not in _REDIRECTS or location is None:
                return Response(url, status, body, hop)
            if hop == max_redirects:
                break
            url = urljoin(url, location)
        limit = (
            "redirects are not followed here"
            if max_redirects == 0
            else (f"more than {max_redirects} redirects")
        )
        raise InvalidData(f"{_origin(url)}: {limit} [H-WK-6]")

    def _check_url(self, url: str) -> None:
        parts = urlsplit(url)
        if not self._guarded:
            return
        if parts.scheme == "https":
            return
        loopback = parts.hostname == "localhost" or (
            (ip := _ip_literal(parts.hostname or "")) is not None and ip.is_loopback
        )
        if parts.scheme == "http" and self._config.dev and loopback:
            return
        raise InvalidData(f"{url[:80]}: only https:// URLs are fetched [H-WK-5]")

    async def _get_once(
        self, url: str, max_bytes: int, accept: str, timeout: float
    ) -> tuple[int, dict[str, str], bytes]:
        headers = [*self._headers, (b"Accept", accept.encode())]
        extensions = {
            "timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
        }
        try:
            async with self._pool.stream("GET", url, headers=headers, extensions=extensions) as r:
                response_headers = {
                    k.decode("latin-1").lower(): v.decode("latin-1") for k, v in r.headers
                }
                declared = response_headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise ResponseTooLarge(
                        f"{_origin(url)}: body of {declared} bytes, cap {max_bytes}"
                    )
                body = bytearray()
                async for chunk in r.aiter_stream():
                    body += chunk
                    if len(body) > max_bytes:
                        raise ResponseTooLarge(
                            f"{_origin(url)}: body over the {max_bytes}-byte cap"
                        )
                return r.status, response_headers, bytes(body)
        except httpcore.TimeoutException:
            raise UpstreamTimeout(f"{_origin(url)}: timed out") from None
        except httpcore.ConnectError as err:
            raise UpstreamFailure(f"{_origin(url)}: {_describe(err)}") from None
        except (httpcore.NetworkError, httpcore.ProtocolError) as err:
            raise UpstreamFailure(f"{_origin(url)}: {_describe(err)}") from None
        except httpcore.UnsupportedProtocol:
            raise InvalidData(f"{url[:80]}: unsupported URL") from None


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _describe(err: Exception) -> str:
    text = re.sub(r"\s*\(_ssl\.c:\d+\)", "", str(err)) or type(err).__name__
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "TLS certificate not trusted: " + text.split("certificate verify failed:")[-1].strip(
            " ()"
        )
    if "Connection refused" in text or "Errno 111" in text:
        return "connection refused"
    return text
