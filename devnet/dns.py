"""DNS for the test network: Knot (authoritative, by others) serving `test.`, behind a small
proxy that makes chosen names slow, unanswered or SERVFAIL.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import cast

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype

from . import forger, world
from .faults import Faults
from .process import Child

LOOPBACK = "127.0.0.1"


def _quote(chunk: str) -> str:
    return '"' + chunk.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _txt_rdata(value: str, split: bool) -> str:
    if split:  # H-DNS-4: one record, two character-strings
        half = len(value) // 2
        return f"{_quote(value[:half])} {_quote(value[half:])}"
    # A character-string holds 255 bytes at most; longer values become several.
    return " ".join(_quote(value[i : i + 255]) for i in range(0, max(len(value), 1), 255))


def render_zone(
    fill: Callable[[str], str],
    serial: int = 1,
    bulk: int = 0,
    shaped: Mapping[str, str] | None = None,
) -> str:
    """The `test.` zone file: _atproto TXT records, A records for every web host; with
    `shaped` (the network-shaped world's DID of each handle), its PDS domains' hosts and a
    TXT record for each handle on a domain of its own (which has no web host)."""
    lines = [
        "$ORIGIN test.",
        "$TTL 60",
        f"@ SOA ns.test. hostmaster.test. {serial} 3600 600 86400 60",
        "@ NS ns.test.",
        f"ns A {LOOPBACK}",
    ]
    for handle, name in sorted(world.ATPROTO_TXT.items()):
        owner = f"_atproto.{handle}."
        if name.cname:
            lines.append(f"{owner} CNAME {name.cname}")
        lines.extend(f"{owner} TXT {_txt_rdata(fill(v), name.split_strings)}" for v in name.txt)
    lines.extend(f"{n} A {LOOPBACK}" for n in sorted(world.NODATA_NAMES))
    lines.extend(f"{host}. A {LOOPBACK}" for host in world.HTTPS_HOSTS)
    lines.extend(f"{host}. A {addr}" for host, addr in sorted(world.FORBIDDEN_HOSTS.items()))
    # Any other name under bulk.test is a web host too: tests make up did:web identities.
    lines.append(f"*{world.BULK_SUFFIX}. A {LOOPBACK}")
    # The reference PDS and every handle it serves.
    lines += [f"{world.LIVE_PDS_HOST}. A {LOOPBACK}", f"*{world.LIVE_HANDLE_SUFFIX}. A {LOOPBACK}"]
    for index in range(bulk):
        host = world.bulk_host(index)
        lines += [f'_atproto.{host}. TXT "did=did:web:{host}"', f"{host}. A {LOOPBACK}"]
    if shaped:
        for domain, _ in world.PDS_DOMAINS:
            lines += [f"{domain}. A {LOOPBACK}", f"*.{domain}. A {LOOPBACK}"]
        lines.extend(
            f'_atproto.{handle}. TXT "did={did}"'
            for handle, did in shaped.items()
            if handle.endswith(world.OWN_DOMAIN_SUFFIX)
        )
    return "\n".join(lines) + "\n"


def _knot_config(workdir: Path, port: int, policies: str, zones: str) -> str:
    return f"""server:
    rundir: "{workdir}"
    listen: {LOOPBACK}@{port}
database:
    storage: "{workdir}/db"
control:
    listen: "{workdir}/knot.sock"
log:
  - target: stderr
    any: info
template:
  - id: default
    storage: "{workdir}"
    file: "%s.zone"
    zonefile-sync: -1
    zonefile-load: whole
    journal-content: none
{policies}zone:
  - domain: test.
{zones}"""


class Knot:
    """knotd serving the `test.` zone file in `workdir`, and the zones that `zones` (with
    the signing `policies` they name) adds to its configuration; `reload_zone` picks up an
    edited zone."""

    def __init__(self, workdir: Path, port: int, *, policies: str = "", zones: str = "") -> None:
        self.workdir = workdir
        self.port = port
        self.policies, self.zones = policies, zones
        self.config = workdir / "knot.conf"
        self.zone_file = workdir / "test.zone"
        self.child: Child | None = None

    def start(self, zone: str) -> Child:
        (self.workdir / "db").mkdir(parents=True, exist_ok=True)
        self.config.write_text(_knot_config(self.workdir, self.port, self.policies, self.zones))
        self.zone_file.write_text(zone)
        self.child = Child.start(["knotd", "-c", str(self.config)], log=self.workdir / "knotd.log")
        self._wait_until_answering()
        return self.child

    def _wait_until_answering(self) -> None:
        assert self.child is not None
        wait_for_dns(self.child, self.port, self.workdir / "knotd.log")


def wait_for_dns(child: Child, port: int, log: Path, timeout: float = 20) -> None:
    """Until the DNS server `child` answers `ns.test.` on `port`; fails if it dies first."""
    query = dns.message.make_query("ns.test.", "A").to_wire()
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(0.2)
        while time.monotonic() < deadline:
            if child.process.poll() is not None:
                raise RuntimeError(f"{child.argv[0]} exited:\n{log.read_text(errors='replace')}")
            sock.sendto(query, (LOOPBACK, port))
            with contextlib.suppress(TimeoutError):
                answer = dns.message.from_wire(sock.recv(4096))
                if answer.rcode() == dns.rcode.NOERROR and answer.answer:
                    return
            time.sleep(0.05)
    raise TimeoutError(f"{child.argv[0]} did not answer on port {port}")


def reload_zone(knot_dir: Path, zone: str) -> None:
    """Has the knotd configured in `knot_dir` load `zone`'s edited file now (its serial must
    have grown), and waits until it has."""
    subprocess.run(
        ["knotc", "-b", "-c", str(knot_dir / "knot.conf"), "zone-reload", zone],
        check=True,
        capture_output=True,
        timeout=20,
    )


class DnsProxy:
    """UDP and TCP on one loopback port, forwarding raw messages to Knot, except for the
    names the world marks as slow, never answered, or SERVFAIL. `delay` is added to every
    answer (benchmarks use it to model network latency), plus up to `spread` more, fixed per
    name (servers near and far). With `strip_dnssec`, it passes on no DNSSEC record, as a
    resolver or middlebox that does not know DNSSEC. With `forgeries`, it is the forging
    resolver of `devnet.forger`: Knot's answers, altered as that file says."""

    def __init__(
        self,
        upstream_port: int,
        delay: float = 0.0,
        faults: Path | None = None,
        spread: float = 0.0,
        strip_dnssec: bool = False,
        forgeries: Path | None = None,
    ) -> None:
        self.upstream = (LOOPBACK, upstream_port)
        self.strip_dnssec = strip_dnssec
        self.delay = delay
        self.spread = spread
        self.queries = 0
        # Tests break names at run time: {name: "servfail" | "never"} (see `faults`).
        self._faults = Faults(faults) if faults is not None else None
        self._forgeries = Faults(forgeries) if forgeries is not None else None

    def _fault(self, name: str) -> str | None:
        return self._faults.of(name) if self._faults is not None else None

    async def start(self) -> int:
        """UDP and TCP on one free port (a port free for UDP may be taken for TCP: then
        another is tried)."""
        loop = asyncio.get_running_loop()
        for _ in range(50):
            self._udp, _ = await loop.create_datagram_endpoint(
                lambda: _UdpProtocol(self), local_addr=(LOOPBACK, 0)
            )
            bound = int(self._udp.get_extra_info("sockname")[1])
            try:
                self._tcp = await asyncio.start_server(self._serve_tcp, LOOPBACK, bound)
            except OSError:
                self._udp.close()
                continue
            return bound
        raise RuntimeError("no port free for both UDP and TCP")

    def close(self) -> None:
        self._udp.close()
        self._tcp.close()

    async def answer(self, wire: bytes, tcp: bool) -> bytes | None:
        """The bytes to send back for one query, or None to stay silent."""
        self.queries += 1
        try:
            query = dns.message.from_wire(wire)
            name = query.question[0].name.to_text().lower()
        except Exception:
            return None
        fault = self._fault(name)
        if name in world.DNS_NEVER or fault == "never":
            return None
        if self.delay or self.spread:
            await asyncio.sleep(self.delay + world.latency_share(name) * self.spread)
        if name in world.DNS_SERVFAIL or fault == "servfail":
            response = dns.message.make_response(query)
            response.set_rcode(dns.rcode.SERVFAIL)
            return response.to_wire()
        if name in world.DNS_SLOW:
            await asyncio.sleep(world.DNS_SLOW_SECONDS)
        steps = []
        if self._forgeries is not None:
            rdtype = dns.rdatatype.to_text(query.question[0].rdtype)
            steps = forger.steps_for(self._forgeries.current(), name, rdtype)
            made_up = await forger.before_asking(query, steps)
            if made_up is not None:
                return made_up
        reply = await (self._forward_tcp(wire) if tcp else self._forward_udp(wire))
        if reply is not None and steps:
            return forger.forge(query, reply, steps, tcp=tcp)
        return _stripped(reply) if self.strip_dnssec and reply is not None else reply

    async def _forward_udp(self, wire: bytes) -> bytes | None:
        loop = asyncio.get_running_loop()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            await loop.sock_sendto(sock, wire, self.upstream)
            try:
                async with asyncio.timeout(2):
                    return await loop.sock_recv(sock, 65535)
            except TimeoutError:
                return None

    async def _forward_tcp(self, wire: bytes) -> bytes | None:
        reader, writer = await asyncio.open_connection(*self.upstream)
        try:
            writer.write(struct.pack("!H", len(wire)) + wire)
            await writer.drain()
            (length,) = struct.unpack("!H", await reader.readexactly(2))
            return await reader.readexactly(length)
        finally:
            writer.close()

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (length,) = struct.unpack("!H", await reader.readexactly(2))
                reply = await self.answer(await reader.readexactly(length), tcp=True)
                if reply is None:
                    await asyncio.sleep(3600)  # never answered: the client must time out
                    return
                writer.write(struct.pack("!H", len(reply)) + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


_DNSSEC_TYPES = {
    dns.rdatatype.RRSIG,
    dns.rdatatype.NSEC,
    dns.rdatatype.NSEC3,
}


def _stripped(wire: bytes) -> bytes:
    """The response without signatures and denials, and without the DO bit."""
    response = dns.message.from_wire(wire)
    for section in (response.answer, response.authority, response.additional):
        section[:] = [rrset for rrset in section if rrset.rdtype not in _DNSSEC_TYPES]
    response.ednsflags &= ~dns.flags.DO
    return response.to_wire()


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, proxy: DnsProxy) -> None:
        self.proxy = proxy
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        task = asyncio.ensure_future(self._reply(data, addr))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _reply(self, data: bytes, addr: tuple[str, int]) -> None:
        reply = await self.proxy.answer(data, tcp=False)
        if reply is not None:
            self.transport.sendto(reply, addr)
