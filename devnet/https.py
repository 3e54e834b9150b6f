"""HTTPS hosts of the test network: real TLS with a CA made at start-up, many host names on
one loopback port chosen by SNI, each serving files from disk or a scripted misbehaviour.
"""

from __future__ import annotations

import asyncio
import datetime
import gzip
import json
import ssl
from pathlib import Path

import trustme

from . import world
from .faults import Faults, reset

LOOPBACK = "127.0.0.1"
_MAX_REQUEST_HEAD = 16 * 1024
_IDLE_SECONDS = 5.0  # a kept connection's wait for its next request


_PDS_HOSTS = {domain for domain, _ in world.PDS_DOMAINS}


class Certificates:
    """A test CA, a leaf per host, and the three broken certificates of the world."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA(organization_name="atwhois devnet CA")
        self.ca_file = directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self._contexts: dict[str, ssl.SSLContext] = {}
        stranger = trustme.CA(organization_name="a CA nobody trusts")
        past = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
        for host in world.HTTPS_HOSTS:
            if host == world.TLS_EXPIRED:
                leaf = self.ca.issue_cert(
                    host, not_before=past, not_after=past + datetime.timedelta(days=30)
                )
            elif host == world.TLS_UNKNOWN_CA:
                leaf = stranger.issue_cert(host)
            elif host == world.TLS_WRONG_NAME:
                leaf = self.ca.issue_cert("someone-else.test")
            else:
                leaf = self.ca.issue_cert(host)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            leaf.configure_cert(context)
            self._contexts[host] = context
        self._bulk = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("*" + world.BULK_SUFFIX).configure_cert(self._bulk)
        self._live = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert(world.LIVE_PDS_HOST, "*" + world.LIVE_HANDLE_SUFFIX).configure_cert(
            self._live
        )
        self._pds_domains = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        names = [name for domain, _ in world.PDS_DOMAINS for name in (domain, "*." + domain)]
        self.ca.issue_cert(*names).configure_cert(self._pds_domains)
        self.default = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("default.test").configure_cert(self.default)
        self.default.sni_callback = self._choose

    def _choose(self, sock: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
        if name is None:
            return
        if name.lower() in self._contexts:
            sock.context = self._contexts[name.lower()]
        elif name.lower().endswith(world.BULK_SUFFIX):
            sock.context = self._bulk
        elif _is_live(name.lower()):
            sock.context = self._live
        elif world.shaped_pds(name.lower()) or name.lower() in _PDS_HOSTS:
            sock.context = self._pds_domains


class HttpsHosts:
    """One TLS listener. Files live in `root/<host><path>`, so tests can change a body
    between two requests; the hosts of `world.HTTPS_BEHAVIOURS` are scripted here. With
    `shaped` (the network-shaped world's DID of each handle), each PDS domain's host answers
    the well-known file of every handle under it, as `*.bsky.social` does. `delay` is added
    to every response, plus up to `spread` more, fixed per host."""

    def __init__(
        self,
        root: Path,
        certificates: Certificates,
        delay: float = 0.0,
        faults: Path | None = None,
        live_port: int | None = None,
        shaped: dict[str, str] | None = None,
        spread: float = 0.0,
        agents: Path | None = None,
    ) -> None:
        self.root = root
        self.shaped = shaped or {}
        self.spread = spread
        self.live_port = live_port  # the reference PDS: its host and its users' handles
        self.certificates = certificates
        self.delay = delay
        self.requests = 0
        self.connections = 0
        self._faults = Faults(faults) if faults is not None else None
        # each host and User-Agent that asked, a line the first time (what a server logs)
        self.agents, self._agents_seen = agents, set[tuple[str, str]]()

    async def start(self, port: int = 0) -> int:
        self._server = await asyncio.start_server(
            self._serve,
            LOOPBACK,
            port,
            ssl=self.certificates.default,
            ssl_handshake_timeout=10,
        )
        return int(self._server.sockets[0].getsockname()[1])

    def close(self) -> None:
        self._server.close()

    def file_for(self, host: str, path: str) -> Path:
        return self.root / host / path.lstrip("/")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            # Like a real server, the bulk world's generated answers keep the connection
            # open for the next request (a client that reuses it saves a TLS handshake);
            # every other answer closes it.
            kept = await self._request(reader, writer)
            while kept:
                kept = await asyncio.wait_for(self._request(reader, writer), _IDLE_SECONDS)
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            ssl.SSLError,
            TimeoutError,
            ValueError,
        ):
            pass
        finally:
            writer.close()

    async def _request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One request answered; whether the connection stays open for another."""
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > _MAX_REQUEST_HEAD:
            return False
        self.requests += 1
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = dict(
            (k.strip().lower(), v.strip())
            for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)
        )
        host = headers.get("host", "").split(":")[0].lower()
        self._saw(host, headers.get("user-agent", ""))
        if self.delay or self.spread:
            await asyncio.sleep(self.delay + world.latency_share(host) * self.spread)
        kept = await self._respond(writer, host, target, method)
        return bool(kept) and headers.get("connection", "").lower() != "close"

    def _saw(self, host: str, agent: str) -> None:
        if self.agents is not None and (host, agent) not in self._agents_seen:
            self._agents_seen.add((host, agent))
            with self.agents.open("a") as log:
                log.write(json.dumps({"host": host, "user_agent": agent}) + "\n")

    async def _respond(
        self, writer: asyncio.StreamWriter, host: str, target: str, method: str
    ) -> bool | None:
        path = target.split("?")[0]
        fault = self._faults.of(host) if self._faults is not None else None
        if isinstance(fault, dict):  # an answer written out: a status, its headers, a body
            headers = list(fault.get("headers", {}).items())
            body = fault.get("body", "").encode()
            return await _send(writer, int(fault["status"]), body, headers)
        if fault == "503":
            return await _send(writer, 503, b"try later")
        if fault == "html":
            return await _send(writer, 200, b"<!doctype html><p>maintenance</p>")
        if fault == "reset":
            return reset(writer)
        if fault == "hang":
            await asyncio.sleep(3600)
            return None
        if self.live_port is not None and _is_live(host):  # with its query: XRPC's parameters
            return await self._from_pds(writer, host, target, method)
        shaped = self.shaped.get(host) if world.shaped_pds(host) else None
        if shaped is not None and path == world.WELL_KNOWN:
            return await _send(writer, 200, shaped.encode(), keep_alive=True)
        generated = world.bulk_document(host) if host.endswith(world.BULK_SUFFIX) else None
        if generated is not None and path == world.DID_JSON:
            document = json.dumps(generated).encode()
            json_type = [("Content-Type", "application/json")]
            return await _send(writer, 200, document, json_type, keep_alive=True)
        if generated is not None and path == world.WELL_KNOWN:
            return await _send(writer, 200, f"did:web:{host}".encode(), keep_alive=True)
        scripted = world.SCRIPTED_BULK.fullmatch(host.removesuffix(world.BULK_SUFFIX))
        if scripted is not None and scripted.group("hops") is not None:
            left = int(scripted.group("hops")) if path == world.WELL_KNOWN else None
            if path.startswith("/hop/"):
                left = int(path.removeprefix("/hop/"))
            if left:  # one more redirect, then the well-known file
                return await _send(writer, 302, b"", [("Location", f"/hop/{left - 1}")])
            path = world.WELL_KNOWN
        if scripted is not None and scripted.group("status") is not None:
            body = self.file_for(host, world.WELL_KNOWN).read_bytes()
            return await _send(writer, int(scripted.group("status")), body)
        if host == "redirect.test":
            return await _send(writer, 302, b"", [("Location", "https://files.test/nina")])
        if host == "loop.test":
            return await _send(writer, 301, b"", [("Location", f"https://loop.test/{path}x")])
        if host == "redirect-private.test":
            return await _send(writer, 302, b"", [("Location", f"https://0.0.0.0{path}")])
        if host == "redirect-http.test":
            return await _send(writer, 302, b"", [("Location", f"http://alice.test{path}")])
        if host == "chunked.test":
            writer.write(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            )
            chunk = b"a" * (1024 * 1024)
            for _ in range(4):
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            return None
        if host == "bigdoc.test":
            body = b'{"id": "did:web:bigdoc.test", "padding": "' + b"x" * 256 * 1024 + b'"}'
            return await _send(writer, 200, body, [("Content-Type", "application/json")])
        if host == "gzip.test":
            body = gzip.compress(b"did:plc:" + b"a" * 24)
            return await _send(writer, 200, body, [("Content-Encoding", "gzip")])
        if host == "error.test":
            return await _send(writer, 503, b"try later")
        if host == "huge.test":
            return await _send(writer, 200, b"did:plc:" + b"a" * (4 * 1024 * 1024))
        if host == "slow-headers.test":
            await asyncio.sleep(30)
            return await _send(writer, 200, b"too late")
        if host == "trickle.test":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\nConnection: close\r\n\r\n")
            for byte in b"did:plc:" + b"a" * 56:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(1)
            return None
        file = self.file_for(host, path)
        if method != "GET" or not file.is_file():
            return await _send(writer, 404, b"not found")
        as_json = path.endswith(".json") or path in world.OAUTH_DOCUMENTS
        content_type = "application/json" if as_json else "text/plain"
        return await _send(writer, 200, file.read_bytes(), [("Content-Type", content_type)])

    async def _from_pds(
        self, writer: asyncio.StreamWriter, host: str, target: str, method: str
    ) -> None:
        """What the PDS answers for this host (its handles' well-known files, its XRPC
        methods), passed on."""
        reader, upstream = await asyncio.open_connection(LOOPBACK, self.live_port)
        try:
            upstream.write(
                f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
            )
            await upstream.drain()
            writer.write(await reader.read())
            await writer.drain()
        finally:
            upstream.close()


def _is_live(host: str) -> bool:
    return host == world.LIVE_PDS_HOST or host.endswith(world.LIVE_HANDLE_SUFFIX)


_REASONS = {
    200: "OK",
    301: "Moved Permanently",
    302: "Found",
    404: "Not Found",
    429: "Too Many Requests",
    503: "Service Unavailable",
}


async def _send(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    headers: list[tuple[str, str]] | None = None,
    *,
    keep_alive: bool = False,
) -> bool:
    head = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Whatever')}",
        f"Content-Length: {len(body)}",
        "Connection: keep-alive" if keep_alive else "Connection: close",
    ]
    head += [f"{k}: {v}" for k, v in headers or []]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
    await writer.drain()
    return keep_alive
