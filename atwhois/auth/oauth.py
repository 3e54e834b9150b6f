"""OAuth discovery from an account (docs/spec.md: O-*) through whatever answers identities,
and a token response checked against its account and issuer. A running daemon (`Client`)
finds the server there; a cache (`CachedResolver`) lends its kept identities to its
resolver, which fetches the documents and keeps them beside the cache (O-CACHE-1); a
directory with a web edge of its own (a `Resolver`, `atwhois.testing.World`) answers both
itself and keeps nothing; any other directory answers the identity, and a resolver of
`config` fetches. The rules are `resolver.oauth`'s, the flow `resolver.oauth_flow`'s."""

from __future__ import annotations

import weakref
from typing import Any, Protocol, runtime_checkable

from atwhois.cache import CachedResolver
from atwhois.resolver import Config, Resolver
from atwhois.resolver.directory import Directory
from atwhois.resolver.oauth import OAuthServer, TokenCheck
from atwhois.resolver.oauth_flow import KeptDocuments, check_token, discover
from atwhois.resolver.remote import Client
from atwhois.resolver.response import Getter

# The documents kept beside each cache, for as long as the cache lives (the daemon's, or a
# library user's): keyed by the cache itself, so that nothing outlives it.
_KEPT: weakref.WeakKeyDictionary[CachedResolver, KeptDocuments] = weakref.WeakKeyDictionary()


@runtime_checkable
class _WithWeb(Protocol):
    """A directory whose network edge fetches the documents too."""

    @property
    def web(self) -> Getter: ...


async def oauth_server(
    directory: Directory, identifier: str, *, config: Config | None = None, fresh: bool = False
) -> OAuthServer:
    """The authorization server of the account `identifier` names, found and checked;
    `fresh`: nothing kept is used (a daemon's is its own). Raises `InvalidInput` before
    anything is asked."""
    if isinstance(directory, Client):
        return await directory.oauth_server(identifier)
    if isinstance(directory, CachedResolver):
        resolver = directory.resolver
        kept = _KEPT.get(directory)
        if kept is None:  # on the cache's clock, for as long as the cache lives
            kept = _KEPT[directory] = KeptDocuments(clock=directory.clock)
        found = discover(
            directory, resolver.web, identifier, config=resolver.config, kept=kept, fresh=fresh
        )
        return await found
    settings = _config(directory, config)
    if isinstance(directory, _WithWeb):
        return await discover(directory, directory.web, identifier, config=settings, fresh=fresh)
    async with Resolver(settings) as resolver:
        return await discover(directory, resolver.web, identifier, config=settings, fresh=fresh)


async def check_token_response(
    directory: Directory,
    response: Any,
    *,
    issuer: str,
    did: str | None = None,
    config: Config | None = None,
) -> TokenCheck:
    """`response` (the token endpoint's JSON) checked: `sub` the DID the flow started from
    (`did`; None when it started from a server) and, resolved afresh through `directory`,
    an account whose authorization server is `issuer`. Raises `InvalidInput` for an issuer
    or DID that is not one."""

    async def afresh(sub: str) -> OAuthServer:
        return await oauth_server(directory, sub, config=config, fresh=True)

    dev = _config(directory, config).dev
    return await check_token(response, issuer=issuer, did=did, discover_fresh=afresh, dev=dev)


def _config(directory: Directory, config: Config | None) -> Config:
    """The settings the flow runs under: the directory's resolver's, else `config`."""
    if isinstance(directory, CachedResolver):
        return directory.resolver.config
    if isinstance(directory, Resolver):
        return directory.config
    return config or Config()
