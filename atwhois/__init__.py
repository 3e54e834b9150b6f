"""atwhois: ATProto identity, resolved and verified both ways, with the evidence.

    import atwhois
    identity = atwhois.lookup("alice.example.com")        # in a script or a notebook
    identity = await atwhois.alookup("alice.example.com")  # in async code
    identity.status, identity.did, identity.handle, identity.to_json()

    # a request proxied by a PDS: its inter-service auth token, checked against the issuer
    verification = atwhois.verify_service_auth(token, "did:web:feed.example#bsky_fg")
    verification.outcome, verification.issuer, verification.rule

    # a record, proven by its repository's signed commit (and is it the CID you hold?)
    record = atwhois.verify_record("at://alice.example.com/app.bsky.feed.post/3k2a", cid=cid)
    record.outcome, record.value, record.matches

    # a moderation label from a third-party labeler, checked against its #atproto_label key
    label = atwhois.verify_label({"ver": 1, "src": "did:plc:…", "uri": …, "sig": {"$bytes": …}})
    label.outcome, label.in_force, label.rule
    # signing in with OAuth: the account's authorization server, found and checked
    server = atwhois.oauth_server("alice.example.com")
    server.outcome, server.issuer, server.authorization_server  # ok, its metadata
    # after the token exchange: the token's sub is the account, its server the issuer
    check = atwhois.check_token_response(token_json, issuer=server.issuer, did=server.did)

Without a `config`, the settings are read as the `atwhois` command reads them: the
`ATWHOIS_*` variables (`ATWHOIS_PLC_URL`, `ATWHOIS_DNS_SERVER`, …). The parts compose through
`Directory`: a `Resolver` resolves now, a `CachedResolver` answers from a cache of verified
bindings, a `Client` asks a running `atwhois serve`; `atwhois.testing` is a world in memory
that stands in for the network in tests.

The sync calls (`lookup`, `verify_service_auth`, `verify_record`, `verify_label`,
`oauth_server`, `check_token_response`) run on one event loop the library keeps in a thread
of its own, the same loop from call to call: a `Resolver` given to two of them keeps its
connections, and they work where a loop already runs (a notebook). An object opened with
`async with` in your own loop belongs to that loop: use it with the async calls there
(mixing the two is refused: `WrongEventLoop`).

What this module exports is the public API; the parts' modules (`atwhois.resolver`,
`atwhois.cache`, …) are internal unless their own documentation says otherwise. Names are
imported on first use, so that `import atwhois` costs little.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from atwhois.foundation.version import VERSION as __version__
from atwhois.resolver.errors import (
    AtwhoisError,
    DidDeactivated,
    InvalidData,
    InvalidInput,
    NotFound,
    ResolutionError,
    UpstreamFailure,
    WrongEventLoop,
)
from atwhois.resolver.outcome import Status

if TYPE_CHECKING:
    from collections.abc import Sequence

    from atwhois.auth import LabelVerifier, ServiceAuthVerifier
    from atwhois.auth.verifier import ReplayNeedsAVerifier
    from atwhois.cache import CachedResolver, Lifetime, Policy
    from atwhois.cache.stores import MemoryStore, NonceStore, SqliteStore, Store
    from atwhois.cache.stores.redis import RedisStore
    from atwhois.resolver.config import Config
    from atwhois.resolver.directory import Directory
    from atwhois.resolver.identity import Identity
    from atwhois.resolver.label import LabelVerification
    from atwhois.resolver.oauth import OAuthServer, TokenCheck
    from atwhois.resolver.record_proof import RecordVerification
    from atwhois.resolver.remote import Client
    from atwhois.resolver.resolver import Resolver
    from atwhois.resolver.service_auth import Expected, Verification

__all__ = [
    "AtwhoisError",
    "CachedResolver",
    "Client",
    "Config",
    "DidDeactivated",
    "Directory",
    "Expected",
    "Identity",
    "InvalidData",
    "InvalidInput",
    "LabelVerification",
    "LabelVerifier",
    "Lifetime",
    "MemoryStore",
    "NonceStore",
    "NotFound",
    "OAuthServer",
    "Policy",
    "RecordVerification",
    "RedisStore",
    "ReplayNeedsAVerifier",
    "ResolutionError",
    "Resolver",
    "ServiceAuthVerifier",
    "SqliteStore",
    "Status",
    "Store",
    "TokenCheck",
    "UpstreamFailure",
    "Verification",
    "WrongEventLoop",
    "__version__",
    "acheck_token_response",
    "alookup",
    "aoauth_server",
    "averify_label",
    "averify_record",
    "averify_service_auth",
    "check_token_response",
    "lookup",
    "oauth_server",
    "verify_label",
    "verify_record",
    "verify_service_auth",
]

_ON_FIRST_USE = {
    "CachedResolver": "atwhois.cache",
    "Client": "atwhois.resolver.remote",
    "Config": "atwhois.resolver.config",
    "Directory": "atwhois.resolver.directory",
    "Identity": "atwhois.resolver.identity",
    "LabelVerification": "atwhois.resolver.label",
    "LabelVerifier": "atwhois.auth",
    "OAuthServer": "atwhois.resolver.oauth",
    "TokenCheck": "atwhois.resolver.oauth",
    "RecordVerification": "atwhois.resolver.record_proof",
    "Resolver": "atwhois.resolver.resolver",
    "ServiceAuthVerifier": "atwhois.auth",
    "ReplayNeedsAVerifier": "atwhois.auth.verifier",
    "Expected": "atwhois.resolver.service_auth",
    "Lifetime": "atwhois.cache",
    "Policy": "atwhois.cache",
    "Store": "atwhois.cache.stores",
    "NonceStore": "atwhois.cache.stores",
    "MemoryStore": "atwhois.cache.stores",
    "SqliteStore": "atwhois.cache.stores",
    "RedisStore": "atwhois.cache.stores.redis",
    "Verification": "atwhois.resolver.service_auth",
}


if not TYPE_CHECKING:  # to a type checker the names are the imports above: a typo fails

    def __getattr__(name: str) -> Any:
        if name in _ON_FIRST_USE:
            return getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
        raise AttributeError(f"module 'atwhois' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


async def alookup(
    identifier: str, *, config: Config | None = None, directory: Directory | None = None
) -> Identity:
    """A handle, DID or at:// URI, resolved and verified both ways. `directory`: who
    answers (a `Resolver`, a `CachedResolver`, a `Client`, `atwhois.testing.World`); by
    default a `Resolver` of `config`, or of the settings in the environment, made for this
    lookup and closed after it."""
    if directory is not None:
        return await directory.lookup(identifier)
    from atwhois.resolver.resolver import Resolver

    async with Resolver(config) as resolver:
        return await resolver.lookup(identifier)


def lookup(
    identifier: str, *, config: Config | None = None, directory: Directory | None = None
) -> Identity:
    """`alookup`, as a plain call (scripts, notebooks, a shell), on the library's loop."""
    from atwhois.foundation.loop import run_sync  # here: the command line starts without it

    return run_sync(alookup(identifier, config=config, directory=directory))


