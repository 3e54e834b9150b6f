"""The world's network, as the resolver's edges ask it: DNS (the recursive resolver and
the zones' own nameservers), the PLC directory, strangers' hosts (well-known, did:web), the
accounts' PDSes (their `com.atproto.sync.*` methods) and the OAuth documents of their
servers; each fault the world holds answered as the real edges answer it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import coincurve

from atwhois.resolver.errors import NotFound, ResponseTooLarge, UpstreamFailure
from atwhois.resolver.response import AuthoritativeTxt, Response

from .oauth import authorization_server_metadata, protected_resource_metadata

if TYPE_CHECKING:
    from . import World

SYNC = "/xrpc/com.atproto.sync."  # the PDS's repository methods


class Edge:
    """The resolver's DNS client and fetchers, answered from a `World`."""

    def __init__(self, world: World) -> None:
        self.world = world

    async def txt(self, name: str) -> list[list[bytes]]:
        self.world.asked["dns"] += 1
        held = self.world.resolver_holds
        return self._records(name, self.world.txt if held is None else held)

    async def txt_answer(self, name: str) -> AuthoritativeTxt:
        """The zone's own answer (`hold_dns` does not reach it)."""
        self.world.asked["dns_authority"] += 1
        records = self._records(name, self.world.txt)
        return AuthoritativeTxt("ns.world.example (atwhois.testing)", records, None)

    def _records(self, name: str, zone: dict[str, list[str]]) -> list[list[bytes]]:
        fault = self.world._fault(name.removeprefix("_atproto.").rstrip("."))
        if fault == "5xx":
            raise UpstreamFailure(f"{name}: SERVFAIL (the world's fault)")
        if fault == "nxdomain":
            return []
        return [[value.encode()] for value in zone.get(name.rstrip("."), [])]

    async def get(
        self,
        url: str,
        *,
        max_bytes: int,
        timeout: float,
        max_redirects: int = 0,
        accept: str = "*/*",
    ) -> Response:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if url.startswith(self.world.plc_url + "/"):
            self.world.asked["plc"] += 1
            return self._directory(url, parts.path.lstrip("/"))
        self.world.asked["pds" if parts.path.startswith(SYNC) else "https"] += 1
        fault = self.world._fault(host)
        if fault == "nxdomain":  # as the fetcher says of a host with no address: absent
            raise NotFound(f"{host}: NXDOMAIN (the world's fault)")
        if fault == "5xx":
            return Response(url, 503, b"")
        if parts.path.startswith(SYNC):
            method = parts.path.removeprefix(SYNC)
            return _capped(self._sync(url, host, method, parse_qs(parts.query)), max_bytes)
        if parts.path == "/.well-known/atproto-did" and host in self.world.well_known:
            return _capped(Response(url, 200, self.world.well_known[host].encode()), max_bytes)
        document = self._oauth(url, f"{parts.scheme}://{parts.netloc}", parts.path)
        if document is not None:
            body = json.dumps(document).encode()
            return _capped(Response(url, 200, body, content_type="application/json"), max_bytes)
        return Response(url, 404, b"")

    def _sync(self, url: str, host: str, method: str, query: dict[str, list[str]]) -> Response:
        """A `com.atproto.sync.*` method of the PDS at `host` (`Repository.answer`), or
        `RepoNotFound` for an account it does not host."""
        did = query.get("did", [""])[0]
        account = self.world.accounts.get(did)
        if account is None or urlsplit(account.pds).hostname != host:
            body = {"error": "RepoNotFound", "message": f"Could not find repo for DID: {did}"}
            return Response(url, 400, json.dumps(body).encode())
        signer = coincurve.PrivateKey(account.secret)
        status, answer = account.repository.answer(method, did, signer, query)
        return Response(url, status, answer)

    def _oauth(self, url: str, origin: str, path: str) -> Any:
        """The OAuth document at `url`: a test's (`oauth_documents`), else the world's."""
        if url in self.world.oauth_documents:
            return self.world.oauth_documents[url]
        pdses = {account.pds for account in self.world.accounts.values()}
        if path == "/.well-known/oauth-protected-resource" and origin in pdses:
            return protected_resource_metadata(origin, self.world.entryways.get(origin, origin))
        if path == "/.well-known/oauth-authorization-server":
            if origin in self.world.entryways.values():
                return authorization_server_metadata(origin)
            if origin in pdses and origin not in self.world.entryways:
                return authorization_server_metadata(origin, protected_resources=[origin])
        return None

    def _directory(self, url: str, did: str) -> Response:
        if self.world._fault(did) == "5xx":
            return Response(url, 503, b"")
        account = self.world.accounts.get(did)
        if account is None or account.served is None:
            return Response(url, 404, b'{"message": "DID not registered"}')
        if account.tombstoned:
            return Response(url, 410, b'{"message": "DID not available"}')
        return Response(url, 200, json.dumps(account.served).encode())

    async def aclose(self) -> None:
        pass


def _capped(response: Response, max_bytes: int) -> Response:
    if len(response.body) > max_bytes:
        raise ResponseTooLarge(f"{response.url}: over {max_bytes} bytes")
    return response
