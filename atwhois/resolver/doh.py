"""DNS over HTTPS (RFC 8484) as a nameserver for dnspython's resolver, over httpx: for
operators whose network lets no DNS out on port 53. (dnspython's own DoH client needs
`httpx2`, which atwhois does not install.)

A DoH server is a configured upstream, as a nameserver is: the address guard for strangers'
hosts does not apply, the configured CA bundle does, and so do a deadline, the size cap of
every DNS answer (H-DNS-8) and no redirects.
"""

from __future__ import annotations

import asyncio
from typing import Any

import dns.exception
import dns.message
import dns.nameserver
import httpx

from atwhois.foundation.bounded import BoundedBody

from .dns_wire import MAX_ANSWER_BYTES, malformed, timed_out, too_large
from .tls import tls_context

MEDIA_TYPE = "application/dns-message"


class DohNameserver(dns.nameserver.Nameserver):
    """POSTs each query to `url`; HTTP/1.1, kept alive (the public DoH services accept it)."""

    def __init__(self, url: str, ca_bundle: str | None, user_agent: str) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.url = url
        self._ca_bundle = ca_bundle
        self._user_agent = user_agent
        self._clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}

    def __str__(self) -> str:
        return self.url

    def kind(self) -> str:
        return "DoH"

    def is_always_max_size(self) -> bool:
        return True  # no UDP: never truncated, never retried over TCP

    def answer_nameserver(self) -> str:
        return self.url

    def answer_port(self) -> int:
        return httpx.URL(self.url).port or 443

    def _client(self) -> httpx.AsyncClient:
        """One client (one pool of connections) per event loop it is used on."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = httpx.AsyncClient(
                verify=tls_context(self._ca_bundle),
                follow_redirects=False,
                headers={"accept": MEDIA_TYPE, "user-agent": self._user_agent},
            )
            self._clients[loop] = client
        return client

    async def async_query(
        self,
        request: dns.message.QueryMessage,
        timeout: float,
        source: str | None,
        source_port: int,
        max_size: bool,
        backend: Any,
        one_rr_per_rrset: bool = False,
        ignore_trailing: bool = False,
    ) -> dns.message.Message:
        """One query, within `timeout`. The resolver reads the exceptions: a timeout is
        retried; OSError (a refused connection, an HTTP error status) and FormError (a body
        that is no DNS message) take this server out of the lookup, and the next is asked."""
        try:
            async with asyncio.timeout(timeout):
                async with self._client().stream(
                    "POST",
                    self.url,
                    content=request.to_wire(),
                    headers={"content-type": MEDIA_TYPE},
                ) as answer:
                    if answer.status_code != 200:
                        raise ConnectionError(f"DoH server answered HTTP {answer.status_code}")
                    kind = answer.headers.get("content-type", "").split(";")[0].strip()
                    if kind.lower() != MEDIA_TYPE:
                        raise malformed(f"DoH answer is {kind or 'untyped'}")
                    body = BoundedBody(  # H-DNS-8
                        MAX_ANSWER_BYTES, lambda size: too_large(f"over {size:,}")
                    )
                    async for chunk in answer.aiter_bytes():
                        body.add(chunk)
        except TimeoutError:
            raise timed_out(timeout) from None
        except httpx.TimeoutException:
            raise timed_out(timeout) from None
        except httpx.HTTPError as err:
            raise ConnectionError(f"DoH: {type(err).__name__}: {err}") from None
        try:
            response = dns.message.from_wire(
                body.value(),
                keyring=request.keyring,
                request_mac=request.request_mac,
                one_rr_per_rrset=one_rr_per_rrset,
                ignore_trailing=ignore_trailing,
            )
        except dns.exception.DNSException as err:
            raise malformed(f"DoH answer is no DNS message: {err}") from None
        if not request.is_response(response):
            raise malformed("DoH answer is not the response to the query")
        return response

    async def aclose(self) -> None:
        """Close the pool of the running loop (those of loops gone went with them)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()
