"""Where the CLI gets its answers: a resolver in this process (optionally cached), or a
running `atwhois serve` (`--server URL`), which shares its cache with everyone who asks it."""

from __future__ import annotations

import urllib.parse
from typing import Protocol

import httpx

from cache import CachedResolver
from resolver import Identity, Resolver, Status
from resolver.identity import now_iso
from resolver.untrusted import parse_json


class Source(Protocol):
    async def lookup(self, identifier: str) -> Identity: ...

    async def aclose(self) -> None: ...


class LocalSource:
    """`refresh`: with a cache, resolve every part afresh and update the cache."""

    def __init__(self, resolver: Resolver | CachedResolver, *, refresh: bool = False) -> None:
        self.resolver = resolver
        self.refresh = refresh

    async def lookup(self, identifier: str) -> Identity:
        if self.refresh and isinstance(self.resolver, CachedResolver):
            return await self.resolver.refresh(identifier)
        return await self.resolver.lookup(identifier)

    async def aclose(self) -> None:
        await self.resolver.aclose()


class ServerSource:
    """Reads `/v1/identity/{identifier}`: the same report, answered from the daemon's cache."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.AsyncClient(base_url=self.url, timeout=timeout)

    async def lookup(self, identifier: str) -> Identity:
        path = "/v1/identity/" + urllib.parse.quote(identifier, safe="")
        try:
            response = await self._client.get(path)
            return Identity.from_json(parse_json(response.content))
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as err:
            return Identity(
                query=identifier,
                status=Status.UNAVAILABLE,
                checked_at=now_iso(),
                error=f"atwhois serve at {self.url} did not answer: {err or type(err).__name__}",
            )

    async def aclose(self) -> None:
        await self._client.aclose()
