"""What an HTTP answer is to the resolver, and what it asks of whoever fetches: a `Fetcher`
(the hardened network edge) or an in-process PLC mirror. Apart from `fetch` so that the
rules over answers (`did`) and a resolver answered from a cache do not load the network
stack (aiohttp costs a command-line lookup a third of a second to import)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import dns.message

# An atwhois PLC mirror says where its answer comes from: verified, from which upstream,
# how far behind.
MIRROR_HEADER = "Atwhois-Plc-Mirror"


@dataclass(frozen=True, slots=True)
class Response:
    url: str  # after redirects
    status: int
    body: bytes
    provenance: str | None = None  # the `MIRROR_HEADER` of an atwhois PLC mirror's answer
    content_type: str | None = None  # as the server said it (O-FETCH-2 reads it)


class TxtRecords(Protocol):
    """What a lookup without --dnssec asks of DNS: the TXT records at a name (none: an empty
    list), or a `ResolutionError` when it could not be told."""

    async def txt(self, name: str) -> list[list[bytes]]: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class AuthoritativeTxt:
    """The TXT records at a name as one of its zone's authoritative nameservers answered
    them (H-DNS-9): `server` names it, `absent` says why there are none (NXDOMAIN,
    NODATA), `response` carries the signatures that DNSSEC validation reads (None: an
    answer from no real DNS message, as `atwhois.testing`'s)."""

    server: str
    records: list[list[bytes]]
    absent: str | None = None
    response: dns.message.Message | None = None


class TxtAuthority(Protocol):
    """What a re-check after a change asks besides the recursive resolver (H-DNS-9): the
    zone's own answer, or a `ResolutionError` when no nameserver of the zone gave one."""

    async def txt_answer(self, name: str) -> AuthoritativeTxt: ...

    async def aclose(self) -> None: ...


class Getter(Protocol):
    """What the resolver asks of a fetcher."""

    async def get(
        self,
        url: str,
        *,
        max_bytes: int,
        timeout: float,
        max_redirects: int = 0,
        accept: str = "*/*",
    ) -> Response: ...

    async def aclose(self) -> None: ...
