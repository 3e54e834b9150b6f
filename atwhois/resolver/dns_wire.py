"""One DNS question to one server over port 53, for dnspython's resolver: UDP, then TCP when
the answer comes truncated, within the resolver's deadline, and an answer longer than
`MAX_ANSWER_BYTES` refused before it is read into records (H-DNS-8): a message of 64 KiB of
keys or signatures costs tens of milliseconds of the event loop to parse, which a hostile
zone would otherwise spend on every lookup.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
from typing import Any

import dns.exception
import dns.message
import dns.nameserver

from .errors import AtwhoisError

# H-DNS-8: the largest DNS answer read. Honest answers to atwhois's questions are far
# smaller: a TXT with its signatures, a zone's few keys, a proof of absence of three NSEC3
# records with theirs — under 4 KiB even with RSA-4096 keys in a rollover.
MAX_ANSWER_BYTES = 16 * 1024


class AnswerTooLarge(dns.exception.FormError, AtwhoisError):
    """An answer over `MAX_ANSWER_BYTES`, refused unread (a FormError to dnspython's
    resolver, which then sets the server aside for this question)."""


def too_large(size: int | str) -> AnswerTooLarge:
    return AnswerTooLarge(f"the answer of {size} bytes is over {MAX_ANSWER_BYTES:,}")  # type: ignore[no-untyped-call]


def malformed(why: str) -> dns.exception.FormError:
    """What dnspython's resolver reads as a server to set aside (its answer is not one)."""
    return dns.exception.FormError(why)  # type: ignore[no-untyped-call]


def timed_out(seconds: float) -> dns.exception.Timeout:
    """What dnspython's resolver reads as a question to ask again, or elsewhere."""
    return dns.exception.Timeout(timeout=seconds)  # type: ignore[no-untyped-call]


class BoundedNameserver(dns.nameserver.Do53Nameserver):
    """A nameserver on port 53 (UDP, TCP) whose answers are refused unread past a size."""

    def __init__(self, address: str, port: int = 53) -> None:
        super().__init__(address, port)
        self._family = (
            socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
        )

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
        """One question within `timeout`. The resolver reads the exceptions: a timeout is
        retried; `Truncated` asks again over TCP (`max_size`); FormError (a body that is no
        DNS message, or `AnswerTooLarge`) and OSError take this server out of the lookup."""
        try:
            async with asyncio.timeout(timeout):
                wire = await (self._tcp if max_size else self._udp)(request)
        except TimeoutError:
            raise timed_out(timeout) from None
        response = dns.message.from_wire(
            wire,
            keyring=request.keyring,
            request_mac=request.request_mac,
            one_rr_per_rrset=one_rr_per_rrset,
            ignore_trailing=ignore_trailing,
            raise_on_truncation=not max_size,
        )
        if not request.is_response(response):
            raise malformed("the answer is not the response to the query")
        return response

    async def _udp(self, request: dns.message.Message) -> bytes:
        loop = asyncio.get_running_loop()
        with socket.socket(self._family, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            await loop.sock_connect(sock, (self.address, self.port))  # only its datagrams
            await loop.sock_sendall(sock, request.to_wire())
            while True:
                wire = await loop.sock_recv(sock, 65535)
                if len(wire) >= 2 and struct.unpack("!H", wire[:2])[0] != request.id:
                    continue  # not the answer to this question (an old one, a spoof)
                if len(wire) > MAX_ANSWER_BYTES:
                    raise too_large(f"{len(wire):,}")
                return wire

    async def _tcp(self, request: dns.message.Message) -> bytes:
        reader, writer = await asyncio.open_connection(self.address, self.port)
        try:
            wire = request.to_wire()
            writer.write(struct.pack("!H", len(wire)) + wire)
            await writer.drain()
            (length,) = struct.unpack("!H", await reader.readexactly(2))
            if length > MAX_ANSWER_BYTES:
                raise too_large(f"{length:,}")
            return await reader.readexactly(length)
        except asyncio.IncompleteReadError:
            raise EOFError("the server closed the connection mid-answer") from None
        finally:
            writer.close()