async def averify_service_auth(
    token: str,
    audience: str,
    *,
    method: str | None = None,
    key_ids: Sequence[str] = ("atproto",),
    bare_audience: bool = True,
    replay: bool = False,
    config: Config | None = None,
    directory: Directory | None = None,
) -> Verification:
    """An inter-service auth token checked against its issuer's identity (docs/spec.md:
    SA-*): `audience` is the receiver's DID#service, `method` the NSID the request is for
    (the token's `lxm` must name it), `key_ids` the verification methods accepted.
    `directory` resolves the issuer (a `CachedResolver`, `atwhois.testing.World`'s); a
    `Client` has its daemon verify, where `replay` refuses a nonce seen before. A service
    verifying many tokens keeps one `ServiceAuthVerifier` (its refresh rule, its nonces)."""
    from atwhois.auth import verify_token
    from atwhois.resolver.service_auth import Expected

    expected = Expected(audience, method, tuple(key_ids), bare_audience=bare_audience)
    if directory is not None:
        return await verify_token(token, expected, directory, replay=replay)
    from atwhois.resolver.resolver import Resolver

    async with Resolver(config) as resolver:
        return await verify_token(token, expected, resolver, replay=replay)


def verify_service_auth(
    token: str,
    audience: str,
    *,
    method: str | None = None,
    key_ids: Sequence[str] = ("atproto",),
    bare_audience: bool = True,
    config: Config | None = None,
    directory: Directory | None = None,
) -> Verification:
    """`averify_service_auth`, as a plain call, on the library's loop."""
    verifying = averify_service_auth(
        token,
        audience,
        method=method,
        key_ids=key_ids,
        bare_audience=bare_audience,
        config=config,
        directory=directory,
    )
    from atwhois.foundation.loop import run_sync

    return run_sync(verifying)


async def averify_record(
    uri: str,
    *,
    cid: str | None = None,
    record: bytes | None = None,
    config: Config | None = None,
    directory: Directory | None = None,
) -> RecordVerification:
    """The record an at:// URI names, verified at its PDS (docs/spec.md: R-REC-*): the
    repository's signed commit, the MST path to the key, the record; `outcome` is
    `verified`, `invalid` (`rule` says which), `absent` (`proven` or only said), `inactive`
    or `unavailable`. `cid` or `record` (its JSON or DRISL bytes) is what you hold, and
    `matches` says whether it is the record proven. `directory` answers the identity (a
    `CachedResolver` lends its kept ones, a `Client` has its daemon verify, a
    `testing.World` verifies at its own PDS); by default a `Resolver` of `config`, or of the
    environment's settings. Raises `InvalidInput` for a URI or claim that is not one, before
    anything is asked."""
    from atwhois.auth import verify_record

    if directory is not None:
        settings = config or _config_from_environment()
        return await verify_record(directory, uri, cid=cid, record=record, config=settings)
    from atwhois.resolver.resolver import Resolver

    async with Resolver(config) as resolver:
        return await resolver.verify_record(uri, cid=cid, record=record)


