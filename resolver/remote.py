"""`RemoteDirectory`: a running `atwhois serve` as a `Directory` (`lookup --server URL`),
which shares its cache with everyone who asks it. It reads `/v1/identity/{identifier}`,
the same report a local lookup gives, answered from the daemon's cache."""

from __future__ import annotations

import urllib.parse

import httpx

from .errors import AtwhoisError
from .identity import Identity, now_iso
from .outcome import Status
from .untrusted import parse_json

_REFRESH = "/xrpc/com.atproto.identity.refreshIdentity"


class PurgeNotOffered(AtwhoisError):
    """The daemon's API has no purge: it is purged where it runs (`atwhois cache purge`)."""


class RemoteDirectory:
    def __init__(self, url: str, timeout: float = 30.0, *, token: str | None = None) -> None:
        """`token`: the daemon's refresh token, which `refresh` needs."""
        self.url = url.rstrip("/")
        self._token = token
        self._client = httpx.AsyncClient(base_url=self.url, timeout=timeout)

    async def lookup(self, identifier: str) -> Identity:
        path = "/v1/identity/" + urllib.parse.quote(identifier, safe="")
        try:
            response = await self._client.get(path)
            return Identity.from_json(parse_json(response.content))
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as err:
            return self._unanswered(identifier, f"did not answer: {err or type(err).__name__}")

    async def refresh(self, identifier: str) -> Identity:
        """The daemon resolves every part afresh (`refreshIdentity`, with the token), then
        its report."""
        if self._token is None:
            return self._unanswered(identifier, "refreshes only with its token (refresh_token)")
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            response = await self._client.post(
                _REFRESH, json={"identifier": identifier}, headers=headers
            )
        except httpx.HTTPError as err:
            return self._unanswered(identifier, f"did not answer: {err or type(err).__name__}")
        if response.status_code in (401, 403):
            return self._unanswered(identifier, f"refused the refresh ({response.status_code})")
        return await self.lookup(identifier)

    async def purge(self, identifier: str) -> list[str]:
        raise PurgeNotOffered(
            f"atwhois serve at {self.url} offers no purge: run `atwhois cache purge` where it runs"
        )

    def _unanswered(self, identifier: str, why: str) -> Identity:
        return Identity(
            query=identifier,
            status=Status.UNAVAILABLE,
            checked_at=now_iso(),
            error=f"atwhois serve at {self.url} {why}",
        )

    async def aclose(self) -> None:
        await self._client.aclose()
