"""The DNS edge's reading of answers (H-DNS-8), against a server on loopback that answers as
a hostile one would: over UDP a datagram larger than it was asked for, a datagram of another
question first; over TCP a length beyond the cap. The answer over the cap is refused before
it is parsed (a transient failure of that answer, named), the spoof is skipped."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import cast

import dns.flags
import dns.message
import dns.rdatatype
import dns.rrset
import pytest

from atwhois.resolver import Config
from atwhois.resolver.config import Nameserver
from atwhois.resolver.dns import DnsClient
from atwhois.resolver.dns_wire import MAX_ANSWER_BYTES
from atwhois.resolver.errors import DnsAnswerTooLarge

Answer = Callable[[dns.message.Message], list[bytes]]


def _answer(query: dns.message.Message, records: int) -> bytes:
    """A TXT answer of `records` records of 200 bytes each."""
    response = dns.message.make_response(query)
    name = query.question[0].name
    response.answer = [
        dns.rrset.from_text_list(
            name, 60, "IN", "TXT", [f'"{i:03}{"x" * 197}"' for i in range(records)]
        )
    ]
    return response.to_wire(max_size=65535)


Serve = Callable[[Answer], Awaitable[int]]


@pytest.fixture
async def server() -> AsyncIterator[Serve]:
    """Starts DNS servers on UDP and TCP of one loopback port each, answering with the wires
    `answer` makes of each question; stopped after the test."""
    loop = asyncio.get_running_loop()
    closing: list[Callable[[], None]] = []

    async def start(answer: Answer) -> int:
        class Udp(asyncio.DatagramProtocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = cast(asyncio.DatagramTransport, transport)

            def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
                for wire in answer(dns.message.from_wire(data)):
                    self.transport.sendto(wire, addr)

        async def tcp(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            (length,) = struct.unpack("!H", await reader.readexactly(2))
            for wire in answer(dns.message.from_wire(await reader.readexactly(length))):
                writer.write(struct.pack("!H", len(wire)) + wire)
            await writer.drain()
            writer.close()

        # The UDP port the system gives may be taken for TCP (another process's connection
        # from that port): then another pair is tried.
        for _ in range(20):
            udp, _ = await loop.create_datagram_endpoint(Udp, local_addr=("127.0.0.1", 0))
            port = int(udp.get_extra_info("sockname")[1])
            try:
                listening = await asyncio.start_server(tcp, "127.0.0.1", port)
            except OSError:
                udp.close()
                continue
            closing.extend([udp.close, listening.close])
            return port
        raise AssertionError("no loopback port free for both UDP and TCP")

    yield start
    for close in closing:
        close()


async def _client(port: int) -> DnsClient:
    return DnsClient(Config(dns_servers=(Nameserver.parse(f"127.0.0.1:{port}"),), dns_timeout=2.0))


async def test_an_answer_over_the_cap_is_refused_unread_over_udp_and_tcp(server: Serve) -> None:
    # over UDP, a datagram of 20,000 bytes to a question that allows 1,232
    udp_port = await server(lambda q: [_answer(q, 100)])
    with pytest.raises(DnsAnswerTooLarge, match=r"over 16,384 \[H-DNS-8\]"):
        await (await _client(udp_port)).txt("_atproto.a.example")

    # over TCP: truncated over UDP, then a length over the cap
    def truncated_then_large(query: dns.message.Message) -> list[bytes]:
        if query.edns >= 0 and query.payload < 2000:  # UDP
            response = dns.message.make_response(query)
            response.flags |= dns.flags.TC
            return [response.to_wire()]
        return [_answer(query, 100)]

    tcp_port = await server(truncated_then_large)
    with pytest.raises(DnsAnswerTooLarge, match=r"over 16,384"):
        await (await _client(tcp_port)).txt("_atproto.a.example")
    assert len(_answer(dns.message.make_query("a.", "TXT"), 100)) > MAX_ANSWER_BYTES


async def test_an_answer_under_the_cap_is_read_and_another_question_s_is_skipped(
    server: Serve,
) -> None:
    def spoof_first(query: dns.message.Message) -> list[bytes]:
        other = dns.message.make_query(query.question[0].name, "TXT")
        other.id = (query.id + 1) % 65536
        return [_answer(other, 1), _answer(query, 3)]

    port = await server(spoof_first)
    records = await (await _client(port)).txt("_atproto.a.example")
    assert [r[0][:3] for r in sorted(records)] == [b"000", b"001", b"002"]