def verify_record(
    uri: str,
    *,
    cid: str | None = None,
    record: bytes | None = None,
    config: Config | None = None,
    directory: Directory | None = None,
) -> RecordVerification:
    """`averify_record`, as a plain call, on the library's loop."""
    from atwhois.foundation.loop import run_sync

    verifying = averify_record(uri, cid=cid, record=record, config=config, directory=directory)
    return run_sync(verifying)


async def averify_label(
    label: Any, *, config: Config | None = None, directory: Directory | None = None
) -> LabelVerification:
    """A moderation label checked against its labeler's identity (docs/spec.md: L-*): its
    signature under the `#atproto_label` key of the document of its `src`, over its fields
    as received. `label` in the lexicon's JSON form (an object with `sig` as `{"$bytes": …}`,
    or its text), or as DRISL (its bytes, or the map a `#labels` frame decodes to).
    `outcome` is `verified` (`in_force` is false for a negation, `neg: true`, or a label
    past its `exp`), `invalid` (`rule` says which) or `unavailable`. `directory` resolves
    the labeler (a `CachedResolver` keeps its document, refreshed once for a rotated key;
    a `Client` has its daemon verify; `atwhois.testing.World`); by default a `Resolver` of
    `config`, or of the environment's settings. A service verifying many keeps one
    `LabelVerifier` (its `verify_many` asks each labeler's document once)."""
    from atwhois.auth import verify_labels

    if directory is not None:
        return (await verify_labels(directory, [label]))[0]
    from atwhois.resolver.resolver import Resolver

    async with Resolver(config) as resolver:
        return (await verify_labels(resolver, [label]))[0]


def verify_label(
    label: Any, *, config: Config | None = None, directory: Directory | None = None
) -> LabelVerification:
    """`averify_label`, as a plain call, on the library's loop."""
    from atwhois.foundation.loop import run_sync

    return run_sync(averify_label(label, config=config, directory=directory))


async def aoauth_server(
    identifier: str, *, config: Config | None = None, directory: Directory | None = None
) -> OAuthServer:
    """An account's OAuth authorization server, found and checked (docs/spec.md: O-*): the
    handle verified both ways (a DID: its document), the PDS its document names, the PDS's
    protected resource metadata naming exactly one server, that server's metadata held to
    the atproto profile. `outcome` is `ok` (`issuer`, `protected_resource`,
    `authorization_server`, `identity`), `invalid` (`rule` says which), `not_verified` (the
    identity's `status`) or `unavailable`. `directory` answers the identity (a
    `CachedResolver` also keeps the documents a few minutes, a `Client` has its daemon find
    the server, `atwhois.testing.World` serves its own); by default a `Resolver` of
    `config`, or of the environment's settings. Raises `InvalidInput` before anything is
    asked for input that names no account."""
    from atwhois.auth import oauth_server

    settings = config or _config_from_environment()
    if directory is not None:
        return await oauth_server(directory, identifier, config=settings)
    from atwhois.resolver.resolver import Resolver

    async with Resolver(settings) as resolver:
        return await oauth_server(resolver, identifier)


def oauth_server(
    identifier: str, *, config: Config | None = None, directory: Directory | None = None
) -> OAuthServer:
    """`aoauth_server`, as a plain call, on the library's loop."""
    from atwhois.foundation.loop import run_sync

    return run_sync(aoauth_server(identifier, config=config, directory=directory))


async def acheck_token_response(
    response: Any,
    *,
    issuer: str,
    did: str | None = None,
    config: Config | None = None,
    directory: Directory | None = None,
) -> TokenCheck:
    """After the OAuth token exchange (docs/spec.md: O-TOK-*): `response` is the token
    endpoint's JSON (text, bytes or decoded), `issuer` the session's authorization server,
    `did` the account the flow started from (None when it started from a server). Checked:
    a DPoP token, `scope` with `atproto`, `sub` that DID, and `sub`'s authorization server,
    resolved afresh, `issuer`. `outcome` is `ok`, `invalid` (`rule`) or `unavailable`.
    Raises `InvalidInput` for an issuer or DID that is not one."""
    from atwhois.auth import check_token_response

    settings = config or _config_from_environment()
    if directory is not None:
        return await check_token_response(
            directory, response, issuer=issuer, did=did, config=settings
        )
    from atwhois.resolver.resolver import Resolver

    async with Resolver(settings) as resolver:
        return await check_token_response(resolver, response, issuer=issuer, did=did)


def check_token_response(
    response: Any,
    *,
    issuer: str,
    did: str | None = None,
    config: Config | None = None,
    directory: Directory | None = None,
) -> TokenCheck:
    """`acheck_token_response`, as a plain call, on the library's loop."""
    from atwhois.foundation.loop import run_sync

    checking = acheck_token_response(
        response, issuer=issuer, did=did, config=config, directory=directory
    )
    return run_sync(checking)


def _config_from_environment() -> Config:
    """The resolution settings as the `atwhois` command reads them from the environment."""
    from atwhois.resolver.config import Config

    return Config.from_environment()
